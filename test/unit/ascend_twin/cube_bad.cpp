// Cube kernels that each break one rule, for the twin's negative tests.  Every kernel
// `cube_bad_<name>` takes (x, y): x holds 4096 readable halfs, y 4096 writable floats;
// run_cube_bad(name) launches it (on one AIC, unless the table below says otherwise).  The line
// of the violation is marked `// VIOLATION` so the test can check the message's location.
#include <cstring>

#include "kernel_operator.h"

using namespace AscendC;

#define BAD(name)                                                                   \
  extern "C" __global__ __aicore__ void cube_bad_##name([[maybe_unused]] GM_ADDR x, \
                                                        [[maybe_unused]] GM_ADDR y)

namespace {
// 16 x 16 halfs in A1, A2, B2 and a 16 x 16 float CO1, from x.
struct Cube {
  TPipe pipe;
  TQue<TPosition::A1, 1> a1q;
  TQue<TPosition::A2, 1> a2q;
  TQue<TPosition::B2, 1> b2q;
  TQue<TPosition::CO1, 1> coq;
  GlobalTensor<half> gx;
  GlobalTensor<float> gy;
  LocalTensor<half> a1, a2, b2;
  LocalTensor<float> co;
  Cube(GM_ADDR x, GM_ADDR y) {
    pipe.InitBuffer(a1q, 1, 1024);
    pipe.InitBuffer(a2q, 1, 1024);
    pipe.InitBuffer(b2q, 1, 1024);
    pipe.InitBuffer(coq, 1, 2048);
    gx.SetGlobalBuffer((__gm__ half*)x, 4096);
    gy.SetGlobalBuffer((__gm__ float*)y, 4096);
    a1 = a1q.AllocTensor<half>();
    DataCopy(a1, gx, Nd2NzParams(1, 16, 16, 0, 16, 16, 1, 0));
    a1q.EnQue(a1);
    a1 = a1q.DeQue<half>();
    a2 = a2q.AllocTensor<half>();
    b2 = b2q.AllocTensor<half>();
    co = coq.AllocTensor<float>();
  }
  void load() {
    LoadData(a2, a1, LoadData2DParams(0, 1, 1, 0, 0, false, 0));
    LoadData(b2, a1, LoadData2DParams(0, 1, 1, 0, 0, true, 0));
    a2q.EnQue(a2);
    b2q.EnQue(b2);
    a2 = a2q.DeQue<half>();
    b2 = b2q.DeQue<half>();
  }
  ~Cube() {
    a1q.FreeTensor(a1);
    a2q.FreeTensor(a2);
    b2q.FreeTensor(b2);
    coq.FreeTensor(co);
  }
};
MmadParams mmad16() {
  MmadParams p;
  p.m = 16;
  p.n = 16;
  p.k = 16;
  return p;
}
FixpipeParamsV220 fix16() {
  FixpipeParamsV220 p;
  p.nSize = 16;
  p.mSize = 16;
  p.srcStride = 16;
  p.dstStride = 16;
  return p;
}
}  // namespace

BAD(l1_overflow) {
  TPipe pipe;
  TQue<TPosition::A1, 2> q;
  TQue<TPosition::B1, 1> b;
  pipe.InitBuffer(q, 2, 200 * 1024);
  pipe.InitBuffer(b, 1, 200 * 1024);  // VIOLATION
}

BAD(l0a_overflow) {
  TPipe pipe;
  TQue<TPosition::A2, 2> q;
  pipe.InitBuffer(q, 2, 40000);  // VIOLATION
}

BAD(l0c_overflow) {
  TPipe pipe;
  TQue<TPosition::CO1, 1> q;
  pipe.InitBuffer(q, 1, 140000);  // VIOLATION
}

BAD(l0a_misaligned) {
  Cube c(x, y);
  LoadData(c.a2[16], c.a1, LoadData2DParams(0, 1, 1, 0, 0, false, 0));  // VIOLATION
}

BAD(mmad_wrong_position) {
  Cube c(x, y);
  c.load();
  Mmad(c.co, c.b2, c.a2, mmad16());  // VIOLATION
}

BAD(l0c_misaligned) {
  Cube c(x, y);
  c.load();
  Mmad(c.co[16], c.a2, c.b2, mmad16());  // VIOLATION
}

BAD(mmad_beyond_l0a) {
  Cube c(x, y);
  c.load();
  MmadParams p = mmad16();
  p.k = 48;
  Mmad(c.co, c.a2, c.b2, p);  // VIOLATION
}

BAD(ub_on_cube) {
  TPipe pipe;
  TQue<TPosition::VECIN, 1> q;
  pipe.InitBuffer(q, 1, 1024);  // VIOLATION
}

BAD(l1_on_vector) {
  TPipe pipe;
  TQue<TPosition::A1, 1> q;
  pipe.InitBuffer(q, 1, 1024);  // VIOLATION
}

BAD(missing_mte2_mte1) {
  TPipe pipe;
  TBuf<TPosition::A1> a1b;
  TBuf<TPosition::A2> a2b;
  pipe.InitBuffer(a1b, 1024);
  pipe.InitBuffer(a2b, 1024);
  GlobalTensor<half> gx;
  gx.SetGlobalBuffer((__gm__ half*)x, 4096);
  LocalTensor<half> a1 = a1b.Get<half>(), a2 = a2b.Get<half>();
  DataCopy(a1, gx, Nd2NzParams(1, 16, 16, 0, 16, 16, 1, 0));
  LoadData(a2, a1, LoadData2DParams(0, 1, 1, 0, 0, false, 0));  // VIOLATION
}

BAD(missing_m_fix) {
  Cube c(x, y);
  c.load();
  Mmad(c.co, c.a2, c.b2, mmad16());
  Fixpipe<float, float, CFG_ROW_MAJOR>(c.gy, c.co, fix16());  // VIOLATION
}

BAD(fixpipe_quant) {
  Cube c(x, y);
  c.load();
  Mmad(c.co, c.a2, c.b2, mmad16());
  c.coq.EnQue(c.co);
  c.co = c.coq.DeQue<float>();
  GlobalTensor<half> gh;
  gh.SetGlobalBuffer((__gm__ half*)y, 4096);
  Fixpipe<half, float, CFG_ROW_MAJOR>(gh, c.co, fix16());  // VIOLATION
}

BAD(nd2nz_range) {
  TPipe pipe;
  TQue<TPosition::A1, 1> q;
  pipe.InitBuffer(q, 1, 1024);
  GlobalTensor<half> gx;
  gx.SetGlobalBuffer((__gm__ half*)x, 4096);
  LocalTensor<half> a1 = q.AllocTensor<half>();
  DataCopy(a1, gx, Nd2NzParams(1, 16, 16, 0, 16, 0, 1, 0));  // VIOLATION
  q.FreeTensor(a1);
}

BAD(cross_flag_not_mix) {
  CrossCoreSetFlag<2, PIPE_FIX>(0);  // VIOLATION
}

BAD(cross_wait_hang) {
  if ASCEND_IS_AIC {
    CrossCoreSetFlag<2, PIPE_FIX>(0);
    return;
  }
  CrossCoreWaitFlag(0);
  CrossCoreWaitFlag(1);  // VIOLATION
}

BAD(cross_flag_overflow) {
  if ASCEND_IS_AIV return;
  for (int i = 0; i < 16; ++i) CrossCoreSetFlag<2, PIPE_FIX>(2);  // VIOLATION
}

BAD(late_kernel_type) {
  TPipe pipe;
  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIC_ONLY);  // VIOLATION
}

#define ENTRY(name) {#name, &cube_bad_##name}
namespace {
struct Entry {
  const char* name;
  void (*kernel)(GM_ADDR, GM_ADDR);
};
const Entry kEntries[] = {
    ENTRY(l1_overflow),    ENTRY(l0a_overflow),     ENTRY(l0c_overflow),
    ENTRY(l0a_misaligned), ENTRY(mmad_wrong_position), ENTRY(l0c_misaligned),
    ENTRY(mmad_beyond_l0a), ENTRY(ub_on_cube),      ENTRY(l1_on_vector),
    ENTRY(missing_mte2_mte1), ENTRY(missing_m_fix), ENTRY(fixpipe_quant),
    ENTRY(nd2nz_range),    ENTRY(cross_flag_not_mix), ENTRY(cross_wait_hang),
    ENTRY(cross_flag_overflow), ENTRY(late_kernel_type),
};
}  // namespace

// mode: 0 vector-only, 1 AIC-only, 2 mixed
extern "C" int run_cube_bad(const char* name, int mode, void* x, void* y) {
  for (const Entry& e : kEntries) {
    if (std::strcmp(e.name, name) != 0) continue;
    const auto m = mode == 0   ? tilec_twin::LAUNCH_VECTOR
                   : mode == 1 ? tilec_twin::LAUNCH_AIC
                               : tilec_twin::LAUNCH_MIX;
    tilec_twin_register_gm(x, 4096 * 2, "x");
    tilec_twin_register_gm(y, 4096 * 4, "y");
    return tilec_twin::launch_as(m, e.name, 1, e.kernel, x, y);
  }
  return -1;
}
