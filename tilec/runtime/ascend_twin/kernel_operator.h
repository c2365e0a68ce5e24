/* tilec's CPU twin of the Ascend C API (the vector subset tilec generates for dav-2201).
 *
 * An Ascend C source that includes "kernel_operator.h" compiles unchanged with the host C++17
 * compiler against this header (-I tilec/runtime/ascend_twin) and runs on the CPU, every AI
 * core's block in turn, with the hardware's rules checked: UB capacity, 32-byte DataCopy,
 * queue discipline, operand alignment and bounds, and (strict mode) missing syncs between
 * pipes.  A violation is an error naming the kernel, block, operation and numbers; nothing
 * aborts.  Written for tilec from the public API documentation: no CANN code.  README.md
 * describes the contract, the launch, the sync model and what only hardware can confirm.
 */
#ifndef TILEC_ASCEND_TWIN_KERNEL_OPERATOR_H
#define TILEC_ASCEND_TWIN_KERNEL_OPERATOR_H

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <type_traits>

#include "twin_cube.h"
#include "twin_state.h"

#define __global__
#define __aicore__
/* A mixed kernel (one AIC, two AIVs per block on Atlas A2) declares itself by its first
 * statement, KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2) (or is launched with
 * ASCEND_TWIN_LAUNCH_MIX); the code of each side runs under ASCEND_IS_AIC / ASCEND_IS_AIV. */
#define __mix__(cube, vector)
enum KernelMetaType {
  KERNEL_TYPE_AIV_ONLY,
  KERNEL_TYPE_AIC_ONLY,
  KERNEL_TYPE_MIX_AIV_1_0,
  KERNEL_TYPE_MIX_AIC_1_0,
  KERNEL_TYPE_MIX_AIC_1_1,
  KERNEL_TYPE_MIX_AIC_1_2
};
#define KERNEL_TASK_TYPE_DEFAULT(type) \
  ::tilec_twin::declare_kernel_type(int(type), ::tilec_twin::Loc::here())
#define ASCEND_IS_AIC (::tilec_twin::core_kind() == ::tilec_twin::CORE_AIC)
#define ASCEND_IS_AIV (::tilec_twin::core_kind() != ::tilec_twin::CORE_AIC)
#define __gm__
#define __ubuf__
#define GM_ADDR uint8_t*

/* Hardware pipes and event ids are global names in Ascend C. */
enum pipe_t { PIPE_S, PIPE_V, PIPE_M, PIPE_MTE1, PIPE_MTE2, PIPE_MTE3, PIPE_ALL, PIPE_FIX };
enum event_t {
  EVENT_ID0,
  EVENT_ID1,
  EVENT_ID2,
  EVENT_ID3,
  EVENT_ID4,
  EVENT_ID5,
  EVENT_ID6,
  EVENT_ID7
};

namespace AscendC {

using TwinLoc = ::tilec_twin::Loc;

constexpr int32_t ONE_BLK_SIZE = 32;
constexpr int32_t ONE_REPEAT_BYTE_SIZE = 256;

enum class TPosition : uint8_t {
  GM,
  A1,
  A2,
  B1,
  B2,
  C1,
  C2,
  CO1,
  CO2,
  VECIN,
  VECOUT,
  VECCALC,
  LCM = VECCALC,
  SPM,
  SHM = SPM,
  TSCM,
  MAX
};
using QuePosition = TPosition;

enum class HardEvent : uint8_t {
  MTE2_V,
  V_MTE2,
  MTE3_V,
  V_MTE3,
  MTE2_MTE3,
  MTE3_MTE2,
  S_V,
  V_S,
  S_MTE2,
  MTE2_S,
  S_MTE3,
  MTE3_S,
  MTE2_MTE1,
  MTE1_MTE2,
  MTE1_M,
  M_MTE1,
  MTE2_M,
  M_MTE2,
  M_FIX,
  FIX_M,
  FIX_MTE2,
  MTE2_FIX,
  FIX_S,
  S_FIX
};
using TEventID = int8_t;

enum class RoundMode {
  CAST_NONE = 0,
  CAST_RINT,
  CAST_FLOOR,
  CAST_CEIL,
  CAST_ROUND,
  CAST_TRUNC,
  CAST_ODD
};
enum class CMPMODE { LT = 0, GT, EQ, LE, GE, NE };
enum class SELMODE { VSEL_CMPMASK_SPR = 0, VSEL_TENSOR_SCALAR_MODE, VSEL_TENSOR_TENSOR_MODE };

struct DataCopyParams {
  DataCopyParams() {}
  DataCopyParams(const uint16_t count, const uint16_t len, const uint16_t srcStrideIn,
                 const uint16_t dstStrideIn)
      : blockCount(count), blockLen(len), srcStride(srcStrideIn), dstStride(dstStrideIn) {}
  uint16_t blockCount = 1;
  uint16_t blockLen = 0;
  uint16_t srcStride = 0;
  uint16_t dstStride = 0;
};

struct DataCopyExtParams {
  DataCopyExtParams() {}
  DataCopyExtParams(const uint16_t count, const uint32_t len, const uint32_t srcStrideIn,
                    const uint32_t dstStrideIn, const uint32_t rsvIn)
      : blockCount(count),
        blockLen(len),
        srcStride(srcStrideIn),
        dstStride(dstStrideIn),
        rsv(rsvIn) {}
  uint16_t blockCount = 1;
  uint32_t blockLen = 0;
  uint32_t srcStride = 0;
  uint32_t dstStride = 0;
  uint32_t rsv = 0;
};

template <typename T>
struct DataCopyPadExtParams {
  DataCopyPadExtParams() {}
  DataCopyPadExtParams(const bool isPadValue, const uint8_t leftPadValue,
                       const uint8_t rightPadValue, T padValue)
      : isPad(isPadValue),
        leftPadding(leftPadValue),
        rightPadding(rightPadValue),
        paddingValue(padValue) {}
  bool isPad = false;
  uint8_t leftPadding = 0;
  uint8_t rightPadding = 0;
  T paddingValue = T(0);
};

namespace twin_detail {

namespace tw = ::tilec_twin;

struct EventPipes {
  tw::Pipe src, dst;
  const char* name;
};
/* In HardEvent's order. */
constexpr EventPipes EVENTS[] = {
    {tw::PIPE_TWIN_MTE2, tw::PIPE_TWIN_V, "MTE2_V"},     {tw::PIPE_TWIN_V, tw::PIPE_TWIN_MTE2, "V_MTE2"},
    {tw::PIPE_TWIN_MTE3, tw::PIPE_TWIN_V, "MTE3_V"},     {tw::PIPE_TWIN_V, tw::PIPE_TWIN_MTE3, "V_MTE3"},
    {tw::PIPE_TWIN_MTE2, tw::PIPE_TWIN_MTE3, "MTE2_MTE3"},
    {tw::PIPE_TWIN_MTE3, tw::PIPE_TWIN_MTE2, "MTE3_MTE2"},
    {tw::PIPE_TWIN_S, tw::PIPE_TWIN_V, "S_V"},           {tw::PIPE_TWIN_V, tw::PIPE_TWIN_S, "V_S"},
    {tw::PIPE_TWIN_S, tw::PIPE_TWIN_MTE2, "S_MTE2"},     {tw::PIPE_TWIN_MTE2, tw::PIPE_TWIN_S, "MTE2_S"},
    {tw::PIPE_TWIN_S, tw::PIPE_TWIN_MTE3, "S_MTE3"},     {tw::PIPE_TWIN_MTE3, tw::PIPE_TWIN_S, "MTE3_S"},
    {tw::PIPE_TWIN_MTE2, tw::PIPE_TWIN_MTE1, "MTE2_MTE1"},
    {tw::PIPE_TWIN_MTE1, tw::PIPE_TWIN_MTE2, "MTE1_MTE2"},
    {tw::PIPE_TWIN_MTE1, tw::PIPE_TWIN_M, "MTE1_M"},     {tw::PIPE_TWIN_M, tw::PIPE_TWIN_MTE1, "M_MTE1"},
    {tw::PIPE_TWIN_MTE2, tw::PIPE_TWIN_M, "MTE2_M"},     {tw::PIPE_TWIN_M, tw::PIPE_TWIN_MTE2, "M_MTE2"},
    {tw::PIPE_TWIN_M, tw::PIPE_TWIN_FIX, "M_FIX"},       {tw::PIPE_TWIN_FIX, tw::PIPE_TWIN_M, "FIX_M"},
    {tw::PIPE_TWIN_FIX, tw::PIPE_TWIN_MTE2, "FIX_MTE2"},
    {tw::PIPE_TWIN_MTE2, tw::PIPE_TWIN_FIX, "MTE2_FIX"},
    {tw::PIPE_TWIN_FIX, tw::PIPE_TWIN_S, "FIX_S"},       {tw::PIPE_TWIN_S, tw::PIPE_TWIN_FIX, "S_FIX"},
};
constexpr tw::Pipe twin_pipe(pipe_t p) {
  return p == PIPE_S      ? tw::PIPE_TWIN_S
         : p == PIPE_V    ? tw::PIPE_TWIN_V
         : p == PIPE_MTE2 ? tw::PIPE_TWIN_MTE2
         : p == PIPE_MTE3 ? tw::PIPE_TWIN_MTE3
         : p == PIPE_MTE1 ? tw::PIPE_TWIN_MTE1
         : p == PIPE_M    ? tw::PIPE_TWIN_M
                          : tw::PIPE_TWIN_FIX;
}
constexpr tw::Pipe event_src(HardEvent e) { return EVENTS[int(e)].src; }
constexpr tw::Pipe event_dst(HardEvent e) { return EVENTS[int(e)].dst; }
constexpr const char* event_name(HardEvent e) { return EVENTS[int(e)].name; }
constexpr const char* position_name(TPosition p) {
  switch (p) {
    case TPosition::VECIN: return "VECIN";
    case TPosition::VECOUT: return "VECOUT";
    case TPosition::VECCALC: return "VECCALC";
    case TPosition::A1: return "A1";
    case TPosition::B1: return "B1";
    case TPosition::A2: return "A2";
    case TPosition::B2: return "B2";
    case TPosition::CO1: return "CO1";
    default: return "?";
  }
}
constexpr bool vector_position(TPosition p) {
  return p == TPosition::VECIN || p == TPosition::VECOUT || p == TPosition::VECCALC;
}
constexpr bool modelled_position(TPosition p) {
  return vector_position(p) || p == TPosition::A1 || p == TPosition::B1 || p == TPosition::A2 ||
         p == TPosition::B2 || p == TPosition::CO1;
}
/* The memory of a position: A1/B1 L1, A2 L0A, B2 L0B, CO1 L0C, the vector ones UB. */
constexpr tw::Mem mem_of(TPosition p) {
  return p == TPosition::A1 || p == TPosition::B1 ? tw::MEM_L1
         : p == TPosition::A2                     ? tw::MEM_L0A
         : p == TPosition::B2                     ? tw::MEM_L0B
         : p == TPosition::CO1                    ? tw::MEM_L0C
                                                  : tw::MEM_UB;
}
/* Who fills a queue's tensors and who empties them: copies in fill VECIN, vector code fills
 * VECOUT/VECCALC; vector code reads VECIN/VECCALC, copies out read VECOUT.  On the cube core
 * MTE2 fills A1/B1 and MTE1 reads them into A2/B2, which Mmad (M) reads; M fills CO1 and
 * Fixpipe (FIX) empties it. */
constexpr tw::Pipe producer_of(TPosition src) {
  switch (src) {
    case TPosition::VECIN:
    case TPosition::A1:
    case TPosition::B1: return tw::PIPE_TWIN_MTE2;
    case TPosition::A2:
    case TPosition::B2: return tw::PIPE_TWIN_MTE1;
    case TPosition::CO1: return tw::PIPE_TWIN_M;
    default: return tw::PIPE_TWIN_V;
  }
}
constexpr tw::Pipe consumer_of(TPosition dst) {
  switch (dst) {
    case TPosition::VECOUT: return tw::PIPE_TWIN_MTE3;
    case TPosition::A1:
    case TPosition::B1: return tw::PIPE_TWIN_MTE1;
    case TPosition::A2:
    case TPosition::B2: return tw::PIPE_TWIN_M;
    case TPosition::CO1: return tw::PIPE_TWIN_FIX;
    default: return tw::PIPE_TWIN_V;
  }
}

template <typename T>
inline float to_float(T v) {
  return float(v);
}
template <typename T>
inline T from_float(float v) {
  return T(v);
}

template <typename T>
constexpr bool is_half_or_float = tw::one_of<T, half, float>;

}  // namespace twin_detail

class TPipe;
template <typename T>
class GlobalTensor;

/* --- LocalTensor: a typed window on the Unified Buffer --- */
template <typename T>
class LocalTensor {
 public:
  using PrimType = T;
  LocalTensor() = default;

  T GetValue(const uint32_t index, TwinLoc loc = TwinLoc::here()) const {
    T v;
    tilec_twin::ub_scalar("GetValue", loc, ref_, sizeof(T), index, &v, false);
    return v;
  }
  void SetValue(const uint32_t index, const T& value, TwinLoc loc = TwinLoc::here()) const {
    T v = value;
    tilec_twin::ub_scalar("SetValue", loc, ref_, sizeof(T), index, &v, true);
  }
  /* The tensor from element `offset` on. */
  LocalTensor operator[](const uint32_t offset) const {
    if (uint64_t(offset) * sizeof(T) > ref_.bytes)
      tilec_twin::fail("LocalTensor::operator[]", TwinLoc{},
                       "offset %u is beyond the tensor's %u elements", offset, GetSize());
    LocalTensor t = *this;
    t.ref_.off = uint32_t(ref_.off + uint64_t(offset) * sizeof(T));
    t.ref_.bytes = ref_.bytes - uint64_t(offset) * sizeof(T);
    return t;
  }
  uint32_t GetSize() const { return uint32_t(ref_.bytes / sizeof(T)); }
  uint32_t GetLength() const { return uint32_t(ref_.bytes); }
  template <typename U>
  LocalTensor<U> ReinterpretCast() const {
    return LocalTensor<U>::twin_make(ref_);
  }
  /* The element storage in the twin's UB arena (bypasses every check). */
  T* GetPhyAddr() const { return reinterpret_cast<T*>(tilec_twin::ub_base() + ref_.off); }

  const tilec_twin::TensorRef& twin_ref() const { return ref_; }
  static LocalTensor twin_make(const tilec_twin::TensorRef& r) {
    LocalTensor t;
    t.ref_ = r;
    return t;
  }

 private:
  tilec_twin::TensorRef ref_;
};

/* --- GlobalTensor: a typed window on global memory --- */
template <typename T>
class GlobalTensor {
 public:
  using PrimType = T;
  GlobalTensor() = default;

  void SetGlobalBuffer(__gm__ T* buffer, uint64_t bufferSize) {
    ptr_ = buffer;
    bytes_ = bufferSize * sizeof(T);
  }
  /* Without a size the twin cannot bound-check this tensor (declared GM buffers still apply). */
  void SetGlobalBuffer(__gm__ T* buffer) {
    ptr_ = buffer;
    bytes_ = tilec_twin::UNKNOWN_SIZE;
  }
  T GetValue(const uint64_t offset, TwinLoc loc = TwinLoc::here()) const {
    T v;
    tilec_twin::gm_scalar("GlobalTensor::GetValue", loc, twin_view(), sizeof(T), offset, &v, false);
    return v;
  }
  void SetValue(const uint64_t offset, const T& value, TwinLoc loc = TwinLoc::here()) const {
    T v = value;
    tilec_twin::gm_scalar("GlobalTensor::SetValue", loc, twin_view(), sizeof(T), offset, &v, true);
  }
  GlobalTensor operator[](const uint64_t offset) const {
    if (bytes_ != tilec_twin::UNKNOWN_SIZE && offset * sizeof(T) > bytes_)
      tilec_twin::fail("GlobalTensor::operator[]", TwinLoc{},
                       "offset %llu is beyond the tensor's %llu elements",
                       (unsigned long long)offset, (unsigned long long)(bytes_ / sizeof(T)));
    GlobalTensor t = *this;
    t.ptr_ = ptr_ + offset;
    if (bytes_ != tilec_twin::UNKNOWN_SIZE) t.bytes_ = bytes_ - offset * sizeof(T);
    return t;
  }
  uint64_t GetSize() const { return bytes_ == tilec_twin::UNKNOWN_SIZE ? 0 : bytes_ / sizeof(T); }
  __gm__ T* GetPhyAddr() const { return ptr_; }
  __gm__ T* GetPhyAddr(const uint64_t offset) const { return ptr_ + offset; }

  tilec_twin::GmView twin_view() const {
    return tilec_twin::GmView{reinterpret_cast<uint8_t*>(ptr_), bytes_};
  }

 private:
  T* ptr_ = nullptr;
  uint64_t bytes_ = tilec_twin::UNKNOWN_SIZE;
};

/* --- queues and buffers --- */
template <TPosition src, TPosition dst, int32_t depth, auto mask = 0>
class TQueBind {
  static_assert(twin_detail::modelled_position(src) && twin_detail::modelled_position(dst),
                "the twin models the positions VECIN, VECOUT, VECCALC, A1, B1, A2, B2, CO1");
  static_assert(twin_detail::mem_of(src) == twin_detail::mem_of(dst),
                "the twin models TQueBind within one memory only");
  static_assert(depth >= 1, "queue depth must be at least 1");

 public:
  TQueBind() = default;
  TQueBind(const TQueBind&) = delete;
  TQueBind& operator=(const TQueBind&) = delete;

  template <typename T>
  LocalTensor<T> AllocTensor(TwinLoc loc = TwinLoc::here()) {
    return LocalTensor<T>::twin_make(tilec_twin::que_alloc(id("AllocTensor", loc), loc));
  }
  template <typename T>
  void AllocTensor(LocalTensor<T>& tensor, TwinLoc loc = TwinLoc::here()) {
    tensor = AllocTensor<T>(loc);
  }
  template <typename T>
  bool EnQue(const LocalTensor<T>& tensor, TwinLoc loc = TwinLoc::here()) {
    tilec_twin::que_enque(id("EnQue", loc), tensor.twin_ref(), loc);
    return true;
  }
  template <typename T>
  LocalTensor<T> DeQue(TwinLoc loc = TwinLoc::here()) {
    return LocalTensor<T>::twin_make(tilec_twin::que_deque(id("DeQue", loc), loc));
  }
  template <typename T>
  void FreeTensor(LocalTensor<T>& tensor, TwinLoc loc = TwinLoc::here()) {
    tilec_twin::que_free(id("FreeTensor", loc), tensor.twin_ref(), loc);
  }
  int32_t GetTensorCountInQue() {
    return tilec_twin::que_count(id("GetTensorCountInQue", TwinLoc{}));
  }
  bool HasTensorInQue() { return GetTensorCountInQue() > 0; }
  bool VacantInQue() { return GetTensorCountInQue() < depth; }
  bool HasIdleBuffer() { return tilec_twin::que_has_idle(id("HasIdleBuffer", TwinLoc{})); }

  void twin_init(int pipe, int num, uint64_t len, TwinLoc loc) {
    char kind[64];
    if (src == dst)
      std::snprintf(kind, sizeof kind, "TQue<%s, %d>", twin_detail::position_name(src), int(depth));
    else
      std::snprintf(kind, sizeof kind, "TQueBind<%s, %s, %d>", twin_detail::position_name(src),
                    twin_detail::position_name(dst), int(depth));
    id_ = tilec_twin::que_init("InitBuffer", loc, pipe, id_, kind, depth,
                               twin_detail::producer_of(src), twin_detail::consumer_of(dst), num,
                               len, twin_detail::mem_of(src));
  }

 private:
  int id(const char* op, TwinLoc loc) const { return tilec_twin::que_check(id_, op, loc); }
  int id_ = -1;
};

template <TPosition pos, int32_t depth, auto mask = 0>
class TQue : public TQueBind<pos, pos, depth, mask> {};

template <TPosition pos = TPosition::LCM>
class TBuf {
  static_assert(twin_detail::modelled_position(pos),
                "the twin models the positions VECIN, VECOUT, VECCALC, A1, B1, A2, B2, CO1");

 public:
  TBuf() = default;
  TBuf(const TBuf&) = delete;
  TBuf& operator=(const TBuf&) = delete;

  template <typename T>
  LocalTensor<T> Get(TwinLoc loc = TwinLoc::here()) {
    const int b = tilec_twin::que_check(id_, "TBuf::Get", loc);
    return LocalTensor<T>::twin_make(tilec_twin::tbuf_get(b, bytes_ / sizeof(T) * sizeof(T), loc));
  }
  /* `len` elements of T. */
  template <typename T>
  LocalTensor<T> Get(uint32_t len, TwinLoc loc = TwinLoc::here()) {
    const int b = tilec_twin::que_check(id_, "TBuf::Get", loc);
    return LocalTensor<T>::twin_make(tilec_twin::tbuf_get(b, uint64_t(len) * sizeof(T), loc));
  }

  void twin_init(int pipe, uint64_t len, TwinLoc loc) {
    char kind[32];
    std::snprintf(kind, sizeof kind, "TBuf<%s>", twin_detail::position_name(pos));
    id_ = tilec_twin::tbuf_init("InitBuffer", loc, pipe, id_, kind, len, twin_detail::mem_of(pos));
    const uint32_t g = tilec_twin::MEM_GRANULE[twin_detail::mem_of(pos)];
    bytes_ = (len + g - 1) / g * g;
  }

 private:
  int id_ = -1;
  uint64_t bytes_ = 0;
};

namespace twin_detail {
inline thread_local TPipe* current_pipe = nullptr;
}

/* --- TPipe: owns the core's Unified Buffer (192 KiB on dav-2201) --- */
class TPipe {
 public:
  explicit TPipe(TwinLoc loc = TwinLoc::here()) : id_(tilec_twin::pipe_create(loc)) {
    twin_detail::current_pipe = this;
  }
  ~TPipe() {
    tilec_twin::pipe_destroy(id_);
    if (twin_detail::current_pipe == this) twin_detail::current_pipe = nullptr;
  }
  TPipe(const TPipe&) = delete;
  TPipe& operator=(const TPipe&) = delete;

  /* `num` buffers of `len` bytes each (rounded up to 32) for a TQue / TQueBind. */
  template <class Que>
  bool InitBuffer(Que& que, uint8_t num, uint32_t len, TwinLoc loc = TwinLoc::here()) {
    que.twin_init(id_, num, len, loc);
    return true;
  }
  template <TPosition pos>
  bool InitBuffer(TBuf<pos>& buf, uint32_t len, TwinLoc loc = TwinLoc::here()) {
    buf.twin_init(id_, len, loc);
    return true;
  }
  void Reset(TwinLoc loc = TwinLoc::here()) { tilec_twin::pipe_reset(id_, loc); }
  void Destroy(TwinLoc loc = TwinLoc::here()) { tilec_twin::pipe_reset(id_, loc); }

  template <HardEvent evt>
  TEventID FetchEventID(TwinLoc loc = TwinLoc::here()) {
    return FetchEventID(evt, loc);
  }
  TEventID FetchEventID(HardEvent evt, TwinLoc loc = TwinLoc::here()) {
    return TEventID(tilec_twin::fetch_event_id(twin_detail::event_src(evt),
                                               twin_detail::event_dst(evt), false, loc));
  }
  template <HardEvent evt>
  TEventID AllocEventID(TwinLoc loc = TwinLoc::here()) {
    return TEventID(tilec_twin::fetch_event_id(twin_detail::event_src(evt),
                                               twin_detail::event_dst(evt), true, loc));
  }
  template <HardEvent evt>
  void ReleaseEventID(TEventID id, TwinLoc loc = TwinLoc::here()) {
    tilec_twin::release_event_id(twin_detail::event_src(evt), twin_detail::event_dst(evt), id, loc);
  }

 private:
  int id_;
};

inline TPipe* GetTPipePtr() { return twin_detail::current_pipe; }

inline int64_t GetBlockIdx() { return tilec_twin::block_idx(); }
inline int64_t GetBlockNum() { return tilec_twin::block_num(); }
inline int64_t GetSubBlockIdx() { return tilec_twin::sub_block_idx(); }
inline int64_t GetTaskRatio() { return tilec_twin::task_ratio(); }

/* --- synchronisation --- */
template <HardEvent evt>
inline void SetFlag(int32_t eventID, TwinLoc loc = TwinLoc::here()) {
  tilec_twin::set_flag(twin_detail::event_src(evt), twin_detail::event_dst(evt), eventID,
                       twin_detail::event_name(evt), loc);
}
template <HardEvent evt>
inline void WaitFlag(int32_t eventID, TwinLoc loc = TwinLoc::here()) {
  tilec_twin::wait_flag(twin_detail::event_src(evt), twin_detail::event_dst(evt), eventID,
                        twin_detail::event_name(evt), loc);
}
template <pipe_t pipe>
inline void PipeBarrier(TwinLoc loc = TwinLoc::here()) {
  constexpr int p = pipe == PIPE_ALL ? -1 : twin_detail::twin_pipe(pipe);
  tilec_twin::barrier(p, loc);
}

/* --- data movement --- */
template <typename T>
inline void DataCopy(const LocalTensor<T>& dst, const GlobalTensor<T>& src, const uint32_t count,
                     TwinLoc loc = TwinLoc::here()) {
  tilec_twin::copy_in("DataCopy", loc, dst.twin_ref(), src.twin_view(), sizeof(T),
                      tilec_twin::type_name<T>(), count);
}
template <typename T>
inline void DataCopy(const GlobalTensor<T>& dst, const LocalTensor<T>& src, const uint32_t count,
                     TwinLoc loc = TwinLoc::here()) {
  tilec_twin::copy_out("DataCopy", loc, dst.twin_view(), src.twin_ref(), sizeof(T),
                       tilec_twin::type_name<T>(), count);
}
/* blockLen, srcStride and dstStride count 32-byte DataBlocks (strides are gaps between blocks). */
template <typename T>
inline void DataCopy(const LocalTensor<T>& dst, const GlobalTensor<T>& src, const DataCopyParams& p,
                     TwinLoc loc = TwinLoc::here()) {
  tilec_twin::copy_blocks_in("DataCopy", loc, dst.twin_ref(), src.twin_view(), sizeof(T),
                             p.blockCount, p.blockLen, p.srcStride, p.dstStride);
}
template <typename T>
inline void DataCopy(const GlobalTensor<T>& dst, const LocalTensor<T>& src, const DataCopyParams& p,
                     TwinLoc loc = TwinLoc::here()) {
  tilec_twin::copy_blocks_out("DataCopy", loc, dst.twin_view(), src.twin_ref(), sizeof(T),
                              p.blockCount, p.blockLen, p.srcStride, p.dstStride);
}

/* GM -> UB: blockLen in bytes; srcStride in bytes (GM gap); dstStride in DataBlocks (UB gap);
 * every UB row is padded to 32 bytes. */
template <typename T>
inline void DataCopyPad(const LocalTensor<T>& dst, const GlobalTensor<T>& src,
                        const DataCopyExtParams& p, const DataCopyPadExtParams<T>& pad,
                        TwinLoc loc = TwinLoc::here()) {
  tilec_twin::copy_pad_in("DataCopyPad", loc, dst.twin_ref(), src.twin_view(), sizeof(T),
                          p.blockCount, p.blockLen, p.srcStride, p.dstStride, pad.isPad,
                          pad.leftPadding, pad.rightPadding, &pad.paddingValue);
}
/* UB -> GM: blockLen in bytes; srcStride in DataBlocks (UB gap); dstStride in bytes (GM gap). */
template <typename T>
inline void DataCopyPad(const GlobalTensor<T>& dst, const LocalTensor<T>& src,
                        const DataCopyExtParams& p, TwinLoc loc = TwinLoc::here()) {
  tilec_twin::copy_pad_out("DataCopyPad", loc, dst.twin_view(), src.twin_ref(), sizeof(T),
                           p.blockCount, p.blockLen, p.srcStride, p.dstStride);
}
template <typename T>
inline void DataCopyPad(const GlobalTensor<T>& dst, const LocalTensor<T>& src,
                        const DataCopyParams& p, TwinLoc loc = TwinLoc::here()) {
  tilec_twin::copy_pad_out("DataCopyPad", loc, dst.twin_view(), src.twin_ref(), sizeof(T),
                           p.blockCount, p.blockLen, p.srcStride, p.dstStride);
}

/* --- vector instructions (level 2, "first count elements") --- */
namespace twin_detail {

template <typename T>
inline uint8_t* at(const LocalTensor<T>& t) {
  return tw::ub_base() + t.twin_ref().off;
}

template <typename T, typename F>
inline void binary(const char* op, TwinLoc loc, const LocalTensor<T>& dst, const LocalTensor<T>& a,
                   const LocalTensor<T>& b, int64_t count, F f) {
  const uint64_t n = tw::check_count(op, loc, count);
  tw::VecOp(op, loc)
      .src(a.twin_ref(), n * sizeof(T), "src0")
      .src(b.twin_ref(), n * sizeof(T), "src1")
      .dst(dst.twin_ref(), n * sizeof(T))
      .no_partial_overlap()
      .commit();
  uint8_t *d = at(dst), *pa = at(a), *pb = at(b);
  for (uint64_t i = 0; i < n; ++i)
    tw::store<T>(d + i * sizeof(T),
                 f(tw::load<T>(pa + i * sizeof(T)), tw::load<T>(pb + i * sizeof(T))));
}

template <typename T, typename F>
inline void unary(const char* op, TwinLoc loc, const LocalTensor<T>& dst, const LocalTensor<T>& src,
                  int64_t count, F f) {
  const uint64_t n = tw::check_count(op, loc, count);
  tw::VecOp(op, loc)
      .src(src.twin_ref(), n * sizeof(T))
      .dst(dst.twin_ref(), n * sizeof(T))
      .no_partial_overlap()
      .commit();
  uint8_t *d = at(dst), *s = at(src);
  for (uint64_t i = 0; i < n; ++i)
    tw::store<T>(d + i * sizeof(T), f(tw::load<T>(s + i * sizeof(T))));
}

/* Floating point: computed in float32, rounded to T once per instruction.  Integers wrap. */
template <typename T, typename FF, typename FI>
inline T arith(T a, T b, FF ff, FI fi) {
  if constexpr (std::is_integral_v<T>)
    return T(fi(int64_t(a), int64_t(b)));
  else
    return from_float<T>(ff(to_float(a), to_float(b)));
}

template <typename T>
inline T fmax_t(T a, T b) {
  if constexpr (std::is_integral_v<T>)
    return a > b ? a : b;
  else
    return from_float<T>(std::fmax(to_float(a), to_float(b)));
}
template <typename T>
inline T fmin_t(T a, T b) {
  if constexpr (std::is_integral_v<T>)
    return a < b ? a : b;
  else
    return from_float<T>(std::fmin(to_float(a), to_float(b)));
}

}  // namespace twin_detail

#define TILEC_TWIN_TYPES_CHECK(op, cond, list) \
  static_assert(cond, #op ": unsupported element type on dav-2201 (supported: " list ")")

template <typename T, bool isSetMask = true>
inline void Add(const LocalTensor<T>& dst, const LocalTensor<T>& src0, const LocalTensor<T>& src1,
                const int32_t& count, TwinLoc loc = TwinLoc::here()) {
  TILEC_TWIN_TYPES_CHECK(Add, (tilec_twin::one_of<T, half, float, int16_t, int32_t>),
                         "half, float, int16_t, int32_t");
  twin_detail::binary("Add", loc, dst, src0, src1, count, [](T a, T b) {
    return twin_detail::arith(
        a, b, [](float x, float y) { return x + y; }, [](int64_t x, int64_t y) { return x + y; });
  });
}
template <typename T, bool isSetMask = true>
inline void Sub(const LocalTensor<T>& dst, const LocalTensor<T>& src0, const LocalTensor<T>& src1,
                const int32_t& count, TwinLoc loc = TwinLoc::here()) {
  TILEC_TWIN_TYPES_CHECK(Sub, (tilec_twin::one_of<T, half, float, int16_t, int32_t>),
                         "half, float, int16_t, int32_t");
  twin_detail::binary("Sub", loc, dst, src0, src1, count, [](T a, T b) {
    return twin_detail::arith(
        a, b, [](float x, float y) { return x - y; }, [](int64_t x, int64_t y) { return x - y; });
  });
}
template <typename T, bool isSetMask = true>
inline void Mul(const LocalTensor<T>& dst, const LocalTensor<T>& src0, const LocalTensor<T>& src1,
                const int32_t& count, TwinLoc loc = TwinLoc::here()) {
  TILEC_TWIN_TYPES_CHECK(Mul, (tilec_twin::one_of<T, half, float, int16_t, int32_t>),
                         "half, float, int16_t, int32_t");
  twin_detail::binary("Mul", loc, dst, src0, src1, count, [](T a, T b) {
    return twin_detail::arith(
        a, b, [](float x, float y) { return x * y; }, [](int64_t x, int64_t y) { return x * y; });
  });
}
template <typename T, bool isSetMask = true>
inline void Div(const LocalTensor<T>& dst, const LocalTensor<T>& src0, const LocalTensor<T>& src1,
                const int32_t& count, TwinLoc loc = TwinLoc::here()) {
  TILEC_TWIN_TYPES_CHECK(Div, twin_detail::is_half_or_float<T>, "half, float");
  twin_detail::binary("Div", loc, dst, src0, src1, count, [](T a, T b) {
    return twin_detail::from_float<T>(twin_detail::to_float(a) / twin_detail::to_float(b));
  });
}
template <typename T, bool isSetMask = true>
inline void Max(const LocalTensor<T>& dst, const LocalTensor<T>& src0, const LocalTensor<T>& src1,
                const int32_t& count, TwinLoc loc = TwinLoc::here()) {
  TILEC_TWIN_TYPES_CHECK(Max, (tilec_twin::one_of<T, half, float, int16_t, int32_t>),
                         "half, float, int16_t, int32_t");
  twin_detail::binary("Max", loc, dst, src0, src1, count,
                      [](T a, T b) { return twin_detail::fmax_t(a, b); });
}
template <typename T, bool isSetMask = true>
inline void Min(const LocalTensor<T>& dst, const LocalTensor<T>& src0, const LocalTensor<T>& src1,
                const int32_t& count, TwinLoc loc = TwinLoc::here()) {
  TILEC_TWIN_TYPES_CHECK(Min, (tilec_twin::one_of<T, half, float, int16_t, int32_t>),
                         "half, float, int16_t, int32_t");
  twin_detail::binary("Min", loc, dst, src0, src1, count,
                      [](T a, T b) { return twin_detail::fmin_t(a, b); });
}

/* Tensor-scalar: the scalar has the tensors' type exactly (as in Ascend C). */
template <typename T, bool isSetMask = true>
inline void Adds(const LocalTensor<T>& dst, const LocalTensor<T>& src, const T& scalarValue,
                 const int32_t& count, TwinLoc loc = TwinLoc::here()) {
  TILEC_TWIN_TYPES_CHECK(Adds, (tilec_twin::one_of<T, half, float, int16_t, int32_t>),
                         "half, float, int16_t, int32_t");
  const T s = scalarValue;
  twin_detail::unary("Adds", loc, dst, src, count, [s](T a) {
    return twin_detail::arith(
        a, s, [](float x, float y) { return x + y; }, [](int64_t x, int64_t y) { return x + y; });
  });
}
template <typename T, bool isSetMask = true>
inline void Muls(const LocalTensor<T>& dst, const LocalTensor<T>& src, const T& scalarValue,
                 const int32_t& count, TwinLoc loc = TwinLoc::here()) {
  TILEC_TWIN_TYPES_CHECK(Muls, (tilec_twin::one_of<T, half, float, int16_t, int32_t>),
                         "half, float, int16_t, int32_t");
  const T s = scalarValue;
  twin_detail::unary("Muls", loc, dst, src, count, [s](T a) {
    return twin_detail::arith(
        a, s, [](float x, float y) { return x * y; }, [](int64_t x, int64_t y) { return x * y; });
  });
}
template <typename T, bool isSetMask = true>
inline void Maxs(const LocalTensor<T>& dst, const LocalTensor<T>& src, const T& scalarValue,
                 const int32_t& count, TwinLoc loc = TwinLoc::here()) {
  TILEC_TWIN_TYPES_CHECK(Maxs, (tilec_twin::one_of<T, half, float, int16_t, int32_t>),
                         "half, float, int16_t, int32_t");
  const T s = scalarValue;
  twin_detail::unary("Maxs", loc, dst, src, count, [s](T a) { return twin_detail::fmax_t(a, s); });
}
template <typename T, bool isSetMask = true>
inline void Mins(const LocalTensor<T>& dst, const LocalTensor<T>& src, const T& scalarValue,
                 const int32_t& count, TwinLoc loc = TwinLoc::here()) {
  TILEC_TWIN_TYPES_CHECK(Mins, (tilec_twin::one_of<T, half, float, int16_t, int32_t>),
                         "half, float, int16_t, int32_t");
  const T s = scalarValue;
  twin_detail::unary("Mins", loc, dst, src, count, [s](T a) { return twin_detail::fmin_t(a, s); });
}

#define TILEC_TWIN_UNARY_FLOAT(NAME, EXPR)                                                     \
  template <typename T, bool isSetMask = true>                                                 \
  inline void NAME(const LocalTensor<T>& dst, const LocalTensor<T>& src, const int32_t& count, \
                   TwinLoc loc = TwinLoc::here()) {                                            \
    TILEC_TWIN_TYPES_CHECK(NAME, twin_detail::is_half_or_float<T>, "half, float");             \
    twin_detail::unary(#NAME, loc, dst, src, count, [](T a) {                                  \
      const float x = twin_detail::to_float(a);                                                \
      return twin_detail::from_float<T>(EXPR);                                                 \
    });                                                                                        \
  }
TILEC_TWIN_UNARY_FLOAT(Exp, std::exp(x))
TILEC_TWIN_UNARY_FLOAT(Ln, std::log(x))
TILEC_TWIN_UNARY_FLOAT(Abs, std::fabs(x))
TILEC_TWIN_UNARY_FLOAT(Sqrt, std::sqrt(x))
TILEC_TWIN_UNARY_FLOAT(Rsqrt, 1.0f / std::sqrt(x))
TILEC_TWIN_UNARY_FLOAT(Reciprocal, 1.0f / x)
#undef TILEC_TWIN_UNARY_FLOAT

template <typename T, bool isSetMask = true>
inline void Relu(const LocalTensor<T>& dst, const LocalTensor<T>& src, const int32_t& count,
                 TwinLoc loc = TwinLoc::here()) {
  TILEC_TWIN_TYPES_CHECK(Relu, (tilec_twin::one_of<T, half, float, int32_t>),
                         "half, float, int32_t");
  twin_detail::unary("Relu", loc, dst, src, count, [](T a) {
    if constexpr (std::is_integral_v<T>)
      return a < 0 ? T(0) : a;
    else
      return twin_detail::to_float(a) < 0.0f ? T(0.0f) : a;
  });
}

template <typename T>
inline void Duplicate(const LocalTensor<T>& dst, const T& scalarValue, const int32_t& count,
                      TwinLoc loc = TwinLoc::here()) {
  TILEC_TWIN_TYPES_CHECK(
      Duplicate,
      (tilec_twin::one_of<T, half, bfloat16_t, int16_t, uint16_t, float, int32_t, uint32_t>),
      "half, bfloat16_t, int16_t, uint16_t, float, int32_t, uint32_t");
  const uint64_t n = tilec_twin::check_count("Duplicate", loc, count);
  tilec_twin::VecOp("Duplicate", loc).dst(dst.twin_ref(), n * sizeof(T)).commit();
  uint8_t* d = twin_detail::at(dst);
  for (uint64_t i = 0; i < n; ++i) tilec_twin::store<T>(d + i * sizeof(T), scalarValue);
}

/* --- Cast --- */
namespace twin_detail {

constexpr unsigned rint_modes = 1u << int(RoundMode::CAST_RINT) | 1u << int(RoundMode::CAST_FLOOR) |
                                1u << int(RoundMode::CAST_CEIL) | 1u << int(RoundMode::CAST_ROUND) |
                                1u << int(RoundMode::CAST_TRUNC);
constexpr unsigned none_mode = 1u << int(RoundMode::CAST_NONE);
constexpr unsigned odd_mode = 1u << int(RoundMode::CAST_ODD);

/* The RoundModes the dav-2201 Cast accepts for src U -> dst T (Cast documentation, table 4);
 * 0: the pair is not a Cast. */
template <typename T, typename U>
constexpr unsigned cast_modes() {
  if constexpr (std::is_same_v<U, half> && std::is_same_v<T, float>)
    return none_mode;
  else if constexpr (std::is_same_v<U, half> && std::is_same_v<T, int32_t>)
    return rint_modes;
  else if constexpr (std::is_same_v<U, float> && std::is_same_v<T, float>)
    return rint_modes;
  else if constexpr (std::is_same_v<U, float> && std::is_same_v<T, int32_t>)
    return rint_modes;
  else if constexpr (std::is_same_v<U, float> && std::is_same_v<T, half>)
    return rint_modes | odd_mode | none_mode;
  else if constexpr (std::is_same_v<U, float> && std::is_same_v<T, bfloat16_t>)
    return rint_modes;
  else if constexpr (std::is_same_v<U, bfloat16_t> && std::is_same_v<T, float>)
    return none_mode;
  else if constexpr (std::is_same_v<U, bfloat16_t> && std::is_same_v<T, int32_t>)
    return rint_modes;
  else if constexpr (std::is_same_v<U, int32_t> && std::is_same_v<T, float>)
    return rint_modes | none_mode;
  else
    return 0;
}

inline tw::Rounding rounding(RoundMode m) {
  switch (m) {
    case RoundMode::CAST_FLOOR: return tw::Rounding::FLOOR;
    case RoundMode::CAST_CEIL: return tw::Rounding::CEIL;
    case RoundMode::CAST_ROUND: return tw::Rounding::ROUND;
    case RoundMode::CAST_TRUNC: return tw::Rounding::TRUNC;
    case RoundMode::CAST_ODD: return tw::Rounding::ODD;
    default: return tw::Rounding::RINT;  // CAST_RINT, and CAST_NONE where rounding is needed
  }
}

inline const char* round_mode_name(RoundMode m) {
  static const char* const names[] = {"CAST_NONE",  "CAST_RINT",  "CAST_FLOOR", "CAST_CEIL",
                                      "CAST_ROUND", "CAST_TRUNC", "CAST_ODD"};
  return names[int(m)];
}

/* Overflow saturates (the documented default). */
template <typename T, typename U>
inline T cast_one(U v, tw::Rounding r) {
  if constexpr (std::is_same_v<T, float> && std::is_same_v<U, int32_t>)
    return tw::int32_to_float(v, r);
  else if constexpr (std::is_same_v<T, int32_t>)
    return tw::float_to_int32(float(v), r);
  else if constexpr (std::is_same_v<T, float> && std::is_same_v<U, float>)
    return tw::round_integral(v, r);
  else if constexpr (std::is_same_v<T, float>)
    return float(v);  // exact widening
  else if constexpr (std::is_same_v<T, half>)
    return half::from_bits(tw::f32_to_f16(v, r, true));
  else
    return bfloat16_t::from_bits(tw::f32_to_bf16(v, r, true));
}

}  // namespace twin_detail

template <typename T, typename U>
inline void Cast(const LocalTensor<T>& dst, const LocalTensor<U>& src, const RoundMode& roundMode,
                 const uint32_t count, TwinLoc loc = TwinLoc::here()) {
  constexpr unsigned modes = twin_detail::cast_modes<T, U>();
  static_assert(modes != 0, "Cast: this source/destination type pair is not supported on dav-2201");
  if (!(modes & (1u << int(roundMode))))
    tilec_twin::fail("Cast", loc, "%s -> %s does not support RoundMode::%s on dav-2201",
                     tilec_twin::type_name<U>(), tilec_twin::type_name<T>(),
                     twin_detail::round_mode_name(roundMode));
  const uint64_t n = count;
  tilec_twin::VecOp("Cast", loc)
      .src(src.twin_ref(), n * sizeof(U))
      .dst(dst.twin_ref(), n * sizeof(T))
      .no_partial_overlap()
      .commit();
  const tilec_twin::Rounding r = twin_detail::rounding(roundMode);
  uint8_t *d = twin_detail::at(dst), *s = twin_detail::at(src);
  for (uint64_t i = 0; i < n; ++i)
    tilec_twin::store<T>(d + i * sizeof(T),
                         twin_detail::cast_one<T, U>(tilec_twin::load<U>(s + i * sizeof(U)), r));
}

/* --- Compare and Select: masks are bit i of byte i / 8 for element i (LSB first) --- */
template <typename T, typename U>
inline void Compare(const LocalTensor<U>& dst, const LocalTensor<T>& src0,
                    const LocalTensor<T>& src1, CMPMODE cmpMode, uint32_t count,
                    TwinLoc loc = TwinLoc::here()) {
  TILEC_TWIN_TYPES_CHECK(Compare, (tilec_twin::one_of<T, half, float, int32_t>),
                         "half, float, int32_t");
  static_assert(tilec_twin::one_of<U, uint8_t, int8_t>,
                "Compare: the mask tensor holds uint8_t or int8_t");
  const uint64_t n = count, bytes = n * sizeof(T);
  if (bytes % tilec_twin::REPEAT)
    tilec_twin::fail(
        "Compare", loc,
        "count %u of %s is %llu bytes, not a multiple of 256 bytes as the count form requires",
        count, tilec_twin::type_name<T>(), (unsigned long long)bytes);
  if (std::is_same_v<T, int32_t> && cmpMode != CMPMODE::EQ)
    tilec_twin::fail("Compare", loc, "int32_t supports CMPMODE::EQ only");
  tilec_twin::VecOp("Compare", loc)
      .src(src0.twin_ref(), bytes, "src0")
      .src(src1.twin_ref(), bytes, "src1")
      .dst(dst.twin_ref(), n / 8, "dst mask")
      .no_partial_overlap()
      .commit();
  uint8_t *d = twin_detail::at(dst), *a = twin_detail::at(src0), *b = twin_detail::at(src1);
  std::memset(d, 0, n / 8);
  for (uint64_t i = 0; i < n; ++i) {
    const T x = tilec_twin::load<T>(a + i * sizeof(T)), y = tilec_twin::load<T>(b + i * sizeof(T));
    bool r;
    if constexpr (std::is_integral_v<T>) {
      r = x == y;
    } else {
      const float fx = float(x), fy = float(y);
      switch (cmpMode) {
        case CMPMODE::LT: r = fx < fy; break;
        case CMPMODE::GT: r = fx > fy; break;
        case CMPMODE::EQ: r = fx == fy; break;
        case CMPMODE::LE: r = fx <= fy; break;
        case CMPMODE::GE: r = fx >= fy; break;
        default: r = fx != fy; break;
      }
    }
    if (r) d[i / 8] |= uint8_t(1u << (i % 8));
  }
}

namespace twin_detail {
template <typename T, typename U, typename Pick>
inline void select(const char* op, TwinLoc loc, const LocalTensor<T>& dst,
                   const LocalTensor<U>& mask, const LocalTensor<T>& src0,
                   const LocalTensor<T>* src1, uint64_t n, Pick pick) {
  tw::check_select_scratch(op, loc);
  tw::VecOp v(op, loc);
  v.src(mask.twin_ref(), (n + 7) / 8, "selMask").src(src0.twin_ref(), n * sizeof(T), "src0");
  if (src1) v.src(src1->twin_ref(), n * sizeof(T), "src1");
  v.dst(dst.twin_ref(), n * sizeof(T)).no_partial_overlap().commit();
  uint8_t *d = at(dst), *m = at(mask), *a = at(src0);
  for (uint64_t i = 0; i < n; ++i) {
    const bool bit = (m[i / 8] >> (i % 8)) & 1u;
    tw::store<T>(d + i * sizeof(T), bit ? tw::load<T>(a + i * sizeof(T)) : pick(i));
  }
}
}  // namespace twin_detail

template <typename T, typename U>
inline void Select(const LocalTensor<T>& dst, const LocalTensor<U>& selMask,
                   const LocalTensor<T>& src0, const LocalTensor<T>& src1, SELMODE selMode,
                   uint32_t count, TwinLoc loc = TwinLoc::here()) {
  TILEC_TWIN_TYPES_CHECK(Select, twin_detail::is_half_or_float<T>, "half, float");
  static_assert(tilec_twin::one_of<U, uint8_t, uint16_t, uint32_t, uint64_t>,
                "Select: selMask holds uint8_t, uint16_t, uint32_t or uint64_t");
  if (selMode == SELMODE::VSEL_CMPMASK_SPR)
    tilec_twin::fail("Select", loc,
                     "SELMODE::VSEL_CMPMASK_SPR (mode 0) is not modelled by the twin; "
                     "use VSEL_TENSOR_TENSOR_MODE");
  if (selMode != SELMODE::VSEL_TENSOR_TENSOR_MODE)
    tilec_twin::fail("Select", loc, "two tensors need SELMODE::VSEL_TENSOR_TENSOR_MODE");
  uint8_t* b = twin_detail::at(src1);
  twin_detail::select("Select", loc, dst, selMask, src0, &src1, count,
                      [b](uint64_t i) { return tilec_twin::load<T>(b + i * sizeof(T)); });
}
template <typename T, typename U>
inline void Select(const LocalTensor<T>& dst, const LocalTensor<U>& selMask,
                   const LocalTensor<T>& src0, T src1, SELMODE selMode, uint32_t count,
                   TwinLoc loc = TwinLoc::here()) {
  TILEC_TWIN_TYPES_CHECK(Select, twin_detail::is_half_or_float<T>, "half, float");
  static_assert(tilec_twin::one_of<U, uint8_t, uint16_t, uint32_t, uint64_t>,
                "Select: selMask holds uint8_t, uint16_t, uint32_t or uint64_t");
  if (selMode != SELMODE::VSEL_TENSOR_SCALAR_MODE)
    tilec_twin::fail("Select", loc, "a scalar src1 needs SELMODE::VSEL_TENSOR_SCALAR_MODE");
  twin_detail::select("Select", loc, dst, selMask, src0,
                      static_cast<const LocalTensor<T>*>(nullptr), count,
                      [src1](uint64_t) { return src1; });
}

/* --- reductions (count form) --- */
namespace twin_detail {

constexpr uint64_t ceil_div(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

/* The documented minimum sharedTmpBuffer, in elements (first-round repeats rounded up). */
template <typename T>
constexpr uint64_t reduce_sum_work(uint64_t count) {
  const uint64_t per_block = 32 / sizeof(T), per_repeat = 256 / sizeof(T);
  return ceil_div(ceil_div(count, per_repeat), per_block) * per_block;
}
template <typename T>
constexpr uint64_t reduce_max_work(uint64_t count, bool index) {
  const uint64_t per_block = 32 / sizeof(T), per_repeat = 256 / sizeof(T);
  uint64_t out = 2 * ceil_div(count, per_repeat);  // a value and its index per repeat
  uint64_t total = ceil_div(out, per_block) * per_block;
  if (!index) return total;
  while (out > 2) {
    out = 2 * ceil_div(out, per_repeat);
    total += ceil_div(out, per_block) * per_block;
  }
  return total;
}

template <typename T>
inline void reduce_operands(const char* op, TwinLoc loc, const LocalTensor<T>& dst,
                            const LocalTensor<T>& src, const LocalTensor<T>& work, uint64_t n,
                            uint64_t need, uint64_t dst_elems, uint32_t dst_align) {
  if (n == 0) tw::fail(op, loc, "count is 0");
  if (uint64_t(work.GetSize()) < need)
    tw::fail(
        op, loc,
        "sharedTmpBuffer has %u %s elements but count %llu needs at least %llu (the documented "
        "minimum work size)",
        work.GetSize(), tw::type_name<T>(), (unsigned long long)n, (unsigned long long)need);
  // dst and the work buffer may overlap, and the work buffer may reuse src (documented).
  tw::VecOp(op, loc)
      .src(src.twin_ref(), n * sizeof(T))
      .dst(work.twin_ref(), need * sizeof(T), "sharedTmpBuffer")
      .dst(dst.twin_ref(), dst_elems * sizeof(T), "dst", dst_align)
      .commit();
}

/* Sum: a binary tree inside each 256-byte repeat, repeats added in order (the count form on
 * Atlas A2); half additions saturate at +-65504 as documented. */
template <typename T>
inline T tree_sum(const uint8_t* s, uint64_t n) {
  const uint64_t per_repeat = 256 / sizeof(T);
  auto add = [](float a, float b) -> float {
    if constexpr (std::is_same_v<T, half>)
      return tw::f16_to_f32(tw::f32_to_f16(a + b, tw::Rounding::RINT, true));
    else
      return a + b;
  };
  float lanes[64 * 2];
  float total = 0.0f;
  for (uint64_t start = 0; start < n; start += per_repeat) {
    uint64_t width = per_repeat;
    for (uint64_t k = 0; k < width; ++k)
      lanes[k] = start + k < n ? float(tw::load<T>(s + (start + k) * sizeof(T))) : 0.0f;
    while (width > 1) {
      width /= 2;
      for (uint64_t k = 0; k < width; ++k) lanes[k] = add(lanes[2 * k], lanes[2 * k + 1]);
    }
    total = start == 0 ? lanes[0] : add(total, lanes[0]);
  }
  return from_float<T>(total);
}

template <typename T, bool Max>
inline void reduce_extreme(const char* op, TwinLoc loc, const LocalTensor<T>& dst,
                           const LocalTensor<T>& src, const LocalTensor<T>& work, int32_t count,
                           bool calIndex) {
  TILEC_TWIN_TYPES_CHECK(ReduceMax / ReduceMin, is_half_or_float<T>, "half, float");
  const uint64_t n = tw::check_count(op, loc, count);
  if (calIndex && std::is_same_v<T, half> && n > 65536)
    tw::fail(op, loc, "the index of a half reduction must fit 16 bits (count %llu)",
             (unsigned long long)n);
  reduce_operands(op, loc, dst, src, work, n, reduce_max_work<T>(n, calIndex), calIndex ? 2 : 1,
                  2 * sizeof(T));
  const uint8_t* s = at(src);
  float best = float(tw::load<T>(s));
  uint64_t where = 0;
  for (uint64_t i = 1; i < n; ++i) {
    const float v = float(tw::load<T>(s + i * sizeof(T)));
    if (Max ? v > best : v < best) {
      best = v;
      where = i;
    }
  }
  std::memset(at(work), 0xFF, reduce_max_work<T>(n, calIndex) * sizeof(T));  // intermediate garbage
  uint8_t* d = at(dst);
  tw::store<T>(d, from_float<T>(best));
  if (calIndex) {
    if constexpr (sizeof(T) == 2)
      tw::store<uint16_t>(d + 2, uint16_t(where));
    else
      tw::store<uint32_t>(d + 4, uint32_t(where));
  }
}

}  // namespace twin_detail

template <typename T, bool isSetMask = true>
inline void ReduceSum(const LocalTensor<T>& dst, const LocalTensor<T>& src,
                      const LocalTensor<T>& sharedTmpBuffer, const int32_t count,
                      TwinLoc loc = TwinLoc::here()) {
  TILEC_TWIN_TYPES_CHECK(ReduceSum, twin_detail::is_half_or_float<T>, "half, float");
  const uint64_t n = tilec_twin::check_count("ReduceSum", loc, count);
  const uint64_t need = twin_detail::reduce_sum_work<T>(n);
  twin_detail::reduce_operands("ReduceSum", loc, dst, src, sharedTmpBuffer, n, need, 1, sizeof(T));
  const T sum = twin_detail::tree_sum<T>(twin_detail::at(src), n);
  std::memset(twin_detail::at(sharedTmpBuffer), 0xFF, need * sizeof(T));  // intermediate garbage
  tilec_twin::store<T>(twin_detail::at(dst), sum);
}
/* dst[0] = the maximum; with calIndex, dst[1] holds its index's bits (uint16/uint32). */
template <typename T>
inline void ReduceMax(const LocalTensor<T>& dst, const LocalTensor<T>& src,
                      const LocalTensor<T>& sharedTmpBuffer, const int32_t count,
                      bool calIndex = false, TwinLoc loc = TwinLoc::here()) {
  twin_detail::reduce_extreme<T, true>("ReduceMax", loc, dst, src, sharedTmpBuffer, count,
                                       calIndex);
}
template <typename T>
inline void ReduceMin(const LocalTensor<T>& dst, const LocalTensor<T>& src,
                      const LocalTensor<T>& sharedTmpBuffer, const int32_t count,
                      bool calIndex = false, TwinLoc loc = TwinLoc::here()) {
  twin_detail::reduce_extreme<T, false>("ReduceMin", loc, dst, src, sharedTmpBuffer, count,
                                        calIndex);
}

#undef TILEC_TWIN_TYPES_CHECK

}  // namespace AscendC

#include "twin_cube_api.h"

#include "twin_launch.h"

#endif
