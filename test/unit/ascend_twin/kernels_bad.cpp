// Ascend C kernels that each break one hardware rule, for the twin's negative tests.  Every
// kernel `bad_<name>` takes (x, y): x holds 1024 readable halfs (2 KiB), y 1024 writable
// halfs; run_bad(name, blocks) launches one of them.  The line of the violation is marked
// `// VIOLATION` so the test can check the message's location.
#include <cstring>

#include "kernel_operator.h"

using namespace AscendC;

#define BAD(name)                                                              \
  extern "C" __global__ __aicore__ void bad_##name([[maybe_unused]] GM_ADDR x, \
                                                   [[maybe_unused]] GM_ADDR y)

namespace {
struct Gm {
  GlobalTensor<half> x, y;
  __aicore__ inline Gm(GM_ADDR xp, GM_ADDR yp) {
    x.SetGlobalBuffer((__gm__ half*)xp, 1024);
    y.SetGlobalBuffer((__gm__ half*)yp, 1024);
  }
};
}  // namespace

BAD(ub_overflow) {
  TPipe pipe;
  TQue<TPosition::VECIN, 2> inQ;
  TBuf<TPosition::VECCALC> tmp;
  pipe.InitBuffer(inQ, 2, 65536);
  pipe.InitBuffer(tmp, 70000);  // VIOLATION
}

BAD(misaligned_count) {
  Gm g(x, y);
  TPipe pipe;
  TQue<TPosition::VECIN, 1> inQ;
  pipe.InitBuffer(inQ, 1, 256);
  LocalTensor<half> t = inQ.AllocTensor<half>();
  DataCopy(t, g.x, 100);  // VIOLATION
  inQ.FreeTensor(t);
}

BAD(misaligned_ub) {
  Gm g(x, y);
  TPipe pipe;
  TBuf<TPosition::VECCALC> buf;
  pipe.InitBuffer(buf, 1024);
  LocalTensor<half> t = buf.Get<half>();
  DataCopy(t[8], g.x, 32);  // VIOLATION
}

BAD(deque_empty) {
  TPipe pipe;
  TQue<TPosition::VECIN, 2> inQ;
  pipe.InitBuffer(inQ, 2, 256);
  LocalTensor<half> t = inQ.DeQue<half>();  // VIOLATION
  inQ.FreeTensor(t);
}

BAD(double_free) {
  Gm g(x, y);
  TPipe pipe;
  TQue<TPosition::VECIN, 1> inQ;
  pipe.InitBuffer(inQ, 1, 256);
  LocalTensor<half> t = inQ.AllocTensor<half>();
  DataCopy(t, g.x, 128);
  inQ.EnQue(t);
  t = inQ.DeQue<half>();
  inQ.FreeTensor(t);
  inQ.FreeTensor(t);  // VIOLATION
}

BAD(leak) {
  Gm g(x, y);
  TPipe pipe;
  TQue<TPosition::VECOUT, 1> outQ;
  pipe.InitBuffer(outQ, 1, 256);
  LocalTensor<half> t = outQ.AllocTensor<half>();  // VIOLATION
  Duplicate(t, half(1.0f), 128);
}

BAD(queue_not_empty) {
  Gm g(x, y);
  TPipe pipe;
  TQue<TPosition::VECIN, 1> inQ;
  pipe.InitBuffer(inQ, 1, 256);
  LocalTensor<half> t = inQ.AllocTensor<half>();
  DataCopy(t, g.x, 128);
  inQ.EnQue(t);  // VIOLATION
}

BAD(alloc_beyond_num) {
  TPipe pipe;
  TQue<TPosition::VECIN, 2> inQ;
  pipe.InitBuffer(inQ, 1, 256);
  LocalTensor<half> a = inQ.AllocTensor<half>();
  LocalTensor<half> b = inQ.AllocTensor<half>();  // VIOLATION
  inQ.FreeTensor(a);
  inQ.FreeTensor(b);
}

BAD(depth_overflow) {
  Gm g(x, y);
  TPipe pipe;
  TQue<TPosition::VECIN, 1> inQ;
  pipe.InitBuffer(inQ, 2, 256);
  LocalTensor<half> a = inQ.AllocTensor<half>();
  LocalTensor<half> b = inQ.AllocTensor<half>();
  DataCopy(a, g.x, 128);
  DataCopy(b, g.x[128], 128);
  inQ.EnQue(a);
  inQ.EnQue(b);  // VIOLATION
}

BAD(use_after_free) {
  Gm g(x, y);
  TPipe pipe;
  TQue<TPosition::VECIN, 1> inQ;
  TBuf<TPosition::VECCALC> tmp;
  pipe.InitBuffer(inQ, 1, 256);
  pipe.InitBuffer(tmp, 256);
  LocalTensor<half> t = inQ.AllocTensor<half>();
  DataCopy(t, g.x, 128);
  inQ.EnQue(t);
  LocalTensor<half> u = inQ.DeQue<half>();
  inQ.FreeTensor(u);
  LocalTensor<half> o = tmp.Get<half>();
  Abs(o, t, 128);  // VIOLATION
}

BAD(use_while_queued) {
  Gm g(x, y);
  TPipe pipe;
  TQue<TPosition::VECIN, 1> inQ;
  pipe.InitBuffer(inQ, 1, 256);
  LocalTensor<half> t = inQ.AllocTensor<half>();
  DataCopy(t, g.x, 128);
  inQ.EnQue(t);
  Abs(t, t, 128);  // VIOLATION
  t = inQ.DeQue<half>();
  inQ.FreeTensor(t);
}

BAD(missing_v_s) {
  TPipe pipe;
  TBuf<TPosition::VECCALC> src, work, dst;
  pipe.InitBuffer(src, 256 * sizeof(float));
  pipe.InitBuffer(work, 32);
  pipe.InitBuffer(dst, 32);
  LocalTensor<float> s = src.Get<float>();
  LocalTensor<float> w = work.Get<float>();
  LocalTensor<float> d = dst.Get<float>();
  Duplicate(s, 1.0f, 256);
  ReduceSum(d, s, w, 256);
  float total = d.GetValue(0);  // VIOLATION
  (void)total;
}

BAD(missing_mte2_v) {
  Gm g(x, y);
  TPipe pipe;
  TBuf<TPosition::VECCALC> buf;
  pipe.InitBuffer(buf, 512);
  LocalTensor<half> t = buf.Get<half>();
  DataCopy(t, g.x, 128);
  Muls(t[128], t, half(2.0f), 128);  // VIOLATION
}

BAD(missing_v_mte3) {
  Gm g(x, y);
  TPipe pipe;
  TBuf<TPosition::VECCALC> buf;
  pipe.InitBuffer(buf, 256);
  LocalTensor<half> t = buf.Get<half>();
  Duplicate(t, half(3.0f), 128);
  DataCopy(g.y, t, 128);  // VIOLATION
}

BAD(missing_s_mte3) {
  Gm g(x, y);
  TPipe pipe;
  TQue<TPosition::VECOUT, 1> outQ;
  pipe.InitBuffer(outQ, 1, 256);
  LocalTensor<half> t = outQ.AllocTensor<half>();
  for (int i = 0; i < 16; ++i) t.SetValue(i, half(float(i)));
  outQ.EnQue(t);
  t = outQ.DeQue<half>();
  DataCopy(g.y, t, 16);  // VIOLATION
  outQ.FreeTensor(t);
}

BAD(war_mte2_over_v) {
  Gm g(x, y);
  TPipe pipe;
  TBuf<TPosition::VECCALC> a, b;
  pipe.InitBuffer(a, 256);
  pipe.InitBuffer(b, 256);
  LocalTensor<half> ta = a.Get<half>();
  LocalTensor<half> tb = b.Get<half>();
  DataCopy(ta, g.x, 128);
  PipeBarrier<PIPE_ALL>();
  Abs(tb, ta, 128);
  DataCopy(ta, g.x[128], 128);  // VIOLATION
  PipeBarrier<PIPE_ALL>();
}

BAD(wait_without_set) {
  WaitFlag<HardEvent::V_S>(EVENT_ID1);  // VIOLATION
}

BAD(flag_never_waited) {
  SetFlag<HardEvent::MTE2_V>(EVENT_ID3);  // VIOLATION
}

BAD(barrier_s) {
  PipeBarrier<PIPE_S>();  // VIOLATION
}

BAD(reduce_work_small) {
  TPipe pipe;
  TBuf<TPosition::VECCALC> src, work, dst;
  pipe.InitBuffer(src, 2048 * sizeof(half));
  pipe.InitBuffer(work, 16 * sizeof(half));
  pipe.InitBuffer(dst, 32);
  LocalTensor<half> s = src.Get<half>();
  Duplicate(s, half(1.0f), 2048);
  LocalTensor<half> w = work.Get<half>();
  LocalTensor<half> d = dst.Get<half>();
  ReduceMax(d, s, w, 2048);  // VIOLATION
}

BAD(cast_mode) {
  TPipe pipe;
  TBuf<TPosition::VECCALC> a, b;
  pipe.InitBuffer(a, 256 * sizeof(float));
  pipe.InitBuffer(b, 256 * sizeof(bfloat16_t));
  LocalTensor<float> f = a.Get<float>();
  LocalTensor<bfloat16_t> h = b.Get<bfloat16_t>();
  Duplicate(f, 1.0f, 256);
  Cast(h, f, RoundMode::CAST_NONE, 256);  // VIOLATION
}

BAD(compare_count) {
  TPipe pipe;
  TBuf<TPosition::VECCALC> a, m;
  pipe.InitBuffer(a, 256 * sizeof(float));
  pipe.InitBuffer(m, 32);
  LocalTensor<float> f = a.Get<float>();
  LocalTensor<uint8_t> mask = m.Get<uint8_t>();
  Duplicate(f, 1.0f, 256);
  Compare(mask, f, f, CMPMODE::EQ, 100);  // VIOLATION
}

BAD(partial_overlap) {
  TPipe pipe;
  TBuf<TPosition::VECCALC> a;
  pipe.InitBuffer(a, 1024);
  LocalTensor<half> t = a.Get<half>();
  Duplicate(t, half(1.0f), 512);
  Add(t[16], t, t, 256);  // VIOLATION
}

BAD(select_scratch) {
  TPipe pipe;
  TBuf<TPosition::VECCALC> big, m;
  pipe.InitBuffer(big, 190 * 1024);
  pipe.InitBuffer(m, 32);
  LocalTensor<float> f = big.Get<float>();
  LocalTensor<uint8_t> mask = m.Get<uint8_t>();
  Duplicate(f, 1.0f, 512);
  Duplicate(mask.ReinterpretCast<uint16_t>(), uint16_t(0xFFFF), 16);
  Select(f[256], mask, f, f[128], SELMODE::VSEL_TENSOR_TENSOR_MODE, 64);  // VIOLATION
}

BAD(gm_beyond_tensor) {
  Gm g(x, y);
  TPipe pipe;
  TBuf<TPosition::VECCALC> a;
  pipe.InitBuffer(a, 4096);
  LocalTensor<half> t = a.Get<half>();
  DataCopy(t, g.x[1008], 32);  // VIOLATION
}

BAD(gm_beyond_buffer) {
  GlobalTensor<half> yg;
  yg.SetGlobalBuffer((__gm__ half*)y);
  TPipe pipe;
  TBuf<TPosition::VECCALC> a;
  pipe.InitBuffer(a, 4096);
  LocalTensor<half> t = a.Get<half>();
  Duplicate(t, half(0.0f), 2048);
  PipeBarrier<PIPE_ALL>();
  DataCopy(yg, t, 2048);  // VIOLATION
}

BAD(cross_core_race) {
  Gm g(x, y);
  TPipe pipe;
  TQue<TPosition::VECOUT, 1> outQ;
  pipe.InitBuffer(outQ, 1, 256);
  LocalTensor<half> t = outQ.AllocTensor<half>();
  Duplicate(t, half(float(GetBlockIdx())), 128);
  outQ.EnQue(t);
  t = outQ.DeQue<half>();
  DataCopy(g.y[GetBlockIdx() * 64], t, 128);  // blocks overlap by 64 elements
  outQ.FreeTensor(t);
}

BAD(mte3_overlap_no_barrier) {
  Gm g(x, y);
  TPipe pipe;
  TQue<TPosition::VECOUT, 1> outQ;
  pipe.InitBuffer(outQ, 1, 256);
  LocalTensor<half> t = outQ.AllocTensor<half>();
  Duplicate(t, half(1.0f), 128);
  outQ.EnQue(t);
  t = outQ.DeQue<half>();
  DataCopy(g.y, t, 128);
  DataCopy(g.y[112], t, 16);  // VIOLATION
  outQ.FreeTensor(t);
}

BAD(vv_no_barrier) {  // only an error at strict level 2
  TPipe pipe;
  TBuf<TPosition::VECCALC> a;
  pipe.InitBuffer(a, 1024);
  LocalTensor<half> t = a.Get<half>();
  Duplicate(t, half(1.0f), 256);
  Exp(t[256], t, 256);  // VIOLATION
}

BAD(vv_with_barrier) {  // correct at every level
  TPipe pipe;
  TBuf<TPosition::VECCALC> a;
  pipe.InitBuffer(a, 1024);
  LocalTensor<half> t = a.Get<half>();
  Duplicate(t, half(1.0f), 256);
  PipeBarrier<PIPE_V>();
  Exp(t[256], t, 256);
}

BAD(reset_and_reuse) {  // correct: TPipe::Reset lets the queues take new buffers
  TPipe pipe;
  TQue<TPosition::VECIN, 1> inQ;
  pipe.InitBuffer(inQ, 1, 128 * 1024);
  LocalTensor<half> t = inQ.AllocTensor<half>();
  inQ.FreeTensor(t);
  pipe.Reset();
  pipe.InitBuffer(inQ, 1, 150 * 1024);
  t = inQ.AllocTensor<half>();
  inQ.FreeTensor(t);
}

BAD(second_pipe) {
  TPipe a;
  TPipe b;  // VIOLATION
}

BAD(uninitialised_tensor) {
  TPipe pipe;
  TBuf<TPosition::VECCALC> buf;
  pipe.InitBuffer(buf, 256);
  LocalTensor<half> t;
  Duplicate(t, half(1.0f), 16);  // VIOLATION
}

BAD(tensor_bounds) {
  TPipe pipe;
  TBuf<TPosition::VECCALC> buf;
  pipe.InitBuffer(buf, 256);
  LocalTensor<half> t = buf.Get<half>();
  Duplicate(t, half(1.0f), 129);  // VIOLATION
}

#define ENTRY(name) {#name, &bad_##name}

namespace {
struct Entry {
  const char* name;
  void (*kernel)(GM_ADDR, GM_ADDR);
};
const Entry ENTRIES[] = {
    ENTRY(ub_overflow),
    ENTRY(misaligned_count),
    ENTRY(misaligned_ub),
    ENTRY(deque_empty),
    ENTRY(double_free),
    ENTRY(leak),
    ENTRY(queue_not_empty),
    ENTRY(alloc_beyond_num),
    ENTRY(depth_overflow),
    ENTRY(use_after_free),
    ENTRY(use_while_queued),
    ENTRY(missing_v_s),
    ENTRY(missing_mte2_v),
    ENTRY(missing_v_mte3),
    ENTRY(missing_s_mte3),
    ENTRY(war_mte2_over_v),
    ENTRY(wait_without_set),
    ENTRY(flag_never_waited),
    ENTRY(barrier_s),
    ENTRY(reduce_work_small),
    ENTRY(cast_mode),
    ENTRY(compare_count),
    ENTRY(partial_overlap),
    ENTRY(select_scratch),
    ENTRY(gm_beyond_tensor),
    ENTRY(gm_beyond_buffer),
    ENTRY(cross_core_race),
    ENTRY(mte3_overlap_no_barrier),
    ENTRY(vv_no_barrier),
    ENTRY(vv_with_barrier),
    ENTRY(reset_and_reuse),
    ENTRY(second_pipe),
    ENTRY(uninitialised_tensor),
    ENTRY(tensor_bounds),
};
}  // namespace

// Launch bad_<name> on `blocks` blocks with 2 KiB buffers x and y declared; -1: no such kernel.
extern "C" int run_bad(const char* name, int32_t blocks) {
  static uint16_t x[1024], y[1024];
  for (const Entry& e : ENTRIES) {
    if (std::strcmp(e.name, name) != 0) continue;
    tilec_twin_register_gm(x, sizeof x, "x");
    tilec_twin_register_gm(y, sizeof y, "y");
    return tilec_twin::launch(e.name, blocks, e.kernel, x, y);
  }
  return -1;
}

extern "C" int bad_count(void) { return int(sizeof ENTRIES / sizeof ENTRIES[0]); }
extern "C" const char* bad_name(int i) { return ENTRIES[i].name; }
