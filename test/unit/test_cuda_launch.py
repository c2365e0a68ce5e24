"""The CUDA launcher (tilec/runtime/tilec_cuda.c) against a stand-in driver: a small
``libcuda.so.1`` built here whose functions succeed and count launches, so that the
launcher's own arithmetic runs without a GPU.  A launch over no rows (a dimension of 0) is
no launch at all and succeeds; it used to divide by zero.  An attention launch whose keys
the grid splits (tilec_cuda_launch_split) takes the split rule of
tilec/codegen/ptx/attention.py, allocates and zeroes its workspace, launches tiles x splits
blocks with it, and fails naming the kernel when the workspace cannot be allocated."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tilec.codegen.ptx.attention import BLOCK_M, attention_splits

RUNTIME = Path(__file__).resolve().parents[2] / "tilec" / "runtime"

DRIVER = r"""
#include <stddef.h>
#include <stdlib.h>
typedef int CUresult;
int launches = 0;
unsigned grid = 0;
unsigned long long allocated = 0, zeroed_at = 0, zeroed = 0;
CUresult cuInit(unsigned f) { return 0; }
CUresult cuGetErrorString(CUresult r, const char** s) { *s = "stand-in"; return 0; }
CUresult cuDeviceGet(int* d, int o) { *d = 0; return 0; }
CUresult cuDeviceGetAttribute(int* v, int a, int d) { *v = a == 16 ? 132 : 232448; return 0; }
CUresult cuDevicePrimaryCtxRetain(void** c, int d) { *c = (void*)&launches; return 0; }
CUresult cuCtxGetCurrent(void** c) { *c = (void*)&launches; return 0; }
CUresult cuCtxSetCurrent(void* c) { return 0; }
CUresult cuCtxGetDevice(int* d) { *d = 0; return 0; }
CUresult cuModuleLoadData(void** m, const void* image) { *m = (void*)&launches; return 0; }
CUresult cuModuleGetFunction(void** f, void* m, const char* n) { *f = (void*)n; return 0; }
CUresult cuFuncGetAttribute(int* v, int a, void* f) { *v = 0; return 0; }
CUresult cuFuncSetAttribute(void* f, int a, int v) { return 0; }
CUresult cuLaunchKernel(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                        unsigned by, unsigned bz, unsigned shared, void* stream, void** params,
                        void** extra) { launches++; grid = gx; return gx == 0 ? 1 : 0; }
CUresult cuMemAlloc_v2(unsigned long long* p, size_t n) { return 0; }
CUresult cuMemFree_v2(unsigned long long p) { return 0; }
CUresult cuMemAllocAsync(unsigned long long* p, size_t n, void* s) {
  if (getenv("STAND_IN_NO_MEMORY") != NULL) return 2;
  allocated = n;
  *p = 4096;
  return 0;
}
CUresult cuMemsetD8Async(unsigned long long p, unsigned char v, size_t n, void* s) {
  zeroed_at = p;
  zeroed = n;
  return 0;
}
CUresult cuMemFreeAsync(unsigned long long p, void* s) { return 0; }
CUresult cuMemcpyHtoD_v2(unsigned long long d, const void* s, size_t n) { return 0; }
CUresult cuMemcpyDtoH_v2(void* d, unsigned long long s, size_t n) { return 0; }
CUresult cuMemcpyHtoDAsync_v2(unsigned long long d, const void* s, size_t n, void* t) {
  return 0;
}
CUresult cuMemcpyDtoDAsync_v2(unsigned long long d, unsigned long long s, size_t n, void* t) {
  return 0;
}
CUresult cuStreamSynchronize(void* s) { return 0; }
int stand_in_launches(void) { return launches; }
void stand_in_split(unsigned* g, unsigned long long* a, unsigned long long* at,
                    unsigned long long* z) {
  *g = grid;
  *a = allocated;
  *at = zeroed_at;
  *z = zeroed;
}
"""

HARNESS = r"""
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tilec_cuda.h"
#include "cpu_runtime.h"

/* split TILES KEY_BLOCKS UNIT_BYTES: one split launch; rule: the split rule's table */
static int split(tilec_cuda_code* code, char** argv) {
  void* buffers[3] = {NULL, NULL, (void*)1};
  int64_t values[4] = {0, 0, 0, 0};
  int status = tilec_cuda_launch_split(code, 0, buffers, 3, values, 4, atoll(argv[2]),
                                       atoll(argv[3]), atoll(argv[4]), 1024, NULL);
  void* driver = dlopen("libcuda.so.1", RTLD_NOW);
  int (*launches)(void) = (int (*)(void))dlsym(driver, "stand_in_launches");
  void (*state)(unsigned*, unsigned long long*, unsigned long long*, unsigned long long*) =
      (void (*)(unsigned*, unsigned long long*, unsigned long long*, unsigned long long*))
          dlsym(driver, "stand_in_split");
  unsigned grid;
  unsigned long long allocated, at, zeroed;
  state(&grid, &allocated, &at, &zeroed);
  printf("status %d launches %d grid %u rows %lld workspace %llu allocated %llu zeroed %llu "
         "%llu %s\n", status, launches(), grid, (long long)values[2],
         (unsigned long long)(uintptr_t)buffers[2], allocated, at, zeroed,
         status ? tilec_last_error() : "");
  return 0;
}

static int rule(void) {
  for (int64_t tiles = 0; tiles <= 300; tiles += 1)
    for (int64_t blocks = 0; blocks <= 600; blocks += 7)
      printf("%lld %lld %lld %lld\n", (long long)tiles, (long long)blocks,
             (long long)tilec_cuda_attention_splits(tiles, blocks, 132),
             (long long)tilec_cuda_attention_splits(tiles, blocks, 108));
  return 0;
}

int main(int argc, char** argv) {
  static const unsigned char cubin[16];
  static const char* names[] = {"k"};
  tilec_cuda_code code = {cubin, sizeof cubin, "", names, 1};
  if (strcmp(argv[1], "split") == 0) return split(&code, argv);
  if (strcmp(argv[1], "rule") == 0) return rule();
  void* buffers[1] = {NULL};
  int64_t values[4] = {0, 0, 0, 0};
  int64_t rows = atoll(argv[1]);
  int status = tilec_cuda_launch(&code, 0, buffers, 1, values, 4, rows, 1024, 0, NULL);
  int (*launches)(void) = (int (*)(void))dlsym(dlopen("libcuda.so.1", RTLD_NOW),
                                               "stand_in_launches");
  printf("status %d launches %d per_block %lld %s\n", status, launches(),
         (long long)values[3], status ? tilec_last_error() : "");
  return 0;
}
"""


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cc = shutil.which(os.environ.get("CC", "cc"))
    if cc is None:
        pytest.fail("no C compiler (cc) to build the stand-in driver")
    out = tmp_path_factory.mktemp("cuda_launch")
    (out / "driver.c").write_text(DRIVER)
    (out / "harness.c").write_text(HARNESS)
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(out / "libcuda.so.1"),
                    str(out / "driver.c")], check=True)
    subprocess.run([cc, "-O1", "-I", str(RUNTIME), "-o", str(out / "harness"),
                    str(out / "harness.c"), str(RUNTIME / "tilec_cuda.c"),
                    str(RUNTIME / "cpu_runtime.c"), "-ldl", "-lpthread", "-lm"], check=True)
    return out


def launch(harness: Path, *args: object, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(harness / "harness"), *map(str, args)], capture_output=True,
                          text=True, timeout=60,
                          env={**os.environ, "LD_LIBRARY_PATH": str(harness), **env})


def test_a_launch_over_rows_reaches_the_driver(harness: Path) -> None:
    done = launch(harness, 1000)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[:6] == ["status", "0", "launches", "1", "per_block", "1"]


def test_a_launch_over_no_rows_launches_nothing(harness: Path) -> None:
    done = launch(harness, 0)
    assert done.returncode == 0, f"the launcher crashed (signal {-done.returncode})"
    assert done.stdout.split()[:4] == ["status", "0", "launches", "0"], done.stdout


def split_launch(harness: Path, tiles: int, blocks: int, unit: int, **env: str) -> dict:
    done = launch(harness, "split", tiles, blocks, unit, **env)
    assert done.returncode == 0, done.stderr
    words = done.stdout.split()
    fields = dict(zip(words[0:14:2], map(int, words[1:14:2])))
    fields["zeroed_at"], fields["zeroed_bytes"] = int(words[13]), int(words[14])
    fields["error"] = " ".join(words[15:])
    return fields


def test_the_host_splits_a_decode_with_the_codegen_rule(harness: Path) -> None:
    """Decode, 8 key heads (one row block each), t = 32768 (512 key blocks) on 132
    multiprocessors: 17 splits, 136 blocks, the workspace of 136 units and 8 counters, the
    counters (after the units) zeroed."""
    unit = 4 * BLOCK_M * (128 + 2)
    splits = attention_splits(8, 512, 132)
    assert splits == 17
    got = split_launch(harness, 8, 512, unit)
    assert got["status"] == 0 and got["launches"] == 1, got
    assert got["grid"] == got["rows"] == 8 * splits
    assert got["workspace"] == 4096
    assert got["allocated"] == 8 * splits * unit + 8 * 4
    assert (got["zeroed_at"], got["zeroed_bytes"]) == (4096 + 8 * splits * unit, 8 * 4)


def test_a_prefill_launch_is_not_split_and_has_no_workspace(harness: Path) -> None:
    got = split_launch(harness, 1024, 64, 4 * BLOCK_M * 130)
    assert got["status"] == 0 and got["launches"] == 1, got
    assert got["rows"] == 1024 and got["workspace"] == 0 and got["allocated"] == 0


def test_a_workspace_that_cannot_be_allocated_is_an_error_naming_the_kernel(
        harness: Path) -> None:
    got = split_launch(harness, 8, 512, 4 * BLOCK_M * 130, STAND_IN_NO_MEMORY="1")
    assert got["status"] == 5 and got["launches"] == 0, got
    assert got["error"].startswith("kernel k: no device memory for its workspace of "
                                   f"{136 * 4 * BLOCK_M * 130 + 32} bytes"), got["error"]


def test_the_c_split_rule_is_the_codegen_rule(harness: Path) -> None:
    done = launch(harness, "rule")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.split("\n")[:-1]
    assert len(lines) == 301 * 86
    for line in lines:
        tiles, blocks, on_132, on_108 = map(int, line.split())
        assert (on_132, on_108) == (attention_splits(tiles, blocks, 132),
                                    attention_splits(tiles, blocks, 108)), line


DECODE = """
func dec(q: Tensor<bf16>[b, hk, g, 1, 128], k: Tensor<bf16>[b, hk, 1, t, 128],
         v: Tensor<bf16>[b, hk, 1, t, 128]) -> Tensor<bf16>[b, hk, g, 1, 128] {
  let scores = cast(q @ transpose(k, [0, 1, 2, 4, 3]), f32) * 0.08838834764831845;
  return cast(cast(softmax(scores, axis=-1), bf16) @ v, bf16);
}
"""

CALL = r"""
import ctypes, sys
library = ctypes.CDLL(sys.argv[1])
library.tilec_last_error.restype = ctypes.c_char_p
library.dec.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_int64] * 4 + [ctypes.c_void_p]
status = library.dec(16, 32, 48, 64, *map(int, sys.argv[2:6]), None)
driver = ctypes.CDLL("libcuda.so.1")
state = [ctypes.c_uint(), ctypes.c_ulonglong(), ctypes.c_ulonglong(), ctypes.c_ulonglong()]
driver.stand_in_split(*map(ctypes.byref, state))
print(status, driver.stand_in_launches(), *(s.value for s in state))
print(library.tilec_last_error().decode() if status else "")
"""


@pytest.fixture(scope="module")
def decode_library(harness: Path) -> Path:
    (harness / "dec.tile").write_text(DECODE)
    (harness / "call.py").write_text(CALL)
    built = subprocess.run([sys.executable, "-c", "import sys; from tilec.cli import main; "
                            "sys.exit(main(sys.argv[1:]))", str(harness / "dec.tile"),
                            "--target", "ptx", "--no-cache", "-o", str(harness / "dec.so")],
                           capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr
    return harness / "dec.so"


def call_decode(harness: Path, library: Path, t: int, **env: str) -> list[str]:
    done = subprocess.run([sys.executable, str(harness / "call.py"), str(library), "1", "8",
                           "4", str(t)], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "LD_LIBRARY_PATH": str(harness), **env})
    assert done.returncode == 0, done.stderr
    return done.stdout.split("\n")


@pytest.mark.parametrize("t, splits", [(4096, 16), (32768, 17)])
def test_a_decode_library_launches_the_split_grid_with_a_workspace(
        harness: Path, decode_library: Path, t: int, splits: int) -> None:
    """The generated host code: 8 key heads of 4 query rows each are 8 row blocks; t keys
    are t / 64 key blocks; on the stand-in's 132 multiprocessors, the rule's splits."""
    assert attention_splits(8, t // 64, 132) == splits
    status, launches, grid, allocated, zeroed_at, zeroed = map(
        int, call_decode(harness, decode_library, t)[0].split())
    unit = 4 * BLOCK_M * (128 + 2)
    assert (status, launches, grid) == (0, 1, 8 * splits)
    assert allocated == 8 * splits * unit + 8 * 4
    assert (zeroed_at, zeroed) == (4096 + 8 * splits * unit, 8 * 4)


def test_a_decode_library_without_memory_for_its_workspace_says_so(
        harness: Path, decode_library: Path) -> None:
    first, error = call_decode(harness, decode_library, 32768, STAND_IN_NO_MEMORY="1")[:2]
    assert first.split()[:2] == ["5", "0"]
    assert error.startswith("kernel dec__k0: no device memory for its workspace of "), error
