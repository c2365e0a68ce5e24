"""Calls into a ptx library: device arrays, host arrays staged through the device, results.

In: a library built with ``--target ptx`` (its ``tilec_device_*`` / ``tilec_copy_*`` helpers,
so Python needs no CUDA bindings) and, per call, NumPy arrays or device arrays: anything with
``__cuda_array_interface__`` (CuPy, Numba, PyTorch except bfloat16) or ``__dlpack__`` on a
CUDA device (PyTorch, JAX...).  Out: when every tensor argument is a NumPy array, NumPy results
(the arguments are copied to the device and the results back); otherwise :class:`DeviceArray`
results, which expose ``__cuda_array_interface__`` (``torch.as_tensor(r, device="cuda")``)
and ``numpy()``; ``out=`` may hold either kind.  Kernels run on the default stream.

Imports NumPy, ml_dtypes and ctypes only, like the loader.
"""
from __future__ import annotations

import ctypes
from typing import Any, Callable, Sequence

import ml_dtypes
import numpy as np

KDL_CUDA = 2
_DLPACK_DTYPES = {(2, 16): np.dtype(np.float16), (2, 32): np.dtype(np.float32),
                  (0, 32): np.dtype(np.int32), (4, 16): np.dtype(ml_dtypes.bfloat16)}


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class Device:
    """The device helpers a ptx library exports."""

    def __init__(self, cdll: ctypes.CDLL, last_error: Callable[[], str]) -> None:
        self.cdll = cdll
        self.last_error = last_error
        cdll.tilec_device_alloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int64]
        cdll.tilec_device_free.argtypes = [ctypes.c_void_p]
        for name in ("tilec_copy_to_device", "tilec_copy_to_host"):
            getattr(cdll, name).argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
        cdll.tilec_synchronize.argtypes = [ctypes.c_void_p]

    def check(self, status: int) -> None:
        if status != 0:
            raise RuntimeError(self.last_error())

    def empty(self, shape: tuple[int, ...], dtype: np.dtype) -> "DeviceArray":
        pointer = ctypes.c_void_p()
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        self.check(self.cdll.tilec_device_alloc(ctypes.byref(pointer), nbytes))
        return DeviceArray(pointer.value or 0, shape, dtype, owner=self)

    def upload(self, array: np.ndarray) -> "DeviceArray":
        copy = self.empty(array.shape, array.dtype)
        self.check(self.cdll.tilec_copy_to_device(copy.pointer, array.ctypes.data, array.nbytes))
        return copy

    def download(self, source: "DeviceArray", into: np.ndarray) -> None:
        self.check(self.cdll.tilec_copy_to_host(into.ctypes.data, source.pointer, into.nbytes))

    def synchronize(self) -> None:
        self.check(self.cdll.tilec_synchronize(None))

    # -- a call ---------------------------------------------------------------------------------
    def tensor(self, dtype: np.dtype, value: Any, role: str,
               host: Callable[[Any], np.ndarray]) -> "np.ndarray | DeviceArray":
        """``value`` as a device array, or the NumPy array ``host`` makes of it."""
        found = device_array(value, role)
        if found is None:
            return host(value)
        if found.dtype != dtype:
            raise TypeError(f"{role}: expected dtype {dtype}, got {found.dtype}")
        return found

    def call(self, entry: Callable[..., int], inputs: Sequence[Any], results: Sequence[np.dtype],
             shapes: Sequence[tuple[int, ...]], out: Any, tail: list[Any]) -> list[Any]:
        """Run ``entry`` on device copies of host ``inputs`` (device ones as they are) into
        results of ``shapes`` (or ``out``), ``tail`` being its other arguments; the results."""
        on_host = all(isinstance(a, np.ndarray) for a in inputs)
        staged = [self.upload(a) if isinstance(a, np.ndarray) else a for a in inputs]
        given = [None] * len(results) if out is None else \
            (list(out) if isinstance(out, (tuple, list)) else [out])
        targets: list[Any] = []
        buffers: list[DeviceArray] = []
        for r, (value, shape, dtype) in enumerate(zip(given, shapes, results)):
            role = f"out[{r}]" if len(results) > 1 else "out"
            target = value if isinstance(value, np.ndarray) else \
                None if value is None else device_array(value, role)
            if value is not None and target is None:
                raise TypeError(f"{role}: expected a NumPy or device array, got "
                                f"{type(value).__name__}")
            if target is not None and (tuple(target.shape) != shape or target.dtype != dtype):
                raise ValueError(f"{role}: expected {dtype} {shape}, got {target.dtype} "
                                 f"{tuple(target.shape)}")
            targets.append(target)
            buffers.append(target if isinstance(target, DeviceArray) else self.empty(shape, dtype))
        _no_overlap(staged, buffers)
        self.check(entry(*[a.pointer for a in staged + buffers], *tail, None))
        returned: list[Any] = []
        for target, buffer in zip(targets, buffers):
            if isinstance(target, np.ndarray) or (target is None and on_host):
                host = target if target is not None else np.empty(buffer.shape, buffer.dtype)
                self.download(buffer, host)
                returned.append(host)
            else:
                returned.append(target if target is not None else buffer)
        return returned if out is None else given


def _no_overlap(inputs: Sequence["DeviceArray"], outputs: Sequence["DeviceArray"]) -> None:
    for k, o in enumerate(outputs):
        for name, a in [(f"argument {i}", x) for i, x in enumerate(inputs)] + \
                       [(f"out[{j}]", x) for j, x in enumerate(outputs[:k])]:
            if o.nbytes and a.nbytes and o.pointer < a.pointer + a.nbytes and \
                    a.pointer < o.pointer + o.nbytes:
                raise ValueError(f"out[{k}] overlaps {name} on the device; outputs must not "
                                 "share memory with arguments or other outputs")


class DeviceArray:
    """A contiguous row-major array in device memory: a caller's (kept alive while used) or
    one the runtime allocated for a result (freed with this object)."""

    def __init__(self, pointer: int, shape: tuple[int, ...], dtype: np.dtype,
                 owner: Any = None, keep: Any = None) -> None:
        self.pointer = pointer
        self.shape = tuple(int(s) for s in shape)
        self.dtype = np.dtype(dtype)
        self._owner = owner            # a Device when this object frees the memory
        self._keep = keep              # what keeps a caller's memory alive

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @property
    def __cuda_array_interface__(self) -> dict:
        if self.dtype == ml_dtypes.bfloat16:
            raise TypeError("bfloat16 has no __cuda_array_interface__ type string; use numpy()")
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (self.pointer, False),
                "strides": None, "version": 3}

    def numpy(self) -> np.ndarray:
        """A host copy (needs the runtime that allocated it, or wraps a caller's array)."""
        if not isinstance(self._owner, Device):
            raise TypeError("numpy() copies arrays the runtime allocated; copy a caller's "
                            "device array with its own library")
        host = np.empty(self.shape, self.dtype)
        self._owner.download(self, host)
        return host

    def __del__(self) -> None:
        if isinstance(self._owner, Device) and self.pointer:
            self._owner.cdll.tilec_device_free(self.pointer)

    def __repr__(self) -> str:
        return f"<tilec DeviceArray {self.dtype} {self.shape} at 0x{self.pointer:x}>"


def device_array(value: Any, role: str) -> DeviceArray | None:
    """``value`` viewed as a :class:`DeviceArray` when it lives on a CUDA device, else None;
    ValueError when it is not contiguous and row-major."""
    if isinstance(value, DeviceArray):
        return value
    interface = None
    if not isinstance(value, np.ndarray) and hasattr(value, "__cuda_array_interface__"):
        try:
            interface = value.__cuda_array_interface__
        except (TypeError, AttributeError):   # PyTorch's bfloat16: DLPack below
            interface = None
    if interface is not None:
        shape = tuple(interface["shape"])
        dtype = np.dtype(interface["typestr"])
        _contiguous(shape, interface.get("strides"), dtype.itemsize, role)
        return DeviceArray(interface["data"][0] or 0, shape, dtype, keep=value)
    if isinstance(value, np.ndarray) or not hasattr(value, "__dlpack_device__"):
        return None
    if value.__dlpack_device__()[0] != KDL_CUDA:
        return None
    capsule = value.__dlpack__()
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    tensor = _DLTensor.from_address(get(capsule, b"dltensor"))
    shape = tuple(tensor.shape[i] for i in range(tensor.ndim))
    code = (tensor.dtype.code, tensor.dtype.bits)
    if code not in _DLPACK_DTYPES or tensor.dtype.lanes != 1:
        raise TypeError(f"{role}: unsupported DLPack dtype (code {code[0]}, {code[1]} bits)")
    dtype = _DLPACK_DTYPES[code]
    strides = None if not tensor.strides else \
        tuple(tensor.strides[i] * dtype.itemsize for i in range(tensor.ndim))
    _contiguous(shape, strides, dtype.itemsize, role)
    return DeviceArray((tensor.data or 0) + tensor.byte_offset, shape, dtype,
                       keep=(value, capsule))


def _contiguous(shape: tuple[int, ...], strides: Any, itemsize: int, role: str) -> None:
    if strides is None:
        return
    want, step = [], itemsize
    for d in reversed(shape):
        want.insert(0, step)
        step *= d
    if any(s != w and d != 1 for s, w, d in zip(strides, want, shape)):
        raise ValueError(f"{role}: expected a contiguous row-major device array, got strides "
                         f"{tuple(strides)} for shape {shape}")
