// Fake CANN: libascendcl.so, the aclrt* calls of include/acl/acl.h on host memory.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "acl/acl.h"

namespace {

constexpr size_t ALIGNMENT = 64;     // at least the 32 bytes DataCopy needs of GM
thread_local std::string failed_launch;  // the first failure since the last synchronisation

}  // namespace

extern "C" {

aclError aclrtMalloc(void** devPtr, size_t size, aclrtMemMallocPolicy) {
  const size_t rounded = (size + ALIGNMENT - 1) / ALIGNMENT * ALIGNMENT;
  *devPtr = std::aligned_alloc(ALIGNMENT, rounded > 0 ? rounded : ALIGNMENT);
  return *devPtr != nullptr ? ACL_SUCCESS : ACL_ERROR_BAD_ALLOC;
}

aclError aclrtFree(void* devPtr) {
  std::free(devPtr);
  return ACL_SUCCESS;
}

aclError aclrtMemcpy(void* dst, size_t destMax, const void* src, size_t count,
                     aclrtMemcpyKind) {
  if (count > destMax) return ACL_ERROR_BAD_ALLOC;
  std::memmove(dst, src, count);
  return ACL_SUCCESS;
}

aclError aclrtMemcpyAsync(void* dst, size_t destMax, const void* src, size_t count,
                          aclrtMemcpyKind kind, aclrtStream) {
  return aclrtMemcpy(dst, destMax, src, count, kind);
}

aclError aclrtSynchronizeStream(aclrtStream) {
  if (failed_launch.empty()) return ACL_SUCCESS;
  std::fprintf(stderr, "fake CANN: %s\n", failed_launch.c_str());
  failed_launch.clear();
  return ACL_ERROR_RT_AICORE_EXCEPTION;
}

void fake_cann_launched(int status, const char* error) {
  if (status != 0 && failed_launch.empty()) failed_launch = error;
}

}  // extern "C"
