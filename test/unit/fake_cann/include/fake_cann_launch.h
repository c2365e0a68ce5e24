/* Fake CANN: bisheng rewrites `kernel<<<blocks, l2ctrl, stream>>>(args...)` into
 * `FAKE_CANN_CHEVRON(kernel, blocks, l2ctrl, stream)(args...)`, which runs the kernel on the
 * CPU twin (every block in turn) and hands the outcome to the fake ACL runtime, where the
 * stream's next synchronisation reports it. */
#ifndef FAKE_CANN_LAUNCH_H
#define FAKE_CANN_LAUNCH_H

#include <cstdint>
#include <utility>

#include "acl/acl.h"
#include "twin_launch.h"

namespace fake_cann {

template <typename Kernel>
struct Chevron {
  tilec_twin::Launcher<Kernel> launcher;
  int64_t blocks;
  aclrtStream stream;

  template <typename... A>
  void operator()(A&&... args) const {
    const int status = launcher(blocks, stream, std::forward<A>(args)...);
    fake_cann_launched(status, status != 0 ? tilec_twin_last_error() : "");
  }
};

}  // namespace fake_cann

#define FAKE_CANN_CHEVRON(kernel, blocks, l2ctrl, stream)                              \
  ::fake_cann::Chevron<decltype(&kernel)> {                                             \
    ACLRT_LAUNCH_KERNEL(kernel), int64_t(blocks), static_cast<aclrtStream>(stream)      \
  }

#endif
