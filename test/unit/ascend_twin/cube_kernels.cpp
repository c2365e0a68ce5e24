// Cube kernels for the twin's tests: the layout and parameter examples of the API pages
// (DataCopy GM->L1 ND2NZ, LoadData 2D), a GEMM through GM -> L1 -> L0A/L0B -> Mmad -> Fixpipe,
// the same with its epilogue on the two vector cores of a mixed kernel; the mixed kernel can
// break one rule (the one read here without its flag wait is marked with a VIOLATION comment).
#include <cstring>

#include "kernel_operator.h"

using namespace AscendC;

namespace {
uint32_t ceil16(uint32_t v) { return (v + 15) / 16 * 16; }
uint32_t ceil_div(uint32_t a, uint32_t b) { return (a + b - 1) / b; }

struct Case {
  Nd2NzParams nd;
  LoadData2DParams ld;
  uint32_t l1_bytes, l0_bytes;
  uint32_t m, n, k;
  bool trans_b;
  bool gemv;  // Mmad with m = 1 as it is (else rounded up to 16: see gemm_kernel)
  int out;  // 0 float, 1 half, 2 bfloat16_t
};
Case g_case;  // read by the cores of a mixed block, which run on threads of their own
}  // namespace

// ND2NZ into L1; `out` receives the L1 tensor's bytes.
extern "C" __global__ __aicore__ void nd2nz_case(GM_ADDR x, GM_ADDR out) {
  TPipe pipe;
  TQue<TPosition::A1, 1> q;
  pipe.InitBuffer(q, 1, g_case.l1_bytes);
  GlobalTensor<half> gx;
  gx.SetGlobalBuffer((__gm__ half*)x);
  LocalTensor<half> t = q.AllocTensor<half>();
  DataCopy(t, gx, g_case.nd);
  q.EnQue(t);
  t = q.DeQue<half>();
  tilec_twin::peek(t, (half*)out, g_case.l1_bytes / 2);
  q.FreeTensor(t);
}

// L1 (filled with 0, 1, 2, ... from x by ND2NZ of one row) -> L0A by LoadData; `out`: L0A.
template <typename T>
void load_case(GM_ADDR x, GM_ADDR out) {
  TPipe pipe;
  TQue<TPosition::A1, 1> q1;
  TQue<TPosition::A2, 1> q2;
  pipe.InitBuffer(q1, 1, g_case.l1_bytes);
  pipe.InitBuffer(q2, 1, g_case.l0_bytes);
  GlobalTensor<T> gx;
  gx.SetGlobalBuffer((__gm__ T*)x);
  LocalTensor<T> a1 = q1.AllocTensor<T>();
  const uint32_t n = g_case.l1_bytes / sizeof(T);
  DataCopy(a1, gx, Nd2NzParams(1, 1, uint16_t(n), 0, uint16_t(n), 1, 1, 0));  // one row: as is
  q1.EnQue(a1);
  a1 = q1.DeQue<T>();
  LocalTensor<T> a2 = q2.AllocTensor<T>();
  LoadData(a2, a1, g_case.ld);
  q2.EnQue(a2);
  a2 = q2.DeQue<T>();
  tilec_twin::peek(a2, (T*)out, g_case.l0_bytes / sizeof(T));
  q1.FreeTensor(a1);
  q2.FreeTensor(a2);
}
extern "C" __global__ __aicore__ void load_case_half(GM_ADDR x, GM_ADDR out) { load_case<half>(x, out); }
extern "C" __global__ __aicore__ void load_case_float(GM_ADDR x, GM_ADDR out) { load_case<float>(x, out); }

namespace {
// C [m, n] = A [m, k] x B ([k, n], or [n, k] when trans_b) in one tile, the flow of the
// asc-devkit matrix examples: ND2NZ into A1/B1, LoadData into A2/B2, Mmad, Fixpipe NZ2ND.
template <typename T, typename O>
void cube_gemm(GM_ADDR a, GM_ADDR b, GM_ADDR c) {
  const Case& p = g_case;
  const uint32_t c0 = 32 / sizeof(T), frac = 512 / sizeof(T);
  const uint32_t m16 = ceil16(p.m), n16 = ceil16(p.n), m1 = m16 / 16, n1 = n16 / 16;
  const uint32_t k1 = ceil_div(p.k, c0), kc = k1 * c0;  // K in fractals of c0 columns
  TPipe pipe;
  TQue<TPosition::A1, 1> qa1;
  TQue<TPosition::B1, 1> qb1;
  TQue<TPosition::A2, 1> qa2;
  TQue<TPosition::B2, 1> qb2;
  TQue<TPosition::CO1, 1> qc;
  pipe.InitBuffer(qa1, 1, m16 * kc * sizeof(T));
  pipe.InitBuffer(qb1, 1, ceil16(p.k) * n16 * sizeof(T));
  pipe.InitBuffer(qa2, 1, m16 * kc * sizeof(T));
  pipe.InitBuffer(qb2, 1, ceil16(p.k) * n16 * sizeof(T));
  pipe.InitBuffer(qc, 1, m16 * n16 * sizeof(float));
  GlobalTensor<T> ga, gb;
  GlobalTensor<O> gc;
  ga.SetGlobalBuffer((__gm__ T*)a, p.m * p.k);
  gb.SetGlobalBuffer((__gm__ T*)b, p.k * p.n);
  gc.SetGlobalBuffer((__gm__ O*)c, p.m * p.n);
  LocalTensor<T> a1 = qa1.AllocTensor<T>(), b1 = qb1.AllocTensor<T>();
  DataCopy(a1, ga, Nd2NzParams(1, p.m, p.k, 0, p.k, m16, 1, 0));
  if (p.trans_b)  // B stored [n, k]: its NZ fractals are L0B's ZN fractals as they are
    DataCopy(b1, gb, Nd2NzParams(1, p.n, p.k, 0, p.k, n16, 1, 0));
  else
    DataCopy(b1, gb, Nd2NzParams(1, p.k, p.n, 0, p.n, ceil16(p.k), 1, 0));
  qa1.EnQue(a1);
  qb1.EnQue(b1);
  a1 = qa1.DeQue<T>();
  b1 = qb1.DeQue<T>();
  LocalTensor<T> a2 = qa2.AllocTensor<T>(), b2 = qb2.AllocTensor<T>();
  for (uint32_t i = 0; i < m1; ++i)  // NZ -> ZZ: m-block i, its k fractals m1 apart
    LoadData(a2[i * k1 * frac], a1[i * frac], LoadData2DParams(0, k1, m1, 0, 0, false, 0));
  if (p.trans_b) {
    for (uint32_t i = 0; i < k1; ++i)
      LoadData(b2[i * n1 * frac], b1[i * n1 * frac], LoadData2DParams(0, n1, 1, 0, 0, false, 0));
  } else {
    const uint32_t kb = ceil16(p.k) / 16;  // 16 x 16 fractals, each transposed
    for (uint32_t i = 0; i < kb; ++i)
      LoadData(b2[i * n1 * frac], b1[i * frac], LoadData2DParams(0, n1, kb, 0, 0, true, 0));
  }
  qa2.EnQue(a2);
  qb2.EnQue(b2);
  a2 = qa2.DeQue<T>();
  b2 = qb2.DeQue<T>();
  LocalTensor<float> co = qc.AllocTensor<float>();
  MmadParams mp;
  // m = 1 turns the Cube to GEMV, which reads L0A as ND (Mmad page, constraints): the ZZ
  // fractal's other rows are computed instead, and never written out
  mp.m = p.m == 1 && !p.gemv ? 16 : p.m;
  mp.n = p.n;
  mp.k = p.k;
  Mmad(co, a2, b2, mp);
  qc.EnQue(co);
  co = qc.DeQue<float>();
  FixpipeParamsV220 fp;
  fp.nSize = p.n;
  fp.mSize = p.m;
  fp.srcStride = m16;
  fp.dstStride = p.n;
  fp.quantPre = std::is_same_v<O, half>         ? QuantMode_t::F322F16
                : std::is_same_v<O, bfloat16_t> ? QuantMode_t::F322BF16
                                                : QuantMode_t::NoQuant;
  Fixpipe<O, float, CFG_ROW_MAJOR>(gc, co, fp);
  qa1.FreeTensor(a1);
  qb1.FreeTensor(b1);
  qa2.FreeTensor(a2);
  qb2.FreeTensor(b2);
  qc.FreeTensor(co);
}
}  // namespace

extern "C" __global__ __aicore__ void gemm_half(GM_ADDR a, GM_ADDR b, GM_ADDR c) {
  if (g_case.out == 1) cube_gemm<half, half>(a, b, c);
  else cube_gemm<half, float>(a, b, c);
}
extern "C" __global__ __aicore__ void gemm_bf16(GM_ADDR a, GM_ADDR b, GM_ADDR c) {
  cube_gemm<bfloat16_t, bfloat16_t>(a, b, c);
}
extern "C" __global__ __aicore__ void gemm_float(GM_ADDR a, GM_ADDR b, GM_ADDR c) {
  cube_gemm<float, float>(a, b, c);
}

// Mixed: the AIC computes C (float) into the workspace and sets flag 0 on PIPE_FIX; each AIV
// waits for it and writes relu(C) as half for its half of the rows.  `wait` = false drops the
// AIVs' wait (a missing flag wait).
template <bool wait>
void mix_relu(GM_ADDR a, GM_ADDR b, GM_ADDR ws, GM_ADDR out) {
  const Case& p = g_case;
  if ASCEND_IS_AIC {
    cube_gemm<half, float>(a, b, ws);
    CrossCoreSetFlag<2, PIPE_FIX>(0);
    return;
  }
  if (wait) CrossCoreWaitFlag(0);
  const uint32_t rows = (p.m + 1) / 2, first = uint32_t(GetSubBlockIdx()) * rows;
  const uint32_t mine = first >= p.m ? 0 : (p.m - first < rows ? p.m - first : rows);
  if (mine == 0) return;
  TPipe pipe;
  TBuf<TPosition::VECCALC> buf;
  // float rows 64-byte aligned, so that their half casts are 32-byte aligned rows
  const uint32_t row32 = (p.n * 4 + 63) / 64 * 64, gap = (row32 - (p.n * 4 + 31) / 32 * 32) / 32;
  pipe.InitBuffer(buf, 2 * row32 * mine);
  LocalTensor<float> x = buf.Get<float>();
  LocalTensor<half> y = x[row32 * mine / 4].ReinterpretCast<half>();
  GlobalTensor<float> gw;
  GlobalTensor<half> go;
  gw.SetGlobalBuffer((__gm__ float*)ws + first * p.n, mine * p.n);
  go.SetGlobalBuffer((__gm__ half*)out + first * p.n, mine * p.n);
  const DataCopyPadExtParams<float> pad(false, 0, 0, 0.0f);
  DataCopyPad(x, gw, DataCopyExtParams(uint16_t(mine), p.n * 4, 0, gap, 0), pad);  // VIOLATION
  SetFlag<HardEvent::MTE2_V>(0);
  WaitFlag<HardEvent::MTE2_V>(0);
  const uint32_t count = row32 / 4 * mine;
  Relu(x, x, count);
  Cast(y, x, RoundMode::CAST_RINT, count);
  SetFlag<HardEvent::V_MTE3>(0);
  WaitFlag<HardEvent::V_MTE3>(0);
  DataCopyPad(go, y, DataCopyExtParams(uint16_t(mine), p.n * 2, 0, 0, 0));
}
extern "C" __global__ __mix__(1, 2) void mix_relu_ok(GM_ADDR a, GM_ADDR b, GM_ADDR ws, GM_ADDR out) {
  mix_relu<true>(a, b, ws, out);
}
extern "C" __global__ __mix__(1, 2) void mix_relu_nowait(GM_ADDR a, GM_ADDR b, GM_ADDR ws,
                                                         GM_ADDR out) {
  mix_relu<false>(a, b, ws, out);
}

// The same, declaring its type by its first statement (launched as a vector kernel).
extern "C" __global__ __aicore__ void mix_relu_declared(GM_ADDR a, GM_ADDR b, GM_ADDR ws,
                                                        GM_ADDR out) {
  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
  mix_relu<true>(a, b, ws, out);
}

// Block indices as the GetBlockIdx page gives them: AIC 0..blockDim-1, AIV 0..2*blockDim-1.
// ids[2 * i] and ids[2 * i + 1] of the AIC of block i, ids[64 + 2 * i ...] of AIV i.
extern "C" __global__ __mix__(1, 2) void mix_ids(GM_ADDR ids) {
  int32_t* out = (int32_t*)ids + (ASCEND_IS_AIC ? 0 : 64) + 2 * GetBlockIdx();
  out[0] = int32_t(GetBlockNum() * 100 + GetTaskRatio());
  out[1] = int32_t(GetSubBlockIdx());
}

extern "C" int run_nd2nz(const uint16_t* prm, uint32_t l1_bytes, const void* x, void* out) {
  g_case = Case{};
  g_case.nd = Nd2NzParams(prm[0], prm[1], prm[2], prm[3], prm[4], prm[5], prm[6], prm[7]);
  g_case.l1_bytes = l1_bytes;
  return ASCEND_TWIN_LAUNCH_AIC(nd2nz_case, 1, nullptr, x, out);
}

extern "C" int run_load(int is_float, const uint16_t* prm, uint32_t l1_bytes, uint32_t l0_bytes,
                        const void* x, void* out) {
  g_case = Case{};
  g_case.ld = LoadData2DParams(prm[0], uint8_t(prm[1]), prm[2], 0, prm[3], prm[4] != 0, 0);
  g_case.l1_bytes = l1_bytes;
  g_case.l0_bytes = l0_bytes;
  if (is_float) return ASCEND_TWIN_LAUNCH_AIC(load_case_float, 1, nullptr, x, out);
  return ASCEND_TWIN_LAUNCH_AIC(load_case_half, 1, nullptr, x, out);
}

extern "C" int run_gemm(int kind, int out, uint32_t m, uint32_t n, uint32_t k, int trans_b,
                        const void* a, const void* b, void* c) {
  g_case = Case{};
  g_case.m = m;
  g_case.n = n;
  g_case.k = k;
  g_case.trans_b = (trans_b & 1) != 0;
  g_case.gemv = (trans_b & 2) != 0;
  g_case.out = out;
  if (kind == 0) return ASCEND_TWIN_LAUNCH_AIC(gemm_half, 1, nullptr, a, b, c);
  if (kind == 1) return ASCEND_TWIN_LAUNCH_AIC(gemm_bf16, 1, nullptr, a, b, c);
  return ASCEND_TWIN_LAUNCH_AIC(gemm_float, 1, nullptr, a, b, c);
}

extern "C" int run_mix_relu(int wait, uint32_t m, uint32_t n, uint32_t k, const void* a,
                            const void* b, void* ws, void* out) {
  g_case = Case{};
  g_case.m = m;
  g_case.n = n;
  g_case.k = k;
  tilec_twin_register_gm(a, uint64_t(m) * k * 2, "a");
  tilec_twin_register_gm(b, uint64_t(k) * n * 2, "b");
  tilec_twin_register_gm(ws, uint64_t(m) * n * 4, "ws");
  tilec_twin_register_gm(out, uint64_t(m) * n * 2, "out");
  if (wait == 2) return ASCEND_TWIN_LAUNCH(mix_relu_declared, 1, nullptr, a, b, ws, out);
  if (wait) return ASCEND_TWIN_LAUNCH_MIX(mix_relu_ok, 1, nullptr, a, b, ws, out);
  return ASCEND_TWIN_LAUNCH_MIX(mix_relu_nowait, 1, nullptr, a, b, ws, out);
}

extern "C" int run_mix_ids(int blocks, void* ids) {
  return ASCEND_TWIN_LAUNCH_MIX(mix_ids, blocks, nullptr, ids);
}
