/* The device API that the host code of an Ascend library calls (--target ascend, ascend-sim).
 *
 * In: calls from the generated host code (tilec/codegen/common/templates/host.c.j2).  Out:
 * device memory and copies on the caller's stream.  The Ascend C backend generates the
 * definitions in each library's launcher file, with each kernel's launcher
 * tilec_ascend_launch_K: through CANN's aclrt* calls and <<<>>> (ascend), or on host memory
 * and the CPU twin of the Ascend C API (ascend-sim).
 */
#ifndef TILEC_ASCEND_H
#define TILEC_ASCEND_H

#include <stdint.h>
#include <string.h> /* the host code stages scalar parameters with memcpy */

#define TILEC_ERR_DEVICE 5 /* the device (or the CPU twin's checks) reported an error */

#ifdef __cplusplus
extern "C" {
#endif

int tilec_ascend_alloc(void** pointer, int64_t bytes, void* stream);
void tilec_ascend_free(void* pointer, void* stream);
int tilec_ascend_copy(void* dst, const void* src, int64_t bytes, void* stream);
int tilec_ascend_copy_to_device(void* dst, const void* src, int64_t bytes, void* stream);

#ifdef __cplusplus
}
#endif

#endif
