/* The machine state behind the Ascend C twin: one AI core's Unified Buffer arena, its queues,
 * pipes and flags, the hazard tracker of strict mode, and the errors.
 *
 * kernel_operator.h (the Ascend C API) calls these functions; twin_runtime.cpp defines them.
 * Everything here is per host thread (one launch runs on the calling thread, block after
 * block), so launches on different threads do not interfere.  Every violation throws
 * tilec_twin::Error, which the launcher (twin_launch.h) turns into a non-zero return code and
 * the message of tilec_twin_last_error().
 */
#ifndef TILEC_ASCEND_TWIN_STATE_H
#define TILEC_ASCEND_TWIN_STATE_H

#include <cstdarg>
#include <cstdint>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>

#include "twin_types.h"

extern "C" {
/* The message of the last failed launch on this thread ("" after a successful one). */
const char* tilec_twin_last_error(void);
/* Strict mode (sync checking): 0 off, 1 cross-pipe hazards (default), 2 also requires
 * PipeBarrier<PIPE_V> between dependent vector instructions.  -1 restores the default, which
 * TILEC_TWIN_STRICT overrides when set. */
void tilec_twin_set_strict(int level);
int tilec_twin_strict(void);
/* Declare a GM buffer for the next launch on this thread: every GM access of the kernel must
 * then fall inside a declared buffer, and errors name it. */
void tilec_twin_register_gm(const void* ptr, uint64_t bytes, const char* name);
}

namespace tilec_twin {

constexpr uint32_t UB_BYTES = 192 * 1024;  // dav-2201 Unified Buffer per AI core
constexpr uint32_t UB_SCRATCH = 8 * 1024;  // Select modes 1/2 need this much left free
constexpr uint32_t BLOCK = 32;             // one DataBlock
constexpr uint32_t REPEAT = 256;           // bytes one vector repeat covers
constexpr int MAX_EVENT_ID = 8;            // EVENT_ID0..EVENT_ID7

/* MTE1 (L1 -> L0A/L0B), M (the Cube's Mmad) and FIX (Fixpipe, L0C -> GM) run on the AIC. */
enum Pipe : uint8_t {
  PIPE_TWIN_S,
  PIPE_TWIN_V,
  PIPE_TWIN_MTE2,
  PIPE_TWIN_MTE3,
  PIPE_TWIN_MTE1,
  PIPE_TWIN_M,
  PIPE_TWIN_FIX,
  NPIPES
};
const char* pipe_name(Pipe p);

/* The core's local memories, one arena: UB on a vector core (AIV), L1 and L0A/L0B/L0C on the
 * cube core (AIC).  Capacities of dav-2201 (910B) as docs/ascendc.md cites them (CANN 8.0
 * "Storage Units"): UB 192 KiB, L1 512 KiB, L0A 64 KiB, L0B 64 KiB, L0C 128 KiB.  A buffer
 * starts on its memory's granule: UB and L1 32 bytes, L0A/L0B 512 (LoadData page: an L0A/L0B
 * address is 512-byte aligned), L0C 1024 (Mmad page: its dst starts 1024-byte aligned). */
enum Mem : uint8_t { MEM_UB, MEM_L1, MEM_L0A, MEM_L0B, MEM_L0C, NMEMS };
constexpr uint32_t MEM_BYTES[NMEMS] = {UB_BYTES, 512 * 1024, 64 * 1024, 64 * 1024, 128 * 1024};
constexpr uint32_t MEM_BASE[NMEMS] = {0, UB_BYTES, UB_BYTES + 512 * 1024,
                                      UB_BYTES + 576 * 1024, UB_BYTES + 640 * 1024};
constexpr uint32_t ARENA_BYTES = UB_BYTES + 768 * 1024;
constexpr uint32_t MEM_GRANULE[NMEMS] = {32, 32, 512, 512, 1024};
const char* mem_name(Mem m);
/* The memory a tensor lives in (its queue's position). */
Mem mem_of(const struct TensorRef& t);

/* What a launched core is: a vector-only kernel's AI core (UB only), or, on the separated
 * architecture of Atlas A2 (910B), the cube core (AIC: L1, L0) or a vector core (AIV: UB) of
 * an AIC-only or mixed (__mix__(1, 2): one AIC and two AIVs per block) kernel. */
enum CoreKind : uint8_t { CORE_VECTOR, CORE_AIC, CORE_AIV };
enum LaunchMode : uint8_t { LAUNCH_VECTOR, LAUNCH_AIC, LAUNCH_MIX };
CoreKind core_kind();
int64_t sub_block_idx();
int64_t task_ratio();

/* A call site, captured by a defaulted argument of every API function. */
struct Loc {
  const char* file;
  int line;
  static constexpr Loc here(const char* f = __builtin_FILE(), int l = __builtin_LINE()) {
    return {f, l};
  }
};

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/* Throw an Error "kernel K block B: op: <message> (at file:line)". */
[[noreturn]] void fail(const char* op, Loc loc, const char* format, ...)
    __attribute__((format(printf, 3, 4)));
std::string format(const char* format, ...) __attribute__((format(printf, 1, 2)));

/* --- type names for messages --- */
template <typename T>
constexpr const char* type_name() {
  return "?";
}
template <>
constexpr const char* type_name<half>() {
  return "half";
}
template <>
constexpr const char* type_name<bfloat16_t>() {
  return "bfloat16_t";
}
template <>
constexpr const char* type_name<float>() {
  return "float";
}
template <>
constexpr const char* type_name<double>() {
  return "double";
}
template <>
constexpr const char* type_name<int8_t>() {
  return "int8_t";
}
template <>
constexpr const char* type_name<uint8_t>() {
  return "uint8_t";
}
template <>
constexpr const char* type_name<int16_t>() {
  return "int16_t";
}
template <>
constexpr const char* type_name<uint16_t>() {
  return "uint16_t";
}
template <>
constexpr const char* type_name<int32_t>() {
  return "int32_t";
}
template <>
constexpr const char* type_name<uint32_t>() {
  return "uint32_t";
}
template <>
constexpr const char* type_name<int64_t>() {
  return "int64_t";
}
template <>
constexpr const char* type_name<uint64_t>() {
  return "uint64_t";
}

template <typename T, typename... U>
constexpr bool one_of = (std::is_same_v<T, U> || ...);

/* Loads and stores through memcpy: UB and GM are byte arrays. */
template <typename T>
inline T load(const void* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}
template <typename T>
inline void store(void* p, T v) {
  std::memcpy(p, &v, sizeof(T));
}

/* --- the current AI core --- */
int64_t block_idx();
int64_t block_num();
uint8_t* ub_base();

/* A LocalTensor's identity: the UB buffer it lives in (an index into the core's buffer table)
 * and the buffer's allocation generation when the tensor was handed out. */
struct TensorRef {
  int32_t buf = -1;
  uint32_t gen = 0;
  uint32_t off = 0;    // byte offset in UB
  uint64_t bytes = 0;  // the tensor's extent
};

/* Check that `ref` may be used by `op` for `bytes` bytes from its start: a live buffer, not
 * freed, not sitting in a queue between EnQue and DeQue, in bounds, `align`-byte aligned, in
 * the Unified Buffer (check_local) or in memory `mem` (check_local_in). */
void check_local(const char* op, Loc loc, const char* role, const TensorRef& ref, uint64_t bytes,
                 uint32_t align);
void check_local_in(const char* op, Loc loc, const char* role, const TensorRef& ref,
                    uint64_t bytes, uint32_t align, Mem mem, const char* position);
/* Strict mode: an access by `pipe` to UB bytes [off, off + bytes) or GM bytes [p, p + bytes). */
void ub_access(const char* op, Loc loc, Pipe pipe, uint64_t seq, uint32_t off, uint64_t bytes,
               bool write);
void gm_access(const char* op, Loc loc, Pipe pipe, uint64_t seq, const void* p, uint64_t bytes,
               bool write);
/* Start an instruction on `pipe`; the sequence number its accesses carry. */
uint64_t issue(Pipe pipe);
/* GM addresses in messages: "x+64" when the address is in a declared buffer. */
std::string gm_name(const void* p);

/* --- vector instructions: operand checks and hazards in one place --- */
class VecOp {
 public:
  VecOp(const char* op, Loc loc) : op_(op), loc_(loc) {}
  /* An operand of `bytes` bytes from the tensor's start. */
  VecOp& src(const TensorRef& t, uint64_t bytes, const char* role = "src", uint32_t align = BLOCK);
  VecOp& dst(const TensorRef& t, uint64_t bytes, const char* role = "dst", uint32_t align = BLOCK);
  /* Sources and destinations must coincide exactly or not overlap (the documented rule). */
  VecOp& no_partial_overlap();
  /* Check every operand and record the accesses (reads, then writes) on PIPE_V. */
  void commit();
  const char* name() const { return op_; }
  Loc loc() const { return loc_; }

 private:
  struct Operand {
    TensorRef ref;
    uint64_t bytes;
    const char* role;
    uint32_t align;
    bool write;
  };
  const char* op_;
  Loc loc_;
  Operand ops_[6];
  int n_ = 0;
  bool overlap_rule_ = false;
};

/* Count arguments of the level-2 APIs: non-negative and within int32. */
uint64_t check_count(const char* op, Loc loc, int64_t count);

/* --- data movement (MTE2: GM -> UB, MTE3: UB -> GM) --- */
constexpr uint64_t UNKNOWN_SIZE = ~uint64_t(0);
struct GmView {
  uint8_t* ptr;
  uint64_t bytes;  // the GlobalTensor's extent, or UNKNOWN_SIZE (SetGlobalBuffer without size)
};
/* A GM access of bytes [lo, hi) from gm's start: a buffer set, in bounds, `elem`-aligned
 * when `aligned`. */
void check_gm(const char* op, Loc loc, GmView gm, uint32_t elem, uint64_t lo, uint64_t hi,
              bool aligned);
/* DataCopy, count form: `count` elements of `elem` bytes (named `type` in messages);
 * count * elem must be a multiple of 32 bytes. */
void copy_in(const char* op, Loc loc, const TensorRef& dst, GmView src, uint32_t elem,
             const char* type, uint64_t count);
void copy_out(const char* op, Loc loc, GmView dst, const TensorRef& src, uint32_t elem,
              const char* type, uint64_t count);
/* DataCopy with DataCopyParams: blockCount blocks of blockLen DataBlocks, gaps in DataBlocks. */
void copy_blocks_in(const char* op, Loc loc, const TensorRef& dst, GmView src, uint32_t elem,
                    uint32_t block_count, uint32_t block_len, uint32_t src_gap, uint32_t dst_gap);
void copy_blocks_out(const char* op, Loc loc, GmView dst, const TensorRef& src, uint32_t elem,
                     uint32_t block_count, uint32_t block_len, uint32_t src_gap, uint32_t dst_gap);
/* DataCopyPad GM -> UB: blockLen in bytes, srcStride in bytes (GM), dstStride in DataBlocks
 * (UB), each UB row padded to 32 bytes; `pad_value` points at one element. */
void copy_pad_in(const char* op, Loc loc, const TensorRef& dst, GmView src, uint32_t elem,
                 uint32_t block_count, uint64_t block_len, uint64_t src_stride, uint64_t dst_stride,
                 bool is_pad, uint32_t left, uint32_t right, const void* pad_value);
/* DataCopyPad UB -> GM: srcStride in DataBlocks (UB), dstStride in bytes (GM). */
void copy_pad_out(const char* op, Loc loc, GmView dst, const TensorRef& src, uint32_t elem,
                  uint32_t block_count, uint64_t block_len, uint64_t src_stride,
                  uint64_t dst_stride);
/* GlobalTensor::GetValue / SetValue (pipe S). */
void gm_scalar(const char* op, Loc loc, GmView gm, uint32_t elem, uint64_t index, void* value,
               bool write);
/* LocalTensor::GetValue / SetValue (pipe S). */
void ub_scalar(const char* op, Loc loc, const TensorRef& t, uint32_t elem, uint64_t index,
               void* value, bool write);
/* Select modes 1 and 2 use 8 KiB of UB that TPipe must leave free. */
void check_select_scratch(const char* op, Loc loc);

/* --- TPipe, TQue, TBuf --- */
int pipe_create(Loc loc);
void pipe_destroy(int pipe);
void pipe_reset(int pipe, Loc loc);
/* A queue with `num` buffers of `bytes` each; returns the queue's id.  `old` is the id the
 * queue object had (-1: none): a second InitBuffer is an error unless its TPipe was reset. */
int que_init(const char* op, Loc loc, int pipe, int old, const char* kind, int depth, Pipe producer,
             Pipe consumer, int num, uint64_t bytes, Mem mem = MEM_UB);
int tbuf_init(const char* op, Loc loc, int pipe, int old, const char* kind, uint64_t bytes,
              Mem mem = MEM_UB);
TensorRef que_alloc(int que, Loc loc);
void que_enque(int que, const TensorRef& t, Loc loc);
TensorRef que_deque(int que, Loc loc);
void que_free(int que, const TensorRef& t, Loc loc);
int que_count(int que);
bool que_has_idle(int que);
TensorRef tbuf_get(int buf, uint64_t bytes, Loc loc);
int que_check(int que, const char* op, Loc loc);  // a queue id that InitBuffer has set up

/* --- flags and barriers --- */
void set_flag(Pipe src, Pipe dst, int id, const char* event, Loc loc);
void wait_flag(Pipe src, Pipe dst, int id, const char* event, Loc loc);
void barrier(int pipe, Loc loc);  // a Pipe, or -1 for PIPE_ALL
int fetch_event_id(Pipe src, Pipe dst, bool allocate, Loc loc);
void release_event_id(Pipe src, Pipe dst, int id, Loc loc);

/* --- launching --- */
struct GmArg {
  const void* ptr;
  int index;
};
/* Run body() once per block, blocks 0..block_dim-1 in order, each on a fresh AI core (mode
 * LAUNCH_MIX: on a fresh AIC and two AIVs, which take turns at their cross-core flag waits).
 * Returns 0, or 1 with tilec_twin_last_error() set. */
int run_launch(const char* kernel, int64_t block_dim, const GmArg* gm_args, int n_gm_args,
               const std::function<void()>& body, LaunchMode mode = LAUNCH_VECTOR);

/* KERNEL_TASK_TYPE_DEFAULT(type) as a kernel's first statement: a launch of another type starts
 * over as this one (a mixed kernel needs no special launch). */
void declare_kernel_type(int type, Loc loc);

/* --- cross-core flags (CrossCoreSetFlag / CrossCoreWaitFlag, mode 2 of Atlas A2) --- */
void cross_set(int mode, Pipe pipe, int id, Loc loc);
void cross_wait(int id, Loc loc);

}  // namespace tilec_twin

#endif
