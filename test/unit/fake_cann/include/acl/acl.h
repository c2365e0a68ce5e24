/* Fake CANN: the part of the ACL runtime API (aclrt*) that tilec's launchers call, with the
 * signatures of CANN's public API reference.  "Device" memory is host memory; a kernel that
 * failed on the twin makes the next aclrtSynchronizeStream fail, as a device error would. */
#ifndef FAKE_CANN_ACL_H
#define FAKE_CANN_ACL_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef int aclError;
typedef void* aclrtStream;

#define ACL_SUCCESS 0
#define ACL_ERROR_BAD_ALLOC 200000
#define ACL_ERROR_RT_AICORE_EXCEPTION 507015

typedef enum aclrtMemMallocPolicy {
  ACL_MEM_MALLOC_HUGE_FIRST,
  ACL_MEM_MALLOC_HUGE_ONLY,
  ACL_MEM_MALLOC_NORMAL_ONLY
} aclrtMemMallocPolicy;

typedef enum aclrtMemcpyKind {
  ACL_MEMCPY_HOST_TO_HOST,
  ACL_MEMCPY_HOST_TO_DEVICE,
  ACL_MEMCPY_DEVICE_TO_HOST,
  ACL_MEMCPY_DEVICE_TO_DEVICE
} aclrtMemcpyKind;

aclError aclrtMalloc(void** devPtr, size_t size, aclrtMemMallocPolicy policy);
aclError aclrtFree(void* devPtr);
aclError aclrtMemcpy(void* dst, size_t destMax, const void* src, size_t count,
                     aclrtMemcpyKind kind);
aclError aclrtMemcpyAsync(void* dst, size_t destMax, const void* src, size_t count,
                          aclrtMemcpyKind kind, aclrtStream stream);
aclError aclrtSynchronizeStream(aclrtStream stream);

/* Not CANN's: what a <<<>>> launch on the twin reports (see fake_cann_launch.h). */
void fake_cann_launched(int status, const char* error);

#ifdef __cplusplus
}
#endif

#endif
