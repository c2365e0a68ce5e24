/* The host side of a twin launch: what replaces `kernel<<<blockDim, nullptr, stream>>>(args)`.
 *
 *   int rc = ASCEND_TWIN_LAUNCH(kernel, blockDim, stream, args...);
 *   int rc = ACLRT_LAUNCH_KERNEL(kernel)(blockDim, stream, args...);
 *   int rc = tilec_twin::launch("kernel", blockDim, &kernel, args...);
 *
 * All three run kernel(args...) once per block, blocks 0..blockDim-1 in order on the calling
 * thread, each on a fresh AI core (poisoned UB, no queues, no flags), and return 0 or 1 with
 * tilec_twin_last_error() naming the kernel, block, operation and numbers.  The stream is
 * ignored.  Pointer arguments convert to the kernel's GM_ADDR parameters as a cast would.
 * Buffers declared before the launch with tilec_twin_register_gm(ptr, bytes, name) bound every
 * GM access of the kernel and name the buffer in messages.
 */
#ifndef TILEC_ASCEND_TWIN_LAUNCH_H
#define TILEC_ASCEND_TWIN_LAUNCH_H

#include <type_traits>
#include <utility>

#include "twin_state.h"

namespace tilec_twin {

template <typename P, typename A>
inline P launch_arg(A&& a) {
  if constexpr (std::is_pointer_v<P>)
    return (P)(a);  // GM pointers: any object pointer, as the host side of <<<>>> allows
  else
    return static_cast<P>(std::forward<A>(a));
}

template <typename A>
inline void note_gm_arg(GmArg* out, int& n, int index, const std::remove_cv_t<A>& a) {
  if constexpr (std::is_array_v<A>) {
    out[n++] = GmArg{(const void*)(a), index};
  } else if constexpr (std::is_pointer_v<A>) {
    if (a) out[n++] = GmArg{(const void*)(a), index};
  }
}

template <typename... P, typename... A>
inline int launch_as(LaunchMode mode, const char* name, int64_t block_dim, void (*kernel)(P...),
                     A&&... args) {
  static_assert(sizeof...(P) == sizeof...(A), "the kernel takes a different number of arguments");
  GmArg gm[sizeof...(A) + 1];
  int n = 0, index = 0;
  (note_gm_arg<std::remove_reference_t<A>>(gm, n, index++, args), ...);
  return run_launch(name, block_dim, gm, n, [&] { kernel(launch_arg<P>(args)...); }, mode);
}

template <typename... P, typename... A>
inline int launch(const char* name, int64_t block_dim, void (*kernel)(P...), A&&... args) {
  return launch_as(LAUNCH_VECTOR, name, block_dim, kernel, std::forward<A>(args)...);
}

template <typename F>
struct Launcher;

template <typename... P>
struct Launcher<void (*)(P...)> {
  const char* name;
  void (*kernel)(P...);
  template <typename S, typename... A>
  int operator()(int64_t block_dim, S&& /*stream*/, A&&... args) const {
    return launch(name, block_dim, kernel, std::forward<A>(args)...);
  }
};

}  // namespace tilec_twin

#define ASCEND_TWIN_LAUNCH(kernel, blockDim, stream, ...) \
  ((void)(stream), ::tilec_twin::launch(#kernel, (blockDim), &kernel, ##__VA_ARGS__))

/* A kernel of the cube core only (KERNEL_TYPE_AIC_ONLY), and a mixed one (__mix__(1, 2):
 * blockDim blocks of one AIC and two AIVs). */
#define ASCEND_TWIN_LAUNCH_AIC(kernel, blockDim, stream, ...) \
  ((void)(stream),                                            \
   ::tilec_twin::launch_as(::tilec_twin::LAUNCH_AIC, #kernel, (blockDim), &kernel, ##__VA_ARGS__))
#define ASCEND_TWIN_LAUNCH_MIX(kernel, blockDim, stream, ...) \
  ((void)(stream),                                            \
   ::tilec_twin::launch_as(::tilec_twin::LAUNCH_MIX, #kernel, (blockDim), &kernel, ##__VA_ARGS__))

#define ACLRT_LAUNCH_KERNEL(kernel) \
  ::tilec_twin::Launcher<decltype(&kernel)> { #kernel, &kernel }

#endif
