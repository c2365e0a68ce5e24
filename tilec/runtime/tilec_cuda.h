/* The tilec CUDA launcher, compiled into every library built with --target ptx.
 *
 * In: calls from the generated host code (tilec/codegen/common/templates/host.c.j2) with the
 * library's embedded cubin and PTX.  Out: kernels launched through the CUDA driver API, which
 * is loaded at run time with dlopen("libcuda.so.1"), so that building a library needs no CUDA
 * install; device memory on the caller's stream; and, exported for callers without CUDA
 * bindings (the Python runtime), allocation and copies.  Without a driver or a device every
 * call returns TILEC_ERR_DEVICE with the reason in tilec_last_error().
 */
#ifndef TILEC_CUDA_H
#define TILEC_CUDA_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define TILEC_ERR_DEVICE 5 /* no CUDA driver or device, or the driver reported an error */
#define TILEC_CUDA_CONTEXTS 8 /* contexts one library keeps its kernels loaded in */

/* A library's device code; the cache of loaded modules is filled on first use. */
typedef struct {
  const unsigned char* cubin;
  size_t cubin_size;
  const char* ptx;
  const char* const* names; /* the kernels' entry names, in launch index order */
  int count;
  void* contexts[TILEC_CUDA_CONTEXTS];
  void* modules[TILEC_CUDA_CONTEXTS];
  void** functions[TILEC_CUDA_CONTEXTS];
} tilec_cuda_code;

/* Launch kernel `kernel` of `code` over `rows` grid rows: its arguments are the `nbuffers`
 * device pointers, then the `nvalues` int64_t values (the last two, rows and rows per block,
 * are filled in here); `row_elements` sets the threads per block, `shared` the dynamic shared
 * memory per block.  No rows: nothing is launched. */
int tilec_cuda_launch(tilec_cuda_code* code, int kernel, void* const* buffers, int nbuffers,
                      int64_t* values, int nvalues, int64_t rows, int64_t row_elements,
                      int64_t shared, void* stream);

/* An attention kernel whose keys the grid splits (tilec/codegen/ptx/attention.py): the
 * launch above over `tiles` row blocks times tilec_cuda_attention_splits() splits of their
 * `key_blocks`, with 256 threads.  With more than one split, a workspace of
 * tilec_cuda_workspace_bytes() (each (tile, split) unit's partial output block, row maxima
 * and sums in float32, `unit_bytes`, then an int32 counter per tile, zeroed here) is
 * allocated on the stream, passed as buffer `nbuffers - 1` and freed after the launch; a
 * failed allocation is an error naming the kernel.  With one split that buffer is NULL. */
#define TILEC_CUDA_MIN_SPLIT_BLOCKS 4 /* key blocks per split at least */
int64_t tilec_cuda_attention_splits(int64_t tiles, int64_t key_blocks, int64_t multiprocessors);
int64_t tilec_cuda_workspace_bytes(int64_t tiles, int64_t splits, int64_t unit_bytes);
int tilec_cuda_launch_split(tilec_cuda_code* code, int kernel, void** buffers, int nbuffers,
                            int64_t* values, int nvalues, int64_t tiles, int64_t key_blocks,
                            int64_t unit_bytes, int64_t shared, void* stream);

/* Stream-ordered device memory and copies for the host code. */
int tilec_cuda_alloc(void** pointer, int64_t bytes, void* stream);
void tilec_cuda_free(void* pointer, void* stream);
int tilec_cuda_copy(void* dst, const void* src, int64_t bytes, void* stream);
int tilec_cuda_copy_to_device(void* dst, const void* src, int64_t bytes, void* stream);

/* Exported (see the generated header). */
int tilec_device_alloc(void** pointer, int64_t bytes);
int tilec_device_free(void* pointer);
int tilec_copy_to_device(void* device, const void* host, int64_t bytes);
int tilec_copy_to_host(void* host, const void* device, int64_t bytes);
int tilec_synchronize(void* stream);

#endif
