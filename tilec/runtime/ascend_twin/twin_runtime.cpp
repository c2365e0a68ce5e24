/* The non-template half of the Ascend C twin: per-core state, the strict-mode hazard tracker,
 * queue and flag bookkeeping, errors and the launch loop.  Compile it once into every
 * library or program that includes kernel_operator.h (see README.md).
 *
 * Sync model (strict mode).  Each of the pipes S, V, MTE2, MTE3 numbers its instructions.
 * synced[X][Y] is the highest X instruction that pipe Y is known to run after.  A WaitFlag<X_Y>
 * raises it to the X instruction count at the matching SetFlag and, transitively, raises
 * synced[W][Y] to what synced[W][X] was at the SetFlag; a wait on S blocks the scalar unit that
 * issues everything, so it raises synced[X][*].  PipeBarrier<PIPE_ALL> syncs every pair.
 * Queues are flags: EnQue/DeQue is producer->consumer (VECIN: MTE2->V, VECOUT: V->MTE3),
 * FreeTensor/AllocTensor of the same buffer is consumer->producer.  Every UB and GM byte range
 * remembers its last writer (pipe, instruction) and its last reader per pipe; an access is a
 * hazard when the other pipe's instruction is not covered by synced[][] (RAW and WAW across
 * pipes, WAR against a non-scalar reader, WAW within MTE2 or MTE3 without their barrier, and
 * at strict level 2 RAW/WAW within V without PipeBarrier<PIPE_V>).
 */
#include <algorithm>
#include <cinttypes>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "twin_state.h"

namespace tilec_twin {
namespace {

constexpr uint64_t NEVER = 0;

const char* basename_of(const char* path) {
  const char* slash = std::strrchr(path, '/');
  return slash ? slash + 1 : path;
}

std::string where(Loc loc) {
  if (!loc.file) return "?";
  return format("%s:%d", basename_of(loc.file), loc.line);
}

std::string vformat(const char* fmt, va_list ap) {
  va_list copy;
  va_copy(copy, ap);
  const int n = std::vsnprintf(nullptr, 0, fmt, copy);
  va_end(copy);
  std::string out(n > 0 ? size_t(n) : 0, '\0');
  if (n > 0) std::vsnprintf(out.data(), size_t(n) + 1, fmt, ap);
  return out;
}

/* --- the hazard tracker: disjoint byte ranges with their last writer and readers --- */

struct Access {
  uint64_t seq = NEVER;
  const char* op = nullptr;
  Loc loc{};
  Pipe pipe = PIPE_TWIN_S;  // the cross-core tracker's: the pipe of the access
};

struct Seg {
  uint64_t end = 0;
  int writer = -1;  // a Pipe, or -1: never written since the block started
  Access write;
  Access read[NPIPES];
};

class Tracker {
 public:
  void clear() { segs_.clear(); }

  /* Call check(start, seg) for every recorded range inside [lo, hi), then record the access. */
  template <typename Check>
  void access(uint64_t lo, uint64_t hi, Pipe pipe, const Access& a, bool write, Check check) {
    split(lo);
    split(hi);
    for (auto it = segs_.lower_bound(lo); it != segs_.end() && it->first < hi; ++it)
      check(it->first, it->second);
    if (write) {
      segs_.erase(segs_.lower_bound(lo), segs_.lower_bound(hi));
      Seg seg;
      seg.end = hi;
      seg.writer = pipe;
      seg.write = a;
      segs_.emplace(lo, seg);
      return;
    }
    uint64_t cur = lo;
    auto it = segs_.lower_bound(lo);
    while (cur < hi) {
      if (it == segs_.end() || it->first > cur) {  // an untouched gap
        const uint64_t gap_end = it == segs_.end() ? hi : std::min(hi, it->first);
        Seg seg;
        seg.end = gap_end;
        seg.read[pipe] = a;
        segs_.emplace_hint(it, cur, seg);
        cur = gap_end;
        continue;
      }
      it->second.read[pipe] = a;
      cur = it->second.end;
      ++it;
    }
  }

 private:
  void split(uint64_t at) {
    auto it = segs_.upper_bound(at);
    if (it == segs_.begin()) return;
    --it;
    if (it->first < at && it->second.end > at) {
      Seg right = it->second;
      it->second.end = at;
      segs_.emplace(at, right);
    }
  }
  std::map<uint64_t, Seg> segs_;
};

/* --- queues, buffers, flags --- */

struct Flag {
  bool set = false;
  uint64_t value = 0;          // the source pipe's instruction count at SetFlag
  uint64_t snap[NPIPES] = {};  // synced[W][source] at SetFlag
  Loc loc{};
};

enum class BufState : uint8_t { FREE, ALLOC, ENQUEUED, DEQUEUED };

struct BufRec {
  int que = -1;
  bool tbuf = false;
  bool dead = false;  // its TPipe was reset or destroyed
  BufState state = BufState::FREE;
  uint32_t gen = 0;
  uint32_t off = 0;
  uint64_t bytes = 0;
  Loc alloc_loc{}, enque_loc{}, free_loc{};
  Flag ready;  // EnQue -> DeQue (producer -> consumer)
  Flag idle;   // FreeTensor -> AllocTensor (consumer -> producer)
};

struct QueRec {
  std::string kind;
  Mem mem = MEM_UB;
  Loc init_loc{};
  int pipe = -1;
  int depth = 1;
  Pipe producer = PIPE_TWIN_V, consumer = PIPE_TWIN_V;
  bool tbuf = false;
  bool dead = false;
  std::vector<int> bufs;
  std::deque<int> fifo;
  size_t next = 0;  // round-robin allocation, as a ring of buffers
  uint64_t bytes = 0;
};

struct GmBuf {
  const uint8_t* ptr;
  uint64_t bytes;
  std::string name;
};

struct Range {
  uint64_t lo, hi;
};

struct Mix;

/* Thrown by the first statement of a kernel declaring a type other than its launch's. */
struct Relaunch {
  LaunchMode mode;
};

struct Core {
  const char* kernel = "?";
  int64_t idx = 0, num = 1;
  CoreKind kind = CORE_VECTOR;
  LaunchMode mode = LAUNCH_VECTOR;
  int sub = 0;            // 0 the AIC, 1 and 2 the AIVs of a mixed block
  Mix* mix = nullptr;     // the block's shared state when mixed
  int strict = 1;
  std::unique_ptr<uint8_t[]> ub_storage;
  uint8_t* ub = nullptr;
  uint32_t top[NMEMS] = {};  // allocated bytes of each memory
  int live_pipe = -1, pipes_made = 0;
  Loc pipe_loc{};
  std::vector<BufRec> bufs;
  std::vector<QueRec> ques;
  uint64_t seq[NPIPES] = {};
  uint64_t synced[NPIPES][NPIPES] = {};
  Flag flags[NPIPES][NPIPES][MAX_EVENT_ID];
  uint8_t event_ids[NPIPES][NPIPES] = {};  // AllocEventID bitmask
  Tracker ub_track, gm_track;
  std::vector<Range> gm_reads, gm_writes;

  void reset_block(int64_t block) {
    idx = block;
    if (!ub_storage) {
      ub_storage.reset(new uint8_t[ARENA_BYTES + 64]);
      ub = ub_storage.get() + (64 - reinterpret_cast<uintptr_t>(ub_storage.get()) % 64) % 64;
    }
    // garbage: NaN in every float type (only the memories this kind of core has)
    if (kind == CORE_AIC)
      std::memset(ub + MEM_BASE[MEM_L1], 0xFF, ARENA_BYTES - MEM_BASE[MEM_L1]);
    else
      std::memset(ub, 0xFF, UB_BYTES);
    std::memset(top, 0, sizeof top);
    live_pipe = -1;
    pipes_made = 0;
    bufs.clear();
    ques.clear();
    std::memset(seq, 0, sizeof seq);
    std::memset(synced, 0, sizeof synced);
    for (auto& a : flags)
      for (auto& b : a)
        for (auto& f : b) f = Flag{};
    std::memset(event_ids, 0, sizeof event_ids);
    ub_track.clear();
    gm_track.clear();
    gm_reads.clear();
    gm_writes.clear();
  }
};

struct Launch {
  const char* kernel = "?";
  std::vector<GmBuf> gm;
  std::vector<GmArg> args;
  std::vector<std::vector<Range>> reads, writes;  // per block, merged
};

void mix_gm_access(Core& c, const char* op, Loc loc, Pipe pipe, uint64_t seq, const Range& r,
                   bool write);
const char* sub_name(const Core& c);

thread_local Core* g_core = nullptr;
thread_local Launch* g_launch = nullptr;
thread_local std::string g_last_error;
thread_local std::vector<GmBuf> g_pending_gm;
thread_local int g_strict = -1;

Core& core_or_fail(const char* op, Loc loc) {
  if (!g_core) fail(op, loc, "called outside a kernel launched by the twin");
  return *g_core;
}

Mem mem_at(uint64_t off) {
  Mem m = MEM_UB;
  for (int k = 0; k < NMEMS; ++k)
    if (off >= MEM_BASE[k]) m = Mem(k);
  return m;
}

/* "UB[0, 256)", "L1[0, 1024)": offsets inside the memory. */
std::string ub_range(uint64_t lo, uint64_t hi) {
  const Mem m = mem_at(lo);
  return format("%s[%" PRIu64 ", %" PRIu64 ")", mem_name(m), lo - MEM_BASE[m], hi - MEM_BASE[m]);
}

std::string gm_range(uint64_t lo, uint64_t hi);  // after gm_name

std::string que_desc(const Core& c, int q) {
  const QueRec& r = c.ques[size_t(q)];
  return format("%s (InitBuffer at %s)", r.kind.c_str(), where(r.init_loc).c_str());
}

const char* sync_hint(Pipe from, Pipe to) {
  if (from == PIPE_TWIN_MTE2 && to == PIPE_TWIN_V)
    return "pass the tensor through a VECIN queue (EnQue/DeQue), or "
           "SetFlag/WaitFlag<HardEvent::MTE2_V>, "
           "or PipeBarrier<PIPE_ALL>";
  if (from == PIPE_TWIN_V && to == PIPE_TWIN_MTE3)
    return "pass the tensor through a VECOUT queue (EnQue/DeQue), or "
           "SetFlag/WaitFlag<HardEvent::V_MTE3>, "
           "or PipeBarrier<PIPE_ALL>";
  if (from == PIPE_TWIN_V && to == PIPE_TWIN_MTE2)
    return "FreeTensor/AllocTensor of a VECIN queue, or SetFlag/WaitFlag<HardEvent::V_MTE2>, or "
           "PipeBarrier<PIPE_ALL>";
  if (from == PIPE_TWIN_MTE3 && to == PIPE_TWIN_V)
    return "FreeTensor/AllocTensor of a VECOUT queue, or SetFlag/WaitFlag<HardEvent::MTE3_V>, or "
           "PipeBarrier<PIPE_ALL>";
  return nullptr;
}

/* Check one recorded range against an access by `pipe`; fail on a hazard. */
void check_seg(Core& c, const char* op, Loc loc, const std::string& range, Pipe pipe, bool write,
               const Seg& s) {
  const char* verb = write ? "writes" : "reads";
  if (s.writer >= 0) {
    const Pipe w = Pipe(s.writer);
    bool needs_sync = w != pipe;
    if (w == pipe && write && (pipe == PIPE_TWIN_MTE2 || pipe == PIPE_TWIN_MTE3)) needs_sync = true;
    if (w == pipe && pipe == PIPE_TWIN_V && c.strict >= 2) needs_sync = true;
    if (needs_sync && c.synced[w][pipe] < s.write.seq) {
      if (w == pipe) {
        fail(op, loc,
             "%s %s %s that %s wrote before (%s at %s) without PipeBarrier<PIPE_%s> in between: "
             "instructions of one pipe may overlap",
             pipe_name(pipe), verb, range.c_str(), pipe_name(w), s.write.op,
             where(s.write.loc).c_str(), pipe_name(pipe));
      }
      const char* hint = sync_hint(w, pipe);
      fail(op, loc,
           "missing sync: %s %s %s written by %s (%s at %s) with no %s->%s synchronisation in "
           "between (%s)",
           pipe_name(pipe), verb, range.c_str(), pipe_name(w), s.write.op,
           where(s.write.loc).c_str(), pipe_name(w), pipe_name(pipe),
           hint ? hint
                : format("SetFlag/WaitFlag<HardEvent::%s_%s> or PipeBarrier<PIPE_ALL>",
                         pipe_name(w), pipe_name(pipe))
                      .c_str());
    }
  }
  if (!write) return;
  for (int q = 0; q < NPIPES; ++q) {
    // Scalar loads finish before the scalar unit issues anything else.
    if (q == pipe || q == PIPE_TWIN_S || s.read[q].seq == NEVER) continue;
    if (c.synced[q][pipe] >= s.read[q].seq) continue;
    const char* hint = sync_hint(Pipe(q), pipe);
    fail(op, loc,
         "missing sync: %s writes %s that %s may still be reading (%s at %s): no %s->%s "
         "synchronisation in between (%s)",
         pipe_name(pipe), range.c_str(), pipe_name(Pipe(q)), s.read[q].op,
         where(s.read[q].loc).c_str(), pipe_name(Pipe(q)), pipe_name(pipe),
         hint ? hint
              : format("SetFlag/WaitFlag<HardEvent::%s_%s> or PipeBarrier<PIPE_ALL>",
                       pipe_name(Pipe(q)), pipe_name(pipe))
                    .c_str());
  }
}

void set(Core& c, Flag& f, Pipe src, Loc loc) {
  f.set = true;
  f.value = c.seq[src];
  f.loc = loc;
  for (int w = 0; w < NPIPES; ++w) f.snap[w] = w == src ? c.seq[src] : c.synced[w][src];
}

/* Pipe `dst` waits for flag `f` set by `src`: raise what dst is ordered after. */
void wait(Core& c, Flag& f, Pipe src, Pipe dst) {
  auto raise = [&](Pipe to) {
    c.synced[src][to] = std::max(c.synced[src][to], f.value);
    for (int w = 0; w < NPIPES; ++w) c.synced[w][to] = std::max(c.synced[w][to], f.snap[w]);
  };
  if (dst == PIPE_TWIN_S) {  // the scalar unit blocks, so everything issued later is ordered
    for (int to = 0; to < NPIPES; ++to) raise(Pipe(to));
  } else {
    raise(dst);
  }
  f.set = false;
}

void merge(std::vector<Range>& v) {
  std::sort(v.begin(), v.end(), [](const Range& a, const Range& b) { return a.lo < b.lo; });
  std::vector<Range> out;
  for (const Range& r : v) {
    if (!out.empty() && r.lo <= out.back().hi)
      out.back().hi = std::max(out.back().hi, r.hi);
    else
      out.push_back(r);
  }
  v.swap(out);
}

bool overlaps(const std::vector<Range>& sorted, const Range& r, Range* hit) {
  auto it = std::upper_bound(sorted.begin(), sorted.end(), r.lo,
                             [](uint64_t lo, const Range& x) { return lo < x.lo; });
  if (it != sorted.begin()) {
    auto prev = std::prev(it);
    if (prev->hi > r.lo) {
      *hit = {std::max(prev->lo, r.lo), std::min(prev->hi, r.hi)};
      return true;
    }
  }
  if (it != sorted.end() && it->lo < r.hi) {
    *hit = {it->lo, std::min(it->hi, r.hi)};
    return true;
  }
  return false;
}

/* Different AI cores run at the same time: a byte one core writes must not be touched by
 * another.  Throws Error naming the first conflict. */
void check_cross_core(const Launch& l) {
  const size_t n = l.writes.size();
  for (size_t a = 0; a < n; ++a) {
    for (const Range& w : l.writes[a]) {
      for (size_t b = 0; b < n; ++b) {
        if (b == a) continue;
        Range hit{};
        if (b > a && overlaps(l.writes[b], w, &hit))
          throw Error(
              format("kernel %s: blocks %zu and %zu both write %s: AI cores run in "
                     "parallel, so the result depends on their timing",
                     l.kernel, a, b, gm_range(hit.lo, hit.hi).c_str()));
        if (overlaps(l.reads[b], w, &hit))
          throw Error(
              format("kernel %s: block %zu reads %s that block %zu writes: AI cores run "
                     "in parallel with no ordering between them",
                     l.kernel, b, gm_range(hit.lo, hit.hi).c_str(), a));
      }
    }
  }
}

/* Leaks and loose ends at the end of a block. */
void check_block_end(Core& c) {
  const Loc none{};
  for (size_t q = 0; q < c.ques.size(); ++q) {
    const QueRec& r = c.ques[q];
    if (!r.fifo.empty()) {
      const BufRec& b = c.bufs[size_t(r.fifo.front())];
      fail("kernel end", none,
           "%s still holds %zu tensor(s) (EnQue at %s): every EnQue needs a DeQue and a "
           "FreeTensor",
           que_desc(c, int(q)).c_str(), r.fifo.size(), where(b.enque_loc).c_str());
    }
  }
  for (size_t q = 0; q < c.ques.size(); ++q) {
    const QueRec& r = c.ques[q];
    if (r.tbuf) continue;
    for (int id : r.bufs) {
      const BufRec& b = c.bufs[size_t(id)];
      if (b.state != BufState::FREE)
        fail("kernel end", none, "the tensor allocated at %s from %s was never freed",
             where(b.alloc_loc).c_str(), que_desc(c, int(q)).c_str());
    }
  }
  for (int s = 0; s < NPIPES; ++s)
    for (int d = 0; d < NPIPES; ++d)
      for (int id = 0; id < MAX_EVENT_ID; ++id) {
        const Flag& f = c.flags[s][d][id];
        if (f.set)
          fail("kernel end", none, "SetFlag<HardEvent::%s_%s>(%d) at %s was never waited for",
               pipe_name(Pipe(s)), pipe_name(Pipe(d)), id, where(f.loc).c_str());
      }
}

int resolve_strict() {
  if (g_strict >= 0) return g_strict;
  const char* env = std::getenv("TILEC_TWIN_STRICT");
  if (env && *env) return std::atoi(env);
  return 1;
}

}  // namespace

/* ------------------------------------------------------------------------------------------ */

const char* pipe_name(Pipe p) {
  static const char* const names[] = {"S", "V", "MTE2", "MTE3", "MTE1", "M", "FIX"};
  return p < NPIPES ? names[p] : "?";
}

std::string format(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::string s = vformat(fmt, ap);
  va_end(ap);
  return s;
}

void fail(const char* op, Loc loc, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  const std::string msg = vformat(fmt, ap);
  va_end(ap);
  std::string out;
  if (g_core && g_core->mix)
    out = format("kernel %s block %" PRId64 " %s: %s: %s", g_core->kernel, g_core->idx,
                 sub_name(*g_core), op, msg.c_str());
  else if (g_core)
    out =
        format("kernel %s block %" PRId64 ": %s: %s", g_core->kernel, g_core->idx, op, msg.c_str());
  else
    out = format("ascend twin: %s: %s", op, msg.c_str());
  if (loc.file) out += " (at " + where(loc) + ")";
  throw Error(out);
}

const char* mem_name(Mem m) {
  static const char* const names[] = {"UB", "L1", "L0A", "L0B", "L0C"};
  return m < NMEMS ? names[m] : "?";
}

CoreKind core_kind() { return core_or_fail("ASCEND_IS_AIC", Loc{}).kind; }
int64_t sub_block_idx() {
  const Core& c = core_or_fail("GetSubBlockIdx", Loc{});
  return c.kind == CORE_AIV ? c.sub - 1 : 0;
}
int64_t task_ratio() {
  const Core& c = core_or_fail("GetTaskRatio", Loc{});
  return c.kind == CORE_AIV && c.mix ? 2 : 1;
}

/* On an AIV of a mixed kernel the index runs over 2 * blockDim (GetBlockIdx page). */
int64_t block_idx() {
  const Core& c = core_or_fail("GetBlockIdx", Loc{});
  return c.kind == CORE_AIV && c.mix ? 2 * c.idx + c.sub - 1 : c.idx;
}
int64_t block_num() { return core_or_fail("GetBlockNum", Loc{}).num; }
uint8_t* ub_base() { return core_or_fail("LocalTensor", Loc{}).ub; }

namespace {
/* "GM y bytes [128, 256)" for a declared buffer, "GM arg1 bytes [...)" for a kernel argument. */
std::string gm_range(uint64_t lo, uint64_t hi) {
  const std::string start = gm_name(reinterpret_cast<const void*>(lo));
  const size_t plus = start.rfind('+');
  if (plus == std::string::npos)
    return format("GM bytes [%s, +%" PRIu64 ")", start.c_str(), hi - lo);
  const uint64_t off = std::strtoull(start.c_str() + plus + 1, nullptr, 10);
  return format("GM %s bytes [%" PRIu64 ", %" PRIu64 ")", start.substr(0, plus).c_str(), off,
                off + (hi - lo));
}
}  // namespace

uint64_t issue(Pipe pipe) {
  Core& c = core_or_fail("issue", Loc{});
  return ++c.seq[pipe];
}

std::string gm_name(const void* p) {
  const auto* a = static_cast<const uint8_t*>(p);
  if (g_launch) {
    for (const GmBuf& b : g_launch->gm)
      if (a >= b.ptr && a <= b.ptr + b.bytes)
        return format("%s+%" PRIu64, b.name.c_str(), uint64_t(a - b.ptr));
    const GmArg* best = nullptr;
    for (const GmArg& g : g_launch->args) {
      const auto* base = static_cast<const uint8_t*>(g.ptr);
      if (base <= a && (!best || base > static_cast<const uint8_t*>(best->ptr))) best = &g;
    }
    if (best)
      return format("arg%d+%" PRIu64, best->index,
                    uint64_t(a - static_cast<const uint8_t*>(best->ptr)));
  }
  return format("%p", p);
}

namespace {
void check_local(const char* op, Loc loc, const char* role, const TensorRef& ref, uint64_t bytes,
                 uint32_t align, Mem mem, const char* position) {
  Core& c = core_or_fail(op, loc);
  if (ref.buf < 0 || size_t(ref.buf) >= c.bufs.size())
    fail(op, loc, "%s is a LocalTensor that was never allocated (AllocTensor, DeQue or TBuf::Get)",
         role);
  const BufRec& b = c.bufs[size_t(ref.buf)];
  if (b.dead) fail(op, loc, "%s lives in a buffer of a TPipe that was reset or destroyed", role);
  if (!b.tbuf) {
    if (b.state == BufState::FREE || b.gen != ref.gen)
      fail(op, loc, "%s is a tensor of %s that was freed (FreeTensor at %s)", role,
           que_desc(c, b.que).c_str(), where(b.free_loc).c_str());
    if (b.state == BufState::ENQUEUED)
      fail(op, loc, "%s is in the queue of %s (EnQue at %s): only DeQue may take it out before use",
           role, que_desc(c, b.que).c_str(), where(b.enque_loc).c_str());
  }
  const Mem m = mem_at(ref.off);
  if (align > 1 && (ref.off - MEM_BASE[m]) % align)
    fail(op, loc, "%s at %s offset %u is not %u-byte aligned", role, mem_name(m),
         ref.off - MEM_BASE[m], align);
  if (m != mem)
    fail(op, loc, "%s is a tensor in %s (%s); %s takes it from %s (TPosition %s)", role,
         mem_name(m), que_desc(c, b.que).c_str(), op, mem_name(mem), position);
  if (bytes > ref.bytes)
    fail(op, loc, "%s needs %" PRIu64 " bytes but the tensor has only %" PRIu64, role, bytes,
         ref.bytes);
}
}  // namespace

Mem mem_of(const TensorRef& t) { return mem_at(t.off); }

void check_local_in(const char* op, Loc loc, const char* role, const TensorRef& ref,
                    uint64_t bytes, uint32_t align, Mem mem, const char* position) {
  check_local(op, loc, role, ref, bytes, align, mem, position);
}

void check_local(const char* op, Loc loc, const char* role, const TensorRef& ref, uint64_t bytes,
                 uint32_t align) {
  check_local(op, loc, role, ref, bytes, align, MEM_UB, "VECIN, VECOUT or VECCALC");
}

void ub_access(const char* op, Loc loc, Pipe pipe, uint64_t seq, uint32_t off, uint64_t bytes,
               bool write) {
  Core& c = core_or_fail(op, loc);
  if (c.strict <= 0 || bytes == 0) return;
  const Access a{seq, op, loc};
  c.ub_track.access(off, off + bytes, pipe, a, write, [&](uint64_t start, const Seg& s) {
    check_seg(c, op, loc, ub_range(start, s.end), pipe, write, s);
  });
}

void gm_access(const char* op, Loc loc, Pipe pipe, uint64_t seq, const void* p, uint64_t bytes,
               bool write) {
  Core& c = core_or_fail(op, loc);
  if (bytes == 0) return;
  const auto* lo = static_cast<const uint8_t*>(p);
  if (g_launch && !g_launch->gm.empty()) {
    const GmBuf* inside = nullptr;
    for (const GmBuf& b : g_launch->gm)
      if (lo >= b.ptr && lo + bytes <= b.ptr + b.bytes) inside = &b;
    if (!inside) {
      const GmBuf* near = nullptr;
      for (const GmBuf& b : g_launch->gm)
        if (lo >= b.ptr && (!near || b.ptr > near->ptr)) near = &b;
      if (near && lo < near->ptr + near->bytes + (1u << 20))
        fail(op, loc,
             "%s GM bytes [%" PRIu64 ", %" PRIu64 ") of buffer '%s', which has only %" PRIu64
             " bytes",
             write ? "writes" : "reads", uint64_t(lo - near->ptr), uint64_t(lo - near->ptr) + bytes,
             near->name.c_str(), near->bytes);
      fail(op, loc, "%s %" PRIu64 " GM bytes at %p, outside every buffer declared for the launch",
           write ? "writes" : "reads", bytes, p);
    }
  }
  const Range r{uint64_t(reinterpret_cast<uintptr_t>(lo)),
                uint64_t(reinterpret_cast<uintptr_t>(lo)) + bytes};
  (write ? c.gm_writes : c.gm_reads).push_back(r);
  if (c.strict <= 0) return;
  if (c.mix) mix_gm_access(c, op, loc, pipe, seq, r, write);
  const Access a{seq, op, loc};
  c.gm_track.access(r.lo, r.hi, pipe, a, write, [&](uint64_t start, const Seg& s) {
    check_seg(c, op, loc, gm_range(start, s.end), pipe, write, s);
  });
}

uint64_t check_count(const char* op, Loc loc, int64_t count) {
  if (count < 0) fail(op, loc, "count %" PRId64 " is negative", count);
  if (count > INT32_MAX) fail(op, loc, "count %" PRId64 " exceeds int32", count);
  return uint64_t(count);
}

/* --- VecOp --- */

VecOp& VecOp::src(const TensorRef& t, uint64_t bytes, const char* role, uint32_t align) {
  ops_[n_++] = Operand{t, bytes, role, align, false};
  return *this;
}

VecOp& VecOp::dst(const TensorRef& t, uint64_t bytes, const char* role, uint32_t align) {
  ops_[n_++] = Operand{t, bytes, role, align, true};
  return *this;
}

VecOp& VecOp::no_partial_overlap() {
  overlap_rule_ = true;
  return *this;
}

void VecOp::commit() {
  for (int i = 0; i < n_; ++i)
    check_local(op_, loc_, ops_[i].role, ops_[i].ref, ops_[i].bytes, ops_[i].align);
  if (overlap_rule_) {
    for (int d = 0; d < n_; ++d) {
      if (!ops_[d].write) continue;
      const Operand& w = ops_[d];
      for (int s = 0; s < n_; ++s) {
        const Operand& r = ops_[s];
        if (r.write || r.bytes == 0 || w.bytes == 0) continue;
        const uint64_t r_lo = r.ref.off, r_hi = r.ref.off + r.bytes;
        const uint64_t w_lo = w.ref.off, w_hi = w.ref.off + w.bytes;
        const bool overlap = r_lo < w_hi && w_lo < r_hi;
        if (overlap && !(r_lo == w_lo && r_hi == w_hi))
          fail(op_, loc_,
               "%s %s and %s %s overlap partially: a source and the destination must coincide "
               "exactly or not overlap",
               r.role, ub_range(r_lo, r_hi).c_str(), w.role, ub_range(w_lo, w_hi).c_str());
      }
    }
  }
  const uint64_t seq = issue(PIPE_TWIN_V);
  for (int i = 0; i < n_; ++i)
    if (!ops_[i].write)
      ub_access(op_, loc_, PIPE_TWIN_V, seq, ops_[i].ref.off, ops_[i].bytes, false);
  for (int i = 0; i < n_; ++i)
    if (ops_[i].write) ub_access(op_, loc_, PIPE_TWIN_V, seq, ops_[i].ref.off, ops_[i].bytes, true);
}

/* --- data movement --- */

namespace {

constexpr uint64_t round_up(uint64_t v, uint64_t to) { return (v + to - 1) / to * to; }

}  // namespace

void check_gm(const char* op, Loc loc, GmView gm, uint32_t elem, uint64_t lo, uint64_t hi,
              bool aligned) {
  if (!gm.ptr) fail(op, loc, "the GlobalTensor has no buffer (SetGlobalBuffer was not called)");
  if (aligned && reinterpret_cast<uintptr_t>(gm.ptr) % elem)
    fail(op, loc, "GM address %s is not aligned to the %u-byte element", gm_name(gm.ptr).c_str(),
         elem);
  if (gm.bytes != UNKNOWN_SIZE && hi > gm.bytes)
    fail(op, loc,
         "GM bytes [%" PRIu64 ", %" PRIu64 ") from %s are beyond the GlobalTensor's %" PRIu64
         " elements",
         lo, hi, gm_name(gm.ptr).c_str(), gm.bytes / elem);
}

namespace {

[[noreturn]] void misaligned_copy(const char* op, Loc loc, const char* type, uint64_t count,
                                  uint64_t bytes) {
  fail(op, loc,
       "DataCopy of %" PRIu64 " %s (%" PRIu64
       " bytes) is not a multiple of 32 bytes: hardware "
       "would silently copy only %" PRIu64 " bytes; use DataCopyPad for a tail",
       count, type, bytes, bytes / BLOCK * BLOCK);
}

void check_block_count(const char* op, Loc loc, uint32_t block_count) {
  if (block_count < 1 || block_count > 4095)
    fail(op, loc, "blockCount %u is outside 1..4095", block_count);
}

}  // namespace

void copy_in(const char* op, Loc loc, const TensorRef& dst, GmView src, uint32_t elem,
             const char* type, uint64_t count) {
  const uint64_t bytes = count * elem;
  if (bytes % BLOCK) misaligned_copy(op, loc, type, count, bytes);
  check_local(op, loc, "dst", dst, bytes, BLOCK);
  check_gm(op, loc, src, elem, 0, bytes, true);
  const uint64_t seq = issue(PIPE_TWIN_MTE2);
  gm_access(op, loc, PIPE_TWIN_MTE2, seq, src.ptr, bytes, false);
  ub_access(op, loc, PIPE_TWIN_MTE2, seq, dst.off, bytes, true);
  if (bytes) std::memmove(ub_base() + dst.off, src.ptr, bytes);
}

void copy_out(const char* op, Loc loc, GmView dst, const TensorRef& src, uint32_t elem,
              const char* type, uint64_t count) {
  const uint64_t bytes = count * elem;
  if (bytes % BLOCK) misaligned_copy(op, loc, type, count, bytes);
  check_local(op, loc, "src", src, bytes, BLOCK);
  check_gm(op, loc, dst, elem, 0, bytes, true);
  const uint64_t seq = issue(PIPE_TWIN_MTE3);
  ub_access(op, loc, PIPE_TWIN_MTE3, seq, src.off, bytes, false);
  gm_access(op, loc, PIPE_TWIN_MTE3, seq, dst.ptr, bytes, true);
  if (bytes) std::memmove(dst.ptr, ub_base() + src.off, bytes);
}

void copy_blocks_in(const char* op, Loc loc, const TensorRef& dst, GmView src, uint32_t elem,
                    uint32_t block_count, uint32_t block_len, uint32_t src_gap, uint32_t dst_gap) {
  check_block_count(op, loc, block_count);
  if (block_len < 1) fail(op, loc, "blockLen is 0 (it counts 32-byte DataBlocks)");
  const uint64_t len = uint64_t(block_len) * BLOCK;
  const uint64_t gm_step = len + uint64_t(src_gap) * BLOCK,
                 ub_step = len + uint64_t(dst_gap) * BLOCK;
  check_local(op, loc, "dst", dst, (block_count - 1) * ub_step + len, BLOCK);
  check_gm(op, loc, src, elem, 0, (block_count - 1) * gm_step + len, true);
  const uint64_t seq = issue(PIPE_TWIN_MTE2);
  for (uint32_t i = 0; i < block_count; ++i) {
    gm_access(op, loc, PIPE_TWIN_MTE2, seq, src.ptr + i * gm_step, len, false);
    ub_access(op, loc, PIPE_TWIN_MTE2, seq, uint32_t(dst.off + i * ub_step), len, true);
    std::memmove(ub_base() + dst.off + i * ub_step, src.ptr + i * gm_step, len);
  }
}

void copy_blocks_out(const char* op, Loc loc, GmView dst, const TensorRef& src, uint32_t elem,
                     uint32_t block_count, uint32_t block_len, uint32_t src_gap, uint32_t dst_gap) {
  check_block_count(op, loc, block_count);
  if (block_len < 1) fail(op, loc, "blockLen is 0 (it counts 32-byte DataBlocks)");
  const uint64_t len = uint64_t(block_len) * BLOCK;
  const uint64_t ub_step = len + uint64_t(src_gap) * BLOCK,
                 gm_step = len + uint64_t(dst_gap) * BLOCK;
  check_local(op, loc, "src", src, (block_count - 1) * ub_step + len, BLOCK);
  check_gm(op, loc, dst, elem, 0, (block_count - 1) * gm_step + len, true);
  const uint64_t seq = issue(PIPE_TWIN_MTE3);
  for (uint32_t i = 0; i < block_count; ++i) {
    ub_access(op, loc, PIPE_TWIN_MTE3, seq, uint32_t(src.off + i * ub_step), len, false);
    gm_access(op, loc, PIPE_TWIN_MTE3, seq, dst.ptr + i * gm_step, len, true);
    std::memmove(dst.ptr + i * gm_step, ub_base() + src.off + i * ub_step, len);
  }
}

void copy_pad_in(const char* op, Loc loc, const TensorRef& dst, GmView src, uint32_t elem,
                 uint32_t block_count, uint64_t block_len, uint64_t src_stride, uint64_t dst_stride,
                 bool is_pad, uint32_t left, uint32_t right, const void* pad_value) {
  check_block_count(op, loc, block_count);
  if (block_len < 1 || block_len > 2097151)
    fail(op, loc, "blockLen %" PRIu64 " bytes is outside 1..2097151", block_len);
  if (block_len % elem)
    fail(op, loc, "blockLen %" PRIu64 " bytes is not a whole number of %u-byte elements", block_len,
         elem);
  if (left * elem > BLOCK || right * elem > BLOCK)
    fail(op, loc, "leftPadding %u / rightPadding %u elements exceed 32 bytes", left, right);
  const uint64_t payload = uint64_t(left + right) * elem + block_len;
  const uint64_t row = round_up(payload, BLOCK);
  const uint64_t ub_step = row + dst_stride * BLOCK, gm_step = block_len + src_stride;
  check_local(op, loc, "dst", dst, (block_count - 1) * ub_step + row, BLOCK);
  check_gm(op, loc, src, elem, 0, (block_count - 1) * gm_step + block_len, false);
  const uint64_t seq = issue(PIPE_TWIN_MTE2);
  uint8_t poison[8];
  std::memset(poison, 0xFF, sizeof poison);  // "random" in the documentation
  for (uint32_t i = 0; i < block_count; ++i) {
    const uint8_t* from = src.ptr + i * gm_step;
    gm_access(op, loc, PIPE_TWIN_MTE2, seq, from, block_len, false);
    ub_access(op, loc, PIPE_TWIN_MTE2, seq, uint32_t(dst.off + i * ub_step), row, true);
    uint8_t* to = ub_base() + dst.off + i * ub_step;
    const void* pad = is_pad ? pad_value : poison;
    for (uint32_t k = 0; k < left; ++k) std::memcpy(to + k * elem, pad, elem);
    std::memmove(to + left * elem, from, block_len);
    for (uint32_t k = 0; k < right; ++k)
      std::memcpy(to + left * elem + block_len + k * elem, pad, elem);
    // Up to the 32-byte row end: documented as the block's first element when there is no
    // padding, else the padding value (isPad) or garbage.
    const void* dummy = (left == 0 && right == 0) ? static_cast<const void*>(from) : pad;
    for (uint64_t at = payload; at + elem <= row; at += elem) std::memcpy(to + at, dummy, elem);
  }
}

void copy_pad_out(const char* op, Loc loc, GmView dst, const TensorRef& src, uint32_t elem,
                  uint32_t block_count, uint64_t block_len, uint64_t src_stride,
                  uint64_t dst_stride) {
  check_block_count(op, loc, block_count);
  if (block_len < 1 || block_len > 2097151)
    fail(op, loc, "blockLen %" PRIu64 " bytes is outside 1..2097151", block_len);
  const uint64_t ub_step = round_up(block_len, BLOCK) + src_stride * BLOCK;
  const uint64_t gm_step = block_len + dst_stride;
  check_local(op, loc, "src", src, (block_count - 1) * ub_step + block_len, BLOCK);
  check_gm(op, loc, dst, elem, 0, (block_count - 1) * gm_step + block_len, false);
  const uint64_t seq = issue(PIPE_TWIN_MTE3);
  for (uint32_t i = 0; i < block_count; ++i) {
    ub_access(op, loc, PIPE_TWIN_MTE3, seq, uint32_t(src.off + i * ub_step), block_len, false);
    gm_access(op, loc, PIPE_TWIN_MTE3, seq, dst.ptr + i * gm_step, block_len, true);
    std::memmove(dst.ptr + i * gm_step, ub_base() + src.off + i * ub_step, block_len);
  }
}

void gm_scalar(const char* op, Loc loc, GmView gm, uint32_t elem, uint64_t index, void* value,
               bool write) {
  if (gm.bytes != UNKNOWN_SIZE && (index + 1) * elem > gm.bytes)
    fail(op, loc, "index %" PRIu64 " is outside the GlobalTensor's %" PRIu64 " elements", index,
         gm.bytes / elem);
  check_gm(op, loc, gm, elem, index * elem, (index + 1) * elem, true);
  const uint64_t seq = issue(PIPE_TWIN_S);
  uint8_t* at = gm.ptr + index * elem;
  gm_access(op, loc, PIPE_TWIN_S, seq, at, elem, write);
  if (write)
    std::memcpy(at, value, elem);
  else
    std::memcpy(value, at, elem);
}

void ub_scalar(const char* op, Loc loc, const TensorRef& t, uint32_t elem, uint64_t index,
               void* value, bool write) {
  if ((index + 1) * elem > t.bytes)
    fail(op, loc, "index %" PRIu64 " is outside the tensor's %" PRIu64 " elements", index,
         t.bytes / elem);
  check_local(op, loc, "tensor", t, (index + 1) * elem, 1);
  const uint64_t seq = issue(PIPE_TWIN_S);
  const uint32_t off = uint32_t(t.off + index * elem);
  ub_access(op, loc, PIPE_TWIN_S, seq, off, elem, write);
  if (write)
    std::memcpy(ub_base() + off, value, elem);
  else
    std::memcpy(value, ub_base() + off, elem);
}

void check_select_scratch(const char* op, Loc loc) {
  Core& c = core_or_fail(op, loc);
  if (c.top[MEM_UB] > UB_BYTES - UB_SCRATCH)
    fail(op, loc,
         "this Select mode needs %u bytes of UB for its own scratch, but TPipe has allocated "
         "%u of the %u bytes (keep allocations within %u bytes)",
         UB_SCRATCH, c.top[MEM_UB], UB_BYTES, UB_BYTES - UB_SCRATCH);
}

/* --- TPipe --- */

int pipe_create(Loc loc) {
  Core& c = core_or_fail("TPipe", loc);
  if (c.live_pipe >= 0)
    fail("TPipe", loc,
         "a second TPipe while the one created at %s is alive: both would "
         "allocate the same Unified Buffer",
         where(c.pipe_loc).c_str());
  c.live_pipe = ++c.pipes_made;
  c.pipe_loc = loc;
  std::memset(c.top, 0, sizeof c.top);
  return c.live_pipe;
}

static void release_pipe(Core& c, int pipe) {
  for (QueRec& q : c.ques) {
    if (q.pipe != pipe) continue;
    q.dead = true;
    for (int id : q.bufs) c.bufs[size_t(id)].dead = true;
  }
  std::memset(c.top, 0, sizeof c.top);
}

void pipe_destroy(int pipe) {
  Core* c = g_core;
  if (!c || pipe < 0 || c->live_pipe != pipe) return;
  release_pipe(*c, pipe);
  c->live_pipe = -1;
}

void pipe_reset(int pipe, Loc loc) {
  Core& c = core_or_fail("TPipe::Reset", loc);
  for (size_t q = 0; q < c.ques.size(); ++q) {
    const QueRec& r = c.ques[q];
    if (r.pipe != pipe || r.tbuf || r.dead) continue;
    for (int id : r.bufs)
      if (c.bufs[size_t(id)].state != BufState::FREE)
        fail("TPipe::Reset", loc, "a tensor of %s (AllocTensor at %s) is still in use",
             que_desc(c, int(q)).c_str(), where(c.bufs[size_t(id)].alloc_loc).c_str());
  }
  release_pipe(c, pipe);
}

[[noreturn]] static void overflow(Core& c, const char* op, Loc loc, int pipe, const char* kind,
                                  int num, uint64_t bytes, uint64_t total, Mem mem) {
  std::string have;
  for (const QueRec& q : c.ques) {
    if (q.dead || q.pipe != pipe || q.mem != mem) continue;
    have += format("%s%s at %s: %zu x %" PRIu64 " bytes", have.empty() ? "" : "; ",
                   q.kind.c_str(), where(q.init_loc).c_str(), q.bufs.size(), q.bytes);
  }
  const char* m = mem_name(mem);
  fail(op, loc,
       "%s overflow: %s asks for %d x %" PRIu64 " bytes (%" PRIu64
       " with %u-byte alignment) "
       "but only %" PRIu64 " of the %u bytes of %s are left (allocated: %s)",
       m, kind, num, bytes, total, MEM_GRANULE[mem], uint64_t(MEM_BYTES[mem] - c.top[mem]), MEM_BYTES[mem],
       m, have.empty() ? "nothing" : have.c_str());
}

/* A vector core has the Unified Buffer only; the cube core L1 and L0 only. */
static void check_core_has(Core& c, const char* op, Loc loc, const char* kind, Mem mem) {
  const bool cube = c.kind == CORE_AIC;
  if ((mem == MEM_UB) == !cube) return;
  fail(op, loc, "%s lives in %s, which the %s does not have (%s)", kind, mem_name(mem),
       cube ? "cube core (AIC)" : "vector core",
       cube ? "the UB is on the vector cores (AIV): hand data over through GM"
            : "L1 and L0A/L0B/L0C are on the cube core (AIC): launch an AIC or mixed kernel");
}

static int add_buffers(const char* op, Loc loc, int pipe, int old, const char* kind, bool tbuf,
                       int num, uint64_t bytes, int depth, Pipe producer, Pipe consumer,
                       Mem mem) {
  Core& c = core_or_fail(op, loc);
  if (pipe != c.live_pipe) fail(op, loc, "the TPipe was destroyed");
  check_core_has(c, op, loc, kind, mem);
  if (old >= 0 && size_t(old) < c.ques.size() && !c.ques[size_t(old)].dead)
    fail(op, loc, "%s already has buffers (InitBuffer at %s)", kind,
         where(c.ques[size_t(old)].init_loc).c_str());
  if (num < 1) fail(op, loc, "%s needs at least one buffer (num = %d)", kind, num);
  if (bytes == 0) fail(op, loc, "%s asks for buffers of 0 bytes", kind);
  const uint64_t g = MEM_GRANULE[mem];
  const uint64_t each = (bytes + g - 1) / g * g;
  const uint64_t total = each * uint64_t(num);
  if (total > MEM_BYTES[mem] - c.top[mem])
    overflow(c, op, loc, pipe, kind, num, bytes, total, mem);
  QueRec q;
  q.kind = kind;
  q.mem = mem;
  q.init_loc = loc;
  q.pipe = pipe;
  q.depth = depth;
  q.producer = producer;
  q.consumer = consumer;
  q.tbuf = tbuf;
  q.bytes = each;
  const int que = int(c.ques.size());
  for (int i = 0; i < num; ++i) {
    BufRec b;
    b.que = que;
    b.tbuf = tbuf;
    b.state = tbuf ? BufState::ALLOC : BufState::FREE;
    b.off = MEM_BASE[mem] + c.top[mem];
    b.bytes = each;
    c.top[mem] += uint32_t(each);
    q.bufs.push_back(int(c.bufs.size()));
    c.bufs.push_back(b);
  }
  c.ques.push_back(std::move(q));
  return que;
}

int que_init(const char* op, Loc loc, int pipe, int old, const char* kind, int depth, Pipe producer,
             Pipe consumer, int num, uint64_t bytes, Mem mem) {
  return add_buffers(op, loc, pipe, old, kind, false, num, bytes, depth, producer, consumer, mem);
}

int tbuf_init(const char* op, Loc loc, int pipe, int old, const char* kind, uint64_t bytes,
              Mem mem) {
  return add_buffers(op, loc, pipe, old, kind, true, 1, bytes, 0, PIPE_TWIN_V, PIPE_TWIN_V, mem);
}

int que_check(int que, const char* op, Loc loc) {
  Core& c = core_or_fail(op, loc);
  if (que < 0 || size_t(que) >= c.ques.size())
    fail(op, loc, "the queue or buffer was never given memory by TPipe::InitBuffer");
  if (c.ques[size_t(que)].dead)
    fail(op, loc, "%s belongs to a TPipe that was reset or destroyed", que_desc(c, que).c_str());
  return que;
}

TensorRef que_alloc(int que, Loc loc) {
  Core& c = core_or_fail("AllocTensor", loc);
  QueRec& q = c.ques[size_t(que_check(que, "AllocTensor", loc))];
  const size_t n = q.bufs.size();
  for (size_t k = 0; k < n; ++k) {
    const size_t i = (q.next + k) % n;
    BufRec& b = c.bufs[size_t(q.bufs[i])];
    if (b.state != BufState::FREE) continue;
    q.next = (i + 1) % n;
    if (b.idle.set) wait(c, b.idle, q.consumer, q.producer);
    b.state = BufState::ALLOC;
    ++b.gen;
    b.alloc_loc = loc;
    return TensorRef{q.bufs[i], b.gen, b.off, b.bytes};
  }
  std::string held;
  for (int id : q.bufs)
    held += format("%s%s", held.empty() ? "" : ", ", where(c.bufs[size_t(id)].alloc_loc).c_str());
  fail("AllocTensor", loc,
       "all %zu buffer(s) of %s are in use (allocated at %s): hardware would wait forever for a "
       "FreeTensor",
       n, que_desc(c, que).c_str(), held.c_str());
}

static BufRec& own_buffer(Core& c, int que, const TensorRef& t, const char* op, Loc loc) {
  if (t.buf < 0 || size_t(t.buf) >= c.bufs.size())
    fail(op, loc, "the LocalTensor was never allocated");
  BufRec& b = c.bufs[size_t(t.buf)];
  if (b.que != que)
    fail(op, loc, "the tensor belongs to %s, not to %s", que_desc(c, b.que).c_str(),
         que_desc(c, que).c_str());
  return b;
}

void que_enque(int que, const TensorRef& t, Loc loc) {
  Core& c = core_or_fail("EnQue", loc);
  QueRec& q = c.ques[size_t(que_check(que, "EnQue", loc))];
  BufRec& b = own_buffer(c, que, t, "EnQue", loc);
  if (b.state == BufState::FREE || b.gen != t.gen)
    fail("EnQue", loc, "the tensor was freed (FreeTensor at %s)", where(b.free_loc).c_str());
  if (b.state == BufState::ENQUEUED)
    fail("EnQue", loc, "the tensor is already in the queue (EnQue at %s)",
         where(b.enque_loc).c_str());
  if (q.fifo.size() >= size_t(q.depth))
    fail("EnQue", loc, "%s already holds %zu tensor(s), its depth: hardware would wait forever",
         que_desc(c, que).c_str(), q.fifo.size());
  set(c, b.ready, q.producer, loc);
  b.state = BufState::ENQUEUED;
  b.enque_loc = loc;
  q.fifo.push_back(t.buf);
}

TensorRef que_deque(int que, Loc loc) {
  Core& c = core_or_fail("DeQue", loc);
  QueRec& q = c.ques[size_t(que_check(que, "DeQue", loc))];
  if (q.fifo.empty())
    fail("DeQue", loc, "%s is empty: no EnQue before this DeQue, hardware would wait forever",
         que_desc(c, que).c_str());
  const int id = q.fifo.front();
  q.fifo.pop_front();
  BufRec& b = c.bufs[size_t(id)];
  wait(c, b.ready, q.producer, q.consumer);
  b.state = BufState::DEQUEUED;
  return TensorRef{id, b.gen, b.off, b.bytes};
}

void que_free(int que, const TensorRef& t, Loc loc) {
  Core& c = core_or_fail("FreeTensor", loc);
  QueRec& q = c.ques[size_t(que_check(que, "FreeTensor", loc))];
  BufRec& b = own_buffer(c, que, t, "FreeTensor", loc);
  if (b.state == BufState::FREE || b.gen != t.gen)
    fail("FreeTensor", loc, "double free: the tensor was already freed at %s",
         where(b.free_loc).c_str());
  if (b.state == BufState::ENQUEUED)
    fail("FreeTensor", loc, "the tensor is still in the queue (EnQue at %s): DeQue it first",
         where(b.enque_loc).c_str());
  set(c, b.idle, q.consumer, loc);
  b.state = BufState::FREE;
  b.free_loc = loc;
}

int que_count(int que) {
  Core& c = core_or_fail("GetTensorCountInQue", Loc{});
  return int(c.ques[size_t(que_check(que, "GetTensorCountInQue", Loc{}))].fifo.size());
}

bool que_has_idle(int que) {
  Core& c = core_or_fail("HasIdleBuffer", Loc{});
  const QueRec& q = c.ques[size_t(que_check(que, "HasIdleBuffer", Loc{}))];
  for (int id : q.bufs)
    if (c.bufs[size_t(id)].state == BufState::FREE) return true;
  return false;
}

TensorRef tbuf_get(int buf, uint64_t bytes, Loc loc) {
  Core& c = core_or_fail("TBuf::Get", loc);
  const QueRec& q = c.ques[size_t(que_check(buf, "TBuf::Get", loc))];
  const BufRec& b = c.bufs[size_t(q.bufs[0])];
  if (bytes > b.bytes)
    fail("TBuf::Get", loc, "asks for %" PRIu64 " bytes of %s, which has %" PRIu64, bytes,
         que_desc(c, buf).c_str(), b.bytes);
  return TensorRef{q.bufs[0], b.gen, b.off, bytes};
}

/* --- flags --- */

void set_flag(Pipe src, Pipe dst, int id, const char* event, Loc loc) {
  Core& c = core_or_fail("SetFlag", loc);
  if (id < 0 || id >= MAX_EVENT_ID)
    fail("SetFlag", loc, "event id %d is outside 0..%d", id, MAX_EVENT_ID - 1);
  Flag& f = c.flags[src][dst][id];
  if (f.set)
    fail("SetFlag", loc, "SetFlag<HardEvent::%s>(%d) is already set (at %s) and not yet waited for",
         event, id, where(f.loc).c_str());
  set(c, f, src, loc);
}

void wait_flag(Pipe src, Pipe dst, int id, const char* event, Loc loc) {
  Core& c = core_or_fail("WaitFlag", loc);
  if (id < 0 || id >= MAX_EVENT_ID)
    fail("WaitFlag", loc, "event id %d is outside 0..%d", id, MAX_EVENT_ID - 1);
  Flag& f = c.flags[src][dst][id];
  if (!f.set)
    fail("WaitFlag", loc,
         "WaitFlag<HardEvent::%s>(%d) without a SetFlag before it: hardware "
         "would wait forever",
         event, id);
  wait(c, f, src, dst);
}

void barrier(int pipe, Loc loc) {
  Core& c = core_or_fail("PipeBarrier", loc);
  if (pipe < 0) {
    for (int x = 0; x < NPIPES; ++x)
      for (int y = 0; y < NPIPES; ++y) c.synced[x][y] = std::max(c.synced[x][y], c.seq[x]);
    return;
  }
  if (pipe == PIPE_TWIN_S)
    fail("PipeBarrier", loc,
         "PipeBarrier<PIPE_S> raises a hardware error (the scalar pipe is "
         "ordered by hardware)");
  c.synced[pipe][pipe] = c.seq[pipe];
}

int fetch_event_id(Pipe src, Pipe dst, bool allocate, Loc loc) {
  Core& c = core_or_fail(allocate ? "AllocEventID" : "FetchEventID", loc);
  for (int id = 0; id < MAX_EVENT_ID; ++id) {
    if (c.event_ids[src][dst] & (1u << id)) continue;
    if (allocate) c.event_ids[src][dst] |= uint8_t(1u << id);
    return id;
  }
  fail(allocate ? "AllocEventID" : "FetchEventID", loc,
       "all %d event ids of HardEvent::%s_%s are allocated", MAX_EVENT_ID, pipe_name(src),
       pipe_name(dst));
}

void release_event_id(Pipe src, Pipe dst, int id, Loc loc) {
  Core& c = core_or_fail("ReleaseEventID", loc);
  if (id < 0 || id >= MAX_EVENT_ID || !(c.event_ids[src][dst] & (1u << id)))
    fail("ReleaseEventID", loc, "event id %d of HardEvent::%s_%s was not allocated", id,
         pipe_name(src), pipe_name(dst));
  c.event_ids[src][dst] &= uint8_t(~(1u << id));
}

/* --- launch --- */

/* --- mixed kernels: one AIC and two AIVs per block, ordered by cross-core flags ---
 *
 * The three cores of a block run on threads of their own that take turns: one runs until it
 * ends or waits for a flag nobody has set yet, then the next runnable one goes on (the AIC
 * first).  So the run is deterministic, and a wait nothing can satisfy is reported instead of
 * hanging.  Cross-core flags follow mode 2 of the CrossCoreSetFlag page (Atlas A2): a set on
 * the AIC counts once for each AIV; the AIC's counter counts once both AIVs have set; a wait
 * takes one count and blocks while there is none; a counter holds at most 15.  GM that one
 * core wrote and another reads (or writes over what another reads) must be ordered by a set
 * on the pipe of the first access, after it, and the matching wait: else strict mode reports
 * a missing cross-core sync. */
namespace {

constexpr int CROSS_FLAGS = 16;
constexpr size_t CROSS_COUNT_MAX = 15;

struct CrossSet {
  uint64_t cov[NPIPES];  // per pipe, the last instruction the set is known to follow
};

struct Aborted {};  // unwinds a core of a block after another one failed

struct Mix {
  std::mutex mu;
  std::condition_variable cv;
  int turn = -1;  // the core (sub) that runs; -1: the scheduler
  bool done[3] = {};
  int waiting[3] = {-1, -1, -1};  // the flag a core waits for
  Loc wait_loc[3];
  bool abort = false;
  std::string error;
  std::vector<CrossSet> sets[3];
  size_t known[3][3] = {};                      // known[s][w]: sets of w that s has waited for
  std::deque<size_t> aiv_tokens[2][CROSS_FLAGS];  // sets of the AIC, per AIV
  std::deque<size_t> from_aiv[2][CROSS_FLAGS];    // sets of each AIV, not yet paired
  std::deque<std::pair<size_t, size_t>> aic_tokens[CROSS_FLAGS];
  Tracker gm;
};

const char* sub_name(const Core& c) {
  static const char* const names[] = {"AIC", "AIV0", "AIV1"};
  return names[c.sub];
}

bool has_token(const Mix& m, int sub, int id) {
  return sub == 0 ? !m.aic_tokens[id].empty() : !m.aiv_tokens[sub - 1][id].empty();
}

bool covered(const Mix& m, int reader, int writer, const Access& a) {
  const size_t k = m.known[reader][writer];
  return k > 0 && m.sets[writer][k - 1].cov[a.pipe] >= a.seq;
}

void mix_gm_access(Core& c, const char* op, Loc loc, Pipe pipe, uint64_t seq, const Range& r,
                   bool write) {
  Mix& m = *c.mix;
  static const char* const names[] = {"the AIC", "AIV0", "AIV1"};
  const int me = c.sub;
  Access a{seq, op, loc, pipe};
  m.gm.access(r.lo, r.hi, Pipe(me), a, write, [&](uint64_t start, const Seg& s) {
    const std::string range = gm_range(start, s.end);
    if (s.writer >= 0 && s.writer != me && !covered(m, me, s.writer, s.write))
      fail(op, loc,
           "missing cross-core sync: %s %s %s that %s wrote (%s at %s): no CrossCoreSetFlag on "
           "PIPE_%s after that write with a CrossCoreWaitFlag here before this access",
           sub_name(c), write ? "writes" : "reads", range.c_str(), names[s.writer],
           s.write.op, where(s.write.loc).c_str(), pipe_name(s.write.pipe));
    if (!write) return;
    for (int o = 0; o < 3; ++o)
      if (o != me && s.read[o].seq != NEVER && !covered(m, me, o, s.read[o]))
        fail(op, loc,
             "missing cross-core sync: %s writes %s that %s may still be reading (%s at %s): "
             "no CrossCoreSetFlag after that read with a CrossCoreWaitFlag here before this "
             "write",
             sub_name(c), range.c_str(), names[o], s.read[o].op, where(s.read[o].loc).c_str());
  });
}

Mix& mix_or_fail(const char* op, Loc loc, int id) {
  Core& c = core_or_fail(op, loc);
  if (!c.mix)
    fail(op, loc,
         "cross-core flags order the AIC and AIVs of a mixed kernel (__mix__(1, 2), launched "
         "with ASCEND_TWIN_LAUNCH_MIX); this core is not one");
  if (id < 0 || id >= CROSS_FLAGS) fail(op, loc, "flag id %d is outside 0..15", id);
  return *c.mix;
}

void push_token(const char* op, Loc loc, std::deque<size_t>& q, size_t set, int id) {
  if (q.size() >= CROSS_COUNT_MAX)
    fail(op, loc, "the counter of cross-core flag %d would exceed 15 (sets not yet waited for)",
         id);
  q.push_back(set);
}

}  // namespace

void cross_set(int mode, Pipe pipe, int id, Loc loc) {
  const char* op = "CrossCoreSetFlag";
  Mix& m = mix_or_fail(op, loc, id);
  Core& c = *g_core;
  if (mode != 2) fail(op, loc, "mode %d is not modelled (the twin models mode 2: AIC <-> AIVs)", mode);
  CrossSet set{};
  const uint64_t at = issue(pipe);
  for (int w = 0; w < NPIPES; ++w) set.cov[w] = w == pipe ? at : c.synced[w][pipe];
  std::lock_guard<std::mutex> lk(m.mu);
  const size_t index = m.sets[c.sub].size();
  m.sets[c.sub].push_back(set);
  if (c.sub == 0) {
    for (int v = 0; v < 2; ++v) push_token(op, loc, m.aiv_tokens[v][id], index, id);
    return;
  }
  m.from_aiv[c.sub - 1][id].push_back(index);
  if (m.from_aiv[0][id].empty() || m.from_aiv[1][id].empty()) return;
  if (m.aic_tokens[id].size() >= CROSS_COUNT_MAX)
    fail(op, loc, "the counter of cross-core flag %d would exceed 15", id);
  m.aic_tokens[id].emplace_back(m.from_aiv[0][id].front(), m.from_aiv[1][id].front());
  m.from_aiv[0][id].pop_front();
  m.from_aiv[1][id].pop_front();
}

void cross_wait(int id, Loc loc) {
  Mix& m = mix_or_fail("CrossCoreWaitFlag", loc, id);
  Core& c = *g_core;
  std::unique_lock<std::mutex> lk(m.mu);
  while (!has_token(m, c.sub, id)) {
    m.waiting[c.sub] = id;
    m.wait_loc[c.sub] = loc;
    m.turn = -1;
    m.cv.notify_all();
    m.cv.wait(lk, [&] { return m.turn == c.sub; });
    m.waiting[c.sub] = -1;
    if (m.abort) throw Aborted{};
  }
  if (c.sub == 0) {
    const auto pair = m.aic_tokens[id].front();
    m.aic_tokens[id].pop_front();
    m.known[0][1] = std::max(m.known[0][1], pair.first + 1);
    m.known[0][2] = std::max(m.known[0][2], pair.second + 1);
  } else {
    auto& q = m.aiv_tokens[c.sub - 1][id];
    m.known[c.sub][0] = std::max(m.known[c.sub][0], q.front() + 1);
    q.pop_front();
  }
}

namespace {

/* One core of a mixed block, on its own thread. */
void run_sub(Mix& m, Core& c, Launch* launch, const std::function<void()>& body) {
  {
    std::unique_lock<std::mutex> lk(m.mu);
    m.cv.wait(lk, [&] { return m.turn == c.sub; });
  }
  g_core = &c;
  g_launch = launch;
  std::string error;
  try {
    if (!m.abort) {
      body();
      check_block_end(c);
    }
  } catch (const Aborted&) {
  } catch (const Error& e) {
    error = e.what();
  } catch (const std::exception& e) {
    error = format("kernel %s block %" PRId64 " %s: %s", c.kernel, c.idx, sub_name(c), e.what());
  }
  g_core = nullptr;
  g_launch = nullptr;
  std::lock_guard<std::mutex> lk(m.mu);
  if (!error.empty() && m.error.empty()) m.error = error;
  m.done[c.sub] = true;
  m.turn = -1;
  m.cv.notify_all();
}

std::string hang_message(const Mix& m, const Core& c) {
  static const char* const names[] = {"AIC", "AIV0", "AIV1"};
  std::string who;
  for (int s = 0; s < 3; ++s)
    if (!m.done[s])
      who += format("%s%s waits for flag %d (CrossCoreWaitFlag at %s)", who.empty() ? "" : "; ",
                    names[s], m.waiting[s], where(m.wait_loc[s]).c_str());
  return format("kernel %s block %" PRId64 ": CrossCoreWaitFlag: the block would hang: %s, and "
                "no core that is still running will set it",
                c.kernel, c.idx, who.c_str());
}

/* Give the turn to core `s` and wait until it hands it back; with the lock held. */
void give_turn(Mix& m, std::unique_lock<std::mutex>& lk, int s) {
  m.turn = s;
  m.cv.notify_all();
  m.cv.wait(lk, [&] { return m.turn == -1; });
}

/* Run one block of a mixed kernel on cores[0] (AIC), cores[1], cores[2] (AIVs). */
void run_mix_block(Core* cores, Launch& launch, const std::function<void()>& body) {
  Mix m;
  for (int s = 0; s < 3; ++s) cores[s].mix = &m;
  std::vector<std::thread> threads;
  for (int s = 0; s < 3; ++s)
    threads.emplace_back(run_sub, std::ref(m), std::ref(cores[s]), &launch, std::cref(body));
  std::unique_lock<std::mutex> lk(m.mu);
  for (int last = 2;;) {
    int next = -1;
    for (int k = 1; k <= 3 && next < 0 && m.error.empty(); ++k) {
      const int s = (last + k) % 3;
      if (!m.done[s] && (m.waiting[s] < 0 || has_token(m, s, m.waiting[s]))) next = s;
    }
    if (next < 0) break;
    give_turn(m, lk, next);
    last = next;
  }
  const bool hang = m.error.empty() && !(m.done[0] && m.done[1] && m.done[2]);
  if (hang) m.error = hang_message(m, cores[0]);
  m.abort = true;
  for (int s = 0; s < 3; ++s)
    if (!m.done[s]) give_turn(m, lk, s);
  lk.unlock();
  for (auto& t : threads) t.join();
  for (int s = 0; s < 3; ++s) cores[s].mix = nullptr;
  if (!m.error.empty()) throw Error(m.error);
}

}  // namespace

namespace {

/* Blocks of a vector-only or AIC-only kernel on the calling thread, core `c`. */
void run_blocks(Core& c, Launch& launch, LaunchMode mode, const std::function<void()>& body) {
  c.kind = mode == LAUNCH_AIC ? CORE_AIC : CORE_VECTOR;
  for (int64_t b = 0; b < c.num; ++b) {
    c.reset_block(b);
    g_core = &c;
    body();
    check_block_end(c);
    merge(c.gm_reads);
    merge(c.gm_writes);
    launch.reads[size_t(b)].swap(c.gm_reads);
    launch.writes[size_t(b)].swap(c.gm_writes);
    g_core = nullptr;
  }
}

/* Blocks of a mixed kernel: each on a fresh AIC and two fresh AIVs. */
void run_mix_blocks(Core* cores, Launch& launch, const std::function<void()>& body) {
  for (int64_t b = 0; b < cores[0].num; ++b) {
    for (int s = 0; s < 3; ++s) {
      cores[s].kind = s == 0 ? CORE_AIC : CORE_AIV;
      cores[s].sub = s;
      cores[s].reset_block(b);
    }
    g_core = &cores[0];  // for messages of the scheduler
    run_mix_block(cores, launch, body);
    g_core = nullptr;
    auto& reads = launch.reads[size_t(b)];
    auto& writes = launch.writes[size_t(b)];
    for (int s = 0; s < 3; ++s) {
      reads.insert(reads.end(), cores[s].gm_reads.begin(), cores[s].gm_reads.end());
      writes.insert(writes.end(), cores[s].gm_writes.begin(), cores[s].gm_writes.end());
    }
    merge(reads);
    merge(writes);
  }
}

void run_mode(Core* cores, Launch& launch, LaunchMode mode, const std::function<void()>& body) {
  for (int s = 0; s < 3; ++s) cores[s].mode = mode;
  if (mode == LAUNCH_MIX)
    run_mix_blocks(cores, launch, body);
  else
    run_blocks(cores[0], launch, mode, body);
}

}  // namespace

void declare_kernel_type(int type, Loc loc) {
  const char* op = "KERNEL_TASK_TYPE_DEFAULT";
  Core& c = core_or_fail(op, loc);
  // KERNEL_TYPE_AIV_ONLY, KERNEL_TYPE_AIC_ONLY, ..., KERNEL_TYPE_MIX_AIC_1_2
  const LaunchMode want = type == 0 ? LAUNCH_VECTOR : type == 1 ? LAUNCH_AIC
                          : type == 5                ? LAUNCH_MIX
                                                     : LaunchMode(255);
  if (want == LaunchMode(255))
    fail(op, loc, "kernel type %d is not modelled (AIV_ONLY, AIC_ONLY and MIX_AIC_1_2 are)", type);
  if (want == c.mode) return;
  if (c.mix) fail(op, loc, "a kernel launched as mixed declares another type");
  bool fresh = c.idx == 0 && c.mix == nullptr && c.live_pipe < 0 && c.pipes_made == 0;
  for (int p = 0; p < NPIPES; ++p) fresh = fresh && c.seq[p] == 0;
  if (!fresh)
    fail(op, loc, "the kernel type must be declared by the kernel's first statement, before "
                  "anything runs (it was launched as another type)");
  throw Relaunch{want};
}

int run_launch(const char* kernel, int64_t block_dim, const GmArg* gm_args, int n_gm_args,
               const std::function<void()>& body, LaunchMode mode) {
  g_last_error.clear();
  Launch launch;
  launch.kernel = kernel;
  launch.gm.swap(g_pending_gm);
  launch.args.assign(gm_args, gm_args + n_gm_args);
  if (g_core) {
    g_last_error = format("kernel %s: launched from inside kernel %s", kernel, g_core->kernel);
    return 1;
  }
  if (block_dim < 1 || block_dim > 65535) {
    g_last_error = format("kernel %s: blockDim %" PRId64 " is outside 1..65535", kernel, block_dim);
    return 1;
  }
  thread_local std::unique_ptr<Core[]> core_storage;
  if (!core_storage) core_storage.reset(new Core[3]);
  Core* cores = core_storage.get();
  for (int s = 0; s < 3; ++s) {
    cores[s].kernel = kernel;
    cores[s].num = block_dim;
    cores[s].strict = resolve_strict();
    cores[s].sub = 0;
  }
  launch.reads.resize(size_t(block_dim));
  launch.writes.resize(size_t(block_dim));
  g_launch = &launch;
  int rc = 0;
  try {
    try {
      run_mode(cores, launch, mode, body);
    } catch (const Relaunch& r) {  // the kernel's first statement declared another type
      for (auto& v : launch.reads) v.clear();
      for (auto& v : launch.writes) v.clear();
      g_core = nullptr;
      g_launch = &launch;
      run_mode(cores, launch, r.mode, body);
    }
    check_cross_core(launch);
  } catch (const Error& e) {
    g_last_error = e.what();
    rc = 1;
  } catch (const std::exception& e) {
    g_last_error = format("kernel %s block %" PRId64 ": %s", kernel, cores[0].idx, e.what());
    rc = 1;
  } catch (...) {
    g_last_error = format("kernel %s block %" PRId64 ": the kernel threw a non-standard exception",
                          kernel, cores[0].idx);
    rc = 1;
  }
  g_core = nullptr;
  g_launch = nullptr;
  return rc;
}

}  // namespace tilec_twin

extern "C" {

const char* tilec_twin_last_error(void) { return tilec_twin::g_last_error.c_str(); }

void tilec_twin_set_strict(int level) { tilec_twin::g_strict = level < 0 ? -1 : level; }

int tilec_twin_strict(void) { return tilec_twin::resolve_strict(); }

void tilec_twin_register_gm(const void* ptr, uint64_t bytes, const char* name) {
  tilec_twin::g_pending_gm.push_back(
      tilec_twin::GmBuf{static_cast<const uint8_t*>(ptr), bytes, name ? name : "?"});
}
}
