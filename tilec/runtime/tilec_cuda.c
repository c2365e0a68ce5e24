/* The tilec CUDA launcher (see tilec_cuda.h): the driver API through dlopen, the kernels of a
 * library loaded once per context, launches sized from the row, device memory and copies.
 *
 * Context: the one current on the calling thread (a framework's, e.g. PyTorch's), else the
 * primary context of device 0, made current.  Launch shape: threads per block from the row
 * (a multiple of 32 with about 8 elements each, 32 to 256), at most one resident wave of
 * blocks (multiprocessors x 2048 / threads), each block taking a contiguous run of rows.
 * An attention launch whose keys split (tilec_cuda_launch_split) takes tiles x splits as its
 * rows, with 256 threads and a workspace it allocates, zeroes the counters of and frees.
 */
#include "tilec_cuda.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "cpu_runtime.h"

typedef int CUresult;
typedef int CUdevice;
typedef void* CUcontext;
typedef void* CUmodule;
typedef void* CUfunction;
typedef void* CUstream;
typedef unsigned long long CUdeviceptr;

enum {
  CUDA_SUCCESS = 0,
  ATTRIBUTE_MULTIPROCESSOR_COUNT = 16,
  ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97,
  FUNC_ATTRIBUTE_SHARED_SIZE_BYTES = 1,
  FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8,
  THREADS_PER_MULTIPROCESSOR = 2048,
  DEFAULT_SHARED_LIMIT = 48 * 1024,
  ATTENTION_ROW_ELEMENTS = 8 * 256, /* sets 256 threads: the attention kernel's */
};

static struct {
  const char* missing; /* why the driver is unusable, NULL once loaded */
  CUresult (*cuInit)(unsigned);
  CUresult (*cuGetErrorString)(CUresult, const char**);
  CUresult (*cuDeviceGet)(CUdevice*, int);
  CUresult (*cuDeviceGetAttribute)(int*, int, CUdevice);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice);
  CUresult (*cuCtxGetCurrent)(CUcontext*);
  CUresult (*cuCtxSetCurrent)(CUcontext);
  CUresult (*cuCtxGetDevice)(CUdevice*);
  CUresult (*cuModuleLoadData)(CUmodule*, const void*);
  CUresult (*cuModuleGetFunction)(CUfunction*, CUmodule, const char*);
  CUresult (*cuFuncGetAttribute)(int*, int, CUfunction);
  CUresult (*cuFuncSetAttribute)(CUfunction, int, int);
  CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                             unsigned, unsigned, CUstream, void**, void**);
  CUresult (*cuMemAlloc)(CUdeviceptr*, size_t);
  CUresult (*cuMemFree)(CUdeviceptr);
  CUresult (*cuMemAllocAsync)(CUdeviceptr*, size_t, CUstream);
  CUresult (*cuMemFreeAsync)(CUdeviceptr, CUstream);
  CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void*, size_t);
  CUresult (*cuMemcpyDtoH)(void*, CUdeviceptr, size_t);
  CUresult (*cuMemcpyHtoDAsync)(CUdeviceptr, const void*, size_t, CUstream);
  CUresult (*cuMemcpyDtoDAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
  CUresult (*cuMemsetD8Async)(CUdeviceptr, unsigned char, size_t, CUstream);
  CUresult (*cuStreamSynchronize)(CUstream);
} cu = {.missing = "the CUDA driver was not loaded"};

static pthread_once_t driver_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t modules_lock = PTHREAD_MUTEX_INITIALIZER;
static char driver_problem[512];

#define SYMBOL(field, name)                                                             \
  if ((*(void**)&cu.field = dlsym(library, name)) == NULL) {                            \
    snprintf(driver_problem, sizeof driver_problem,                                     \
             "libcuda.so.1 has no %s: the CUDA driver is too old (CUDA 12.0 or later)", \
             name);                                                                     \
    cu.missing = driver_problem;                                                        \
    return;                                                                             \
  }

static void load_driver(void) {
  void* library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (library == NULL) {
    snprintf(driver_problem, sizeof driver_problem,
             "no CUDA driver: cannot load libcuda.so.1 (%s); a ptx library needs an NVIDIA GPU "
             "and its driver",
             dlerror());
    cu.missing = driver_problem;
    return;
  }
  SYMBOL(cuInit, "cuInit");
  SYMBOL(cuGetErrorString, "cuGetErrorString");
  SYMBOL(cuDeviceGet, "cuDeviceGet");
  SYMBOL(cuDeviceGetAttribute, "cuDeviceGetAttribute");
  SYMBOL(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
  SYMBOL(cuCtxGetCurrent, "cuCtxGetCurrent");
  SYMBOL(cuCtxSetCurrent, "cuCtxSetCurrent");
  SYMBOL(cuCtxGetDevice, "cuCtxGetDevice");
  SYMBOL(cuModuleLoadData, "cuModuleLoadData");
  SYMBOL(cuModuleGetFunction, "cuModuleGetFunction");
  SYMBOL(cuFuncGetAttribute, "cuFuncGetAttribute");
  SYMBOL(cuFuncSetAttribute, "cuFuncSetAttribute");
  SYMBOL(cuLaunchKernel, "cuLaunchKernel");
  SYMBOL(cuMemAlloc, "cuMemAlloc_v2");
  SYMBOL(cuMemFree, "cuMemFree_v2");
  SYMBOL(cuMemAllocAsync, "cuMemAllocAsync");
  SYMBOL(cuMemFreeAsync, "cuMemFreeAsync");
  SYMBOL(cuMemcpyHtoD, "cuMemcpyHtoD_v2");
  SYMBOL(cuMemcpyDtoH, "cuMemcpyDtoH_v2");
  SYMBOL(cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2");
  SYMBOL(cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2");
  SYMBOL(cuMemsetD8Async, "cuMemsetD8Async");
  SYMBOL(cuStreamSynchronize, "cuStreamSynchronize");
  CUresult status = cu.cuInit(0);
  if (status != CUDA_SUCCESS) {
    const char* text = "unknown error";
    cu.cuGetErrorString(status, &text);
    snprintf(driver_problem, sizeof driver_problem,
             "the CUDA driver did not start: cuInit failed with %s (CUDA error %d)", text,
             status);
    cu.missing = driver_problem;
    return;
  }
  cu.missing = NULL;
}

static int failed(const char* what, CUresult status) {
  const char* text = "unknown error";
  cu.cuGetErrorString(status, &text);
  return tilec_fail(TILEC_ERR_DEVICE, "%s: %s (CUDA error %d)", what, text, status);
}

/* The driver loaded and a context current on this thread. */
static int ready(CUcontext* context) {
  pthread_once(&driver_once, load_driver);
  if (cu.missing != NULL) return tilec_fail(TILEC_ERR_DEVICE, "%s", cu.missing);
  CUcontext current = NULL;
  CUresult status = cu.cuCtxGetCurrent(&current);
  if (status != CUDA_SUCCESS) return failed("cuCtxGetCurrent", status);
  if (current == NULL) {
    CUdevice device;
    if ((status = cu.cuDeviceGet(&device, 0)) != CUDA_SUCCESS)
      return failed("no CUDA device 0", status);
    if ((status = cu.cuDevicePrimaryCtxRetain(&current, device)) != CUDA_SUCCESS)
      return failed("cuDevicePrimaryCtxRetain", status);
    if ((status = cu.cuCtxSetCurrent(current)) != CUDA_SUCCESS)
      return failed("cuCtxSetCurrent", status);
  }
  if (context != NULL) *context = current;
  return TILEC_OK;
}

/* The kernels of `code` in `context`: the cubin, else (a GPU newer than its arch) the PTX. */
static int functions_in(tilec_cuda_code* code, CUcontext context, void*** functions) {
  pthread_mutex_lock(&modules_lock);
  int slot = 0;
  while (slot < TILEC_CUDA_CONTEXTS && code->contexts[slot] != NULL &&
         code->contexts[slot] != context)
    slot++;
  int status = TILEC_OK;
  if (slot == TILEC_CUDA_CONTEXTS) {
    status = tilec_fail(TILEC_ERR_DEVICE, "a library's kernels can be loaded in at most %d "
                        "CUDA contexts", TILEC_CUDA_CONTEXTS);
  } else if (code->contexts[slot] == NULL) {
    CUmodule module = NULL;
    CUresult from_cubin = cu.cuModuleLoadData(&module, code->cubin);
    if (from_cubin != CUDA_SUCCESS) {
      CUresult from_ptx = cu.cuModuleLoadData(&module, code->ptx);
      if (from_ptx != CUDA_SUCCESS) {
        const char *cubin_text = "unknown error", *ptx_text = "unknown error";
        cu.cuGetErrorString(from_cubin, &cubin_text);
        cu.cuGetErrorString(from_ptx, &ptx_text);
        status = tilec_fail(TILEC_ERR_DEVICE, "cannot load the kernels: the cubin: %s (CUDA "
                            "error %d); the PTX: %s (CUDA error %d)",
                            cubin_text, from_cubin, ptx_text, from_ptx);
      }
    }
    void** loaded = status == TILEC_OK ? calloc((size_t)code->count, sizeof(void*)) : NULL;
    if (status == TILEC_OK && loaded == NULL)
      status = tilec_fail(TILEC_ERR_NO_MEMORY, "out of memory for the kernel table");
    for (int k = 0; status == TILEC_OK && k < code->count; k++) {
      CUresult found = cu.cuModuleGetFunction((CUfunction*)&loaded[k], module, code->names[k]);
      if (found != CUDA_SUCCESS) status = failed(code->names[k], found);
    }
    if (status == TILEC_OK) {
      code->modules[slot] = module;
      code->functions[slot] = loaded;
      code->contexts[slot] = context;
    } else {
      free(loaded);
    }
  }
  if (status == TILEC_OK) *functions = code->functions[slot];
  pthread_mutex_unlock(&modules_lock);
  return status;
}

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* The driver ready and kernel `kernel` of `code` loaded in the current context; its device's
 * multiprocessors and opt-in shared memory per block. */
static int prepare(tilec_cuda_code* code, int kernel, CUfunction* function,
                   int* multiprocessors, int* shared_limit) {
  CUcontext context;
  void** functions;
  int status = ready(&context);
  if (status != TILEC_OK) return status;
  if ((status = functions_in(code, context, &functions)) != TILEC_OK) return status;
  *function = functions[kernel];
  CUdevice device;
  CUresult result;
  if ((result = cu.cuCtxGetDevice(&device)) != CUDA_SUCCESS)
    return failed("cuCtxGetDevice", result);
  *multiprocessors = 0;
  *shared_limit = 0;
  cu.cuDeviceGetAttribute(multiprocessors, ATTRIBUTE_MULTIPROCESSOR_COUNT, device);
  cu.cuDeviceGetAttribute(shared_limit, ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, device);
  if (*multiprocessors < 1) *multiprocessors = 1;
  return TILEC_OK;
}

/* The launch itself: blocks and threads from the rows (the file's comment). */
static int launch_rows(tilec_cuda_code* code, int kernel, CUfunction function,
                       int multiprocessors, int shared_limit, void* const* buffers,
                       int nbuffers, int64_t* values, int nvalues, int64_t rows,
                       int64_t row_elements, int64_t shared, void* stream) {
  int static_shared = 0;
  CUresult result;
  cu.cuFuncGetAttribute(&static_shared, FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, function);
  if (shared + static_shared > shared_limit)
    return tilec_fail(TILEC_ERR_DEVICE, "kernel %s needs %lld bytes of shared memory per block "
                      "for a row, more than the %d bytes of this GPU",
                      code->names[kernel], (long long)(shared + static_shared), shared_limit);
  if (shared > DEFAULT_SHARED_LIMIT - static_shared &&
      (result = cu.cuFuncSetAttribute(function, FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                      (int)shared)) != CUDA_SUCCESS)
    return failed("cuFuncSetAttribute", result);
  int64_t threads = ceil_div(ceil_div(row_elements, 8), 32) * 32;
  threads = threads < 32 ? 32 : threads > 256 ? 256 : threads;
  int64_t wave = (int64_t)multiprocessors * (THREADS_PER_MULTIPROCESSOR / threads);
  int64_t per_block = ceil_div(rows, rows < wave ? rows : wave);
  int64_t blocks = ceil_div(rows, per_block);
  values[nvalues - 2] = rows;
  values[nvalues - 1] = per_block;
  CUdeviceptr pointers[64];
  void* params[64 + 64];
  if (nbuffers > 64 || nvalues > 64)
    return tilec_fail(TILEC_ERR_DEVICE, "kernel %s has too many arguments", code->names[kernel]);
  for (int i = 0; i < nbuffers; i++) {
    pointers[i] = (CUdeviceptr)(uintptr_t)buffers[i];
    params[i] = &pointers[i];
  }
  for (int j = 0; j < nvalues; j++) params[nbuffers + j] = &values[j];
  result = cu.cuLaunchKernel(function, (unsigned)blocks, 1, 1, (unsigned)threads, 1, 1,
                             (unsigned)shared, (CUstream)stream, params, NULL);
  return result == CUDA_SUCCESS ? TILEC_OK : failed(code->names[kernel], result);
}

int tilec_cuda_launch(tilec_cuda_code* code, int kernel, void* const* buffers, int nbuffers,
                      int64_t* values, int nvalues, int64_t rows, int64_t row_elements,
                      int64_t shared, void* stream) {
  if (rows <= 0) return TILEC_OK; /* no rows, no blocks: nothing to launch */
  CUfunction function;
  int multiprocessors, shared_limit;
  int status = prepare(code, kernel, &function, &multiprocessors, &shared_limit);
  if (status != TILEC_OK) return status;
  return launch_rows(code, kernel, function, multiprocessors, shared_limit, buffers, nbuffers,
                     values, nvalues, rows, row_elements, shared, stream);
}

int64_t tilec_cuda_attention_splits(int64_t tiles, int64_t key_blocks, int64_t multiprocessors) {
  if (tiles <= 0 || tiles >= multiprocessors) return 1;
  int64_t splits = ceil_div(multiprocessors, tiles);
  int64_t most = key_blocks / TILEC_CUDA_MIN_SPLIT_BLOCKS;
  if (splits > most) splits = most;
  return splits < 1 ? 1 : splits;
}

int64_t tilec_cuda_workspace_bytes(int64_t tiles, int64_t splits, int64_t unit_bytes) {
  if (splits <= 1) return 0;
  return tiles * splits * unit_bytes + tiles * (int64_t)sizeof(int32_t);
}

int tilec_cuda_launch_split(tilec_cuda_code* code, int kernel, void** buffers, int nbuffers,
                            int64_t* values, int nvalues, int64_t tiles, int64_t key_blocks,
                            int64_t unit_bytes, int64_t shared, void* stream) {
  if (tiles <= 0) return TILEC_OK;
  CUfunction function;
  int multiprocessors, shared_limit;
  int status = prepare(code, kernel, &function, &multiprocessors, &shared_limit);
  if (status != TILEC_OK) return status;
  int64_t splits = tilec_cuda_attention_splits(tiles, key_blocks, multiprocessors);
  int64_t bytes = tilec_cuda_workspace_bytes(tiles, splits, unit_bytes);
  CUdeviceptr workspace = 0;
  CUresult result;
  if (bytes > 0) {
    result = cu.cuMemAllocAsync(&workspace, (size_t)bytes, (CUstream)stream);
    if (result != CUDA_SUCCESS) {
      const char* text = "unknown error";
      cu.cuGetErrorString(result, &text);
      return tilec_fail(TILEC_ERR_DEVICE, "kernel %s: no device memory for its workspace of %lld "
                        "bytes (%lld row blocks x %lld key splits): %s (CUDA error %d)",
                        code->names[kernel], (long long)bytes, (long long)tiles,
                        (long long)splits, text, result);
    }
    /* the tiles' counters, after the units' floats, start at 0 */
    result = cu.cuMemsetD8Async(workspace + (CUdeviceptr)(tiles * splits * unit_bytes), 0,
                                (size_t)(bytes - tiles * splits * unit_bytes), (CUstream)stream);
    if (result != CUDA_SUCCESS) status = failed("cuMemsetD8Async", result);
  }
  buffers[nbuffers - 1] = (void*)(uintptr_t)workspace;
  if (status == TILEC_OK)
    status = launch_rows(code, kernel, function, multiprocessors, shared_limit, buffers,
                         nbuffers, values, nvalues, tiles * splits, ATTENTION_ROW_ELEMENTS,
                         shared, stream);
  if (workspace != 0) cu.cuMemFreeAsync(workspace, (CUstream)stream);
  return status;
}

int tilec_cuda_alloc(void** pointer, int64_t bytes, void* stream) {
  CUdeviceptr p = 0;
  int status = ready(NULL);
  if (status != TILEC_OK) return status;
  CUresult result = cu.cuMemAllocAsync(&p, (size_t)(bytes > 0 ? bytes : 1), (CUstream)stream);
  if (result != CUDA_SUCCESS) return failed("out of device memory for an intermediate", result);
  *pointer = (void*)(uintptr_t)p;
  return TILEC_OK;
}

void tilec_cuda_free(void* pointer, void* stream) {
  if (pointer != NULL) cu.cuMemFreeAsync((CUdeviceptr)(uintptr_t)pointer, (CUstream)stream);
}

int tilec_cuda_copy(void* dst, const void* src, int64_t bytes, void* stream) {
  if (bytes <= 0) return TILEC_OK;
  CUresult result = cu.cuMemcpyDtoDAsync((CUdeviceptr)(uintptr_t)dst,
                                         (CUdeviceptr)(uintptr_t)src, (size_t)bytes,
                                         (CUstream)stream);
  return result == CUDA_SUCCESS ? TILEC_OK : failed("cuMemcpyDtoDAsync", result);
}

int tilec_cuda_copy_to_device(void* dst, const void* src, int64_t bytes, void* stream) {
  CUresult result = cu.cuMemcpyHtoDAsync((CUdeviceptr)(uintptr_t)dst, src, (size_t)bytes,
                                         (CUstream)stream);
  return result == CUDA_SUCCESS ? TILEC_OK : failed("cuMemcpyHtoDAsync", result);
}

int tilec_device_alloc(void** pointer, int64_t bytes) {
  CUdeviceptr p = 0;
  int status = ready(NULL);
  if (status != TILEC_OK) return status;
  CUresult result = cu.cuMemAlloc(&p, (size_t)(bytes > 0 ? bytes : 1));
  if (result != CUDA_SUCCESS) return failed("cuMemAlloc", result);
  *pointer = (void*)(uintptr_t)p;
  return TILEC_OK;
}

int tilec_device_free(void* pointer) {
  int status = ready(NULL);
  if (status != TILEC_OK || pointer == NULL) return status;
  CUresult result = cu.cuMemFree((CUdeviceptr)(uintptr_t)pointer);
  return result == CUDA_SUCCESS ? TILEC_OK : failed("cuMemFree", result);
}

int tilec_copy_to_device(void* device, const void* host, int64_t bytes) {
  int status = ready(NULL);
  if (status != TILEC_OK || bytes <= 0) return status;
  CUresult result = cu.cuMemcpyHtoD((CUdeviceptr)(uintptr_t)device, host, (size_t)bytes);
  return result == CUDA_SUCCESS ? TILEC_OK : failed("cuMemcpyHtoD", result);
}

int tilec_copy_to_host(void* host, const void* device, int64_t bytes) {
  int status = ready(NULL);
  if (status != TILEC_OK || bytes <= 0) return status;
  CUresult result = cu.cuMemcpyDtoH(host, (CUdeviceptr)(uintptr_t)device, (size_t)bytes);
  return result == CUDA_SUCCESS ? TILEC_OK : failed("cuMemcpyDtoH", result);
}

int tilec_synchronize(void* stream) {
  int status = ready(NULL);
  if (status != TILEC_OK) return status;
  CUresult result = cu.cuStreamSynchronize((CUstream)stream);
  return result == CUDA_SUCCESS ? TILEC_OK : failed("cuStreamSynchronize", result);
}
