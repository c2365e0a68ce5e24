// Correct Ascend C vector kernels for the twin's tests, written the way tilec generates them,
// with extern "C" host entries that test_ascend_twin.py calls through ctypes.
#include "kernel_operator.h"

using namespace AscendC;

namespace {

constexpr int32_t BUFFER_NUM = 2;

template <typename T>
__aicore__ inline T min_of(T a, T b) {
  return a < b ? a : b;
}

// ---------------------------------------------------------------------------------------------
// y = x * sigmoid(x) on half, computed in float: queues of depth 2 (double buffering), a
// DataCopyPad for the unaligned tail of each block.

struct SiluTiling {
  int64_t n;
  int64_t perBlock;  // elements per block, a multiple of 16
  int32_t tile;      // elements per tile, a multiple of 16
  int32_t reserved;
};

class KernelSilu {
 public:
  __aicore__ inline void Init(GM_ADDR x, GM_ADDR y, const SiluTiling& t) {
    tile_ = t.tile;
    const int64_t start = GetBlockIdx() * t.perBlock;
    len_ = start >= t.n ? 0 : min_of(t.perBlock, t.n - start);
    if (len_ == 0) return;
    xGm_.SetGlobalBuffer((__gm__ half*)x + start, len_);
    yGm_.SetGlobalBuffer((__gm__ half*)y + start, len_);
    pipe_.InitBuffer(inQ_, BUFFER_NUM, tile_ * sizeof(half));
    pipe_.InitBuffer(outQ_, BUFFER_NUM, tile_ * sizeof(half));
    pipe_.InitBuffer(xf_, tile_ * sizeof(float));
    pipe_.InitBuffer(sig_, tile_ * sizeof(float));
  }
  __aicore__ inline void Process() {
    for (int64_t off = 0; off < len_; off += tile_) {
      const int32_t count = int32_t(min_of<int64_t>(tile_, len_ - off));
      CopyIn(off, count);
      Compute(count);
      CopyOut(off, count);
    }
  }

 private:
  __aicore__ inline void CopyIn(int64_t off, int32_t count) {
    LocalTensor<half> x = inQ_.AllocTensor<half>();
    if (count % 16 == 0) {
      DataCopy(x, xGm_[off], count);
    } else {
      DataCopyExtParams copy{1, uint32_t(count * sizeof(half)), 0, 0, 0};
      DataCopyPadExtParams<half> pad{false, 0, 0, half(0)};
      DataCopyPad(x, xGm_[off], copy, pad);
    }
    inQ_.EnQue(x);
  }
  __aicore__ inline void Compute(int32_t count) {
    LocalTensor<half> x = inQ_.DeQue<half>();
    LocalTensor<half> y = outQ_.AllocTensor<half>();
    LocalTensor<float> xf = xf_.Get<float>();
    LocalTensor<float> s = sig_.Get<float>();
    Cast(xf, x, RoundMode::CAST_NONE, count);
    Muls(s, xf, -1.0f, count);
    Exp(s, s, count);
    Adds(s, s, 1.0f, count);
    Reciprocal(s, s, count);
    Mul(s, xf, s, count);
    Cast(y, s, RoundMode::CAST_RINT, count);
    outQ_.EnQue(y);
    inQ_.FreeTensor(x);
  }
  __aicore__ inline void CopyOut(int64_t off, int32_t count) {
    LocalTensor<half> y = outQ_.DeQue<half>();
    if (count % 16 == 0) {
      DataCopy(yGm_[off], y, count);
    } else {
      DataCopyPad(yGm_[off], y, DataCopyExtParams{1, uint32_t(count * sizeof(half)), 0, 0, 0});
    }
    outQ_.FreeTensor(y);
  }

  TPipe pipe_;
  TQue<TPosition::VECIN, BUFFER_NUM> inQ_;
  TQue<TPosition::VECOUT, BUFFER_NUM> outQ_;
  TBuf<TPosition::VECCALC> xf_, sig_;
  GlobalTensor<half> xGm_, yGm_;
  int64_t len_ = 0;
  int32_t tile_ = 0;
};

// ---------------------------------------------------------------------------------------------
// Row sums and maxima of a float matrix: ReduceSum / ReduceMax with documented work buffers,
// the V->S flag before reading the results, S->MTE3 before copying scalar-written results out.

struct RowTiling {
  int32_t rows;
  int32_t cols;
  int32_t rowsPerBlock;
  int32_t reserved;
};

constexpr int32_t align8(int32_t v) { return (v + 7) / 8 * 8; }

class KernelRowReduce {
 public:
  __aicore__ inline void Init(GM_ADDR x, GM_ADDR sum, GM_ADDR max, const RowTiling& t) {
    cols_ = t.cols;
    row0_ = int32_t(GetBlockIdx()) * t.rowsPerBlock;
    rows_ = row0_ >= t.rows ? 0 : min_of(t.rowsPerBlock, t.rows - row0_);
    if (rows_ == 0) return;
    xGm_.SetGlobalBuffer((__gm__ float*)x, int64_t(t.rows) * t.cols);
    sumGm_.SetGlobalBuffer((__gm__ float*)sum, t.rows);
    maxGm_.SetGlobalBuffer((__gm__ float*)max, t.rows);
    const int32_t colsAligned = align8(cols_);
    pipe_.InitBuffer(inQ_, BUFFER_NUM, colsAligned * sizeof(float));
    pipe_.InitBuffer(outQ_, 1, 2 * align8(rows_) * sizeof(float));
    // ReduceSum needs ceil(cols / 64) rounded up to 8 floats; ReduceMax twice that.
    const int32_t repeats = (cols_ + 63) / 64;
    pipe_.InitBuffer(work_, align8(2 * repeats) * sizeof(float));
    pipe_.InitBuffer(res_, 8 * sizeof(float));
  }
  __aicore__ inline void Process() {
    if (rows_ == 0) return;
    const int32_t rowsAligned = align8(rows_);
    LocalTensor<float> out = outQ_.AllocTensor<float>();
    LocalTensor<float> work = work_.Get<float>();
    LocalTensor<float> res = res_.Get<float>();
    for (int32_t r = 0; r < rows_; ++r) {
      LocalTensor<float> x = inQ_.AllocTensor<float>();
      DataCopyExtParams copy{1, uint32_t(cols_ * sizeof(float)), 0, 0, 0};
      DataCopyPadExtParams<float> pad{true, 0, uint8_t(align8(cols_) - cols_), 0.0f};
      DataCopyPad(x, xGm_[int64_t(row0_ + r) * cols_], copy, pad);
      inQ_.EnQue(x);
      x = inQ_.DeQue<float>();
      ReduceSum(res, x, work, cols_);
      ReduceMax(res[2], x, work, cols_);
      SetFlag<HardEvent::V_S>(EVENT_ID0);
      WaitFlag<HardEvent::V_S>(EVENT_ID0);
      out.SetValue(r, res.GetValue(0));
      out.SetValue(rowsAligned + r, res.GetValue(2));
      inQ_.FreeTensor(x);
    }
    SetFlag<HardEvent::S_MTE3>(EVENT_ID0);
    WaitFlag<HardEvent::S_MTE3>(EVENT_ID0);
    outQ_.EnQue(out);
    out = outQ_.DeQue<float>();
    DataCopyExtParams copy{1, uint32_t(rows_ * sizeof(float)), 0, 0, 0};
    DataCopyPad(sumGm_[row0_], out, copy);
    DataCopyPad(maxGm_[row0_], out[rowsAligned], copy);
    outQ_.FreeTensor(out);
  }

 private:
  TPipe pipe_;
  TQue<TPosition::VECIN, BUFFER_NUM> inQ_;
  TQue<TPosition::VECOUT, 1> outQ_;
  TBuf<TPosition::VECCALC> work_, res_;
  GlobalTensor<float> xGm_, sumGm_, maxGm_;
  int32_t cols_ = 0, row0_ = 0, rows_ = 0;
};

// ---------------------------------------------------------------------------------------------
// Every level-2 vector op once, on 256 elements of T, through TBufs and explicit flags.
// Output row k of `out` is op k (see OPS in the test); `mask` receives Compare's LT mask.

constexpr int32_t OPS_N = 256;
constexpr int32_t OPS_COUNT = 20;

template <typename T>
__aicore__ inline void OpsKernel(GM_ADDR a, GM_ADDR b, GM_ADDR out, GM_ADDR mask) {
  TPipe pipe;
  TBuf<TPosition::VECCALC> inBuf, outBuf, maskBuf, tmpBuf;
  pipe.InitBuffer(inBuf, 2 * OPS_N * sizeof(T));
  pipe.InitBuffer(outBuf, OPS_COUNT * OPS_N * sizeof(T));
  pipe.InitBuffer(maskBuf, OPS_N / 8);
  pipe.InitBuffer(tmpBuf, OPS_N * sizeof(T));
  GlobalTensor<T> aGm, bGm, outGm;
  GlobalTensor<uint8_t> maskGm;
  aGm.SetGlobalBuffer((__gm__ T*)a, OPS_N);
  bGm.SetGlobalBuffer((__gm__ T*)b, OPS_N);
  outGm.SetGlobalBuffer((__gm__ T*)out, OPS_COUNT * OPS_N);
  maskGm.SetGlobalBuffer((__gm__ uint8_t*)mask, OPS_N / 8);

  LocalTensor<T> x = inBuf.Get<T>();
  LocalTensor<T> y = x[OPS_N];
  LocalTensor<T> o = outBuf.Get<T>();
  LocalTensor<T> t = tmpBuf.Get<T>();
  LocalTensor<uint8_t> m = maskBuf.Get<uint8_t>();
  DataCopy(x, aGm, OPS_N);
  DataCopy(y, bGm, OPS_N);
  SetFlag<HardEvent::MTE2_V>(EVENT_ID0);
  WaitFlag<HardEvent::MTE2_V>(EVENT_ID0);

  const int32_t n = OPS_N;
  Add(o[0 * n], x, y, n);
  Sub(o[1 * n], x, y, n);
  Mul(o[2 * n], x, y, n);
  Div(o[3 * n], x, y, n);
  Max(o[4 * n], x, y, n);
  Min(o[5 * n], x, y, n);
  Adds(o[6 * n], x, T(1.5f), n);
  Muls(o[7 * n], x, T(-2.0f), n);
  Maxs(o[8 * n], x, T(0.25f), n);
  Mins(o[9 * n], x, T(0.25f), n);
  Exp(o[10 * n], x, n);
  Abs(t, x, n);
  Ln(o[11 * n], t, n);
  Abs(o[12 * n], x, n);
  Sqrt(o[13 * n], t, n);
  Rsqrt(o[14 * n], t, n);
  Reciprocal(o[15 * n], x, n);
  Relu(o[16 * n], x, n);
  Compare(m, x, y, CMPMODE::LT, n);
  Select(o[17 * n], m, x, y, SELMODE::VSEL_TENSOR_TENSOR_MODE, n);
  Select(o[18 * n], m, x, T(3.0f), SELMODE::VSEL_TENSOR_SCALAR_MODE, n);
  Duplicate(o[19 * n], T(7.0f), n);

  SetFlag<HardEvent::V_MTE3>(EVENT_ID0);
  WaitFlag<HardEvent::V_MTE3>(EVENT_ID0);
  DataCopy(outGm, o, OPS_COUNT * n);
  DataCopy(maskGm, m, n / 8);
}

// ---------------------------------------------------------------------------------------------
// Casts from float under every RoundMode each pair supports, and half -> int32 / int32 ->
// float.  Rows: half[6] (RINT FLOOR CEIL ROUND TRUNC ODD), int32[5], bf16[5], float[5]
// (RINT FLOOR CEIL ROUND TRUNC), then half->float->... checks in the test.

constexpr int32_t CAST_N = 256;
constexpr RoundMode MODES[] = {RoundMode::CAST_RINT,  RoundMode::CAST_FLOOR, RoundMode::CAST_CEIL,
                               RoundMode::CAST_ROUND, RoundMode::CAST_TRUNC, RoundMode::CAST_ODD};

__aicore__ inline void CastKernel(GM_ADDR x, GM_ADDR h, GM_ADDR i, GM_ADDR b, GM_ADDR f,
                                  GM_ADDR hi) {
  TPipe pipe;
  TBuf<TPosition::VECCALC> xb, hb, ib, bb, fb, hib;
  pipe.InitBuffer(xb, CAST_N * sizeof(float));
  pipe.InitBuffer(hb, 6 * CAST_N * sizeof(half));
  pipe.InitBuffer(ib, 5 * CAST_N * sizeof(int32_t));
  pipe.InitBuffer(bb, 5 * CAST_N * sizeof(bfloat16_t));
  pipe.InitBuffer(fb, 6 * CAST_N * sizeof(float));
  pipe.InitBuffer(hib, CAST_N * sizeof(int32_t));
  GlobalTensor<float> xGm, fGm;
  GlobalTensor<half> hGm;
  GlobalTensor<int32_t> iGm, hiGm;
  GlobalTensor<bfloat16_t> bGm;
  xGm.SetGlobalBuffer((__gm__ float*)x, CAST_N);
  hGm.SetGlobalBuffer((__gm__ half*)h, 6 * CAST_N);
  iGm.SetGlobalBuffer((__gm__ int32_t*)i, 5 * CAST_N);
  bGm.SetGlobalBuffer((__gm__ bfloat16_t*)b, 5 * CAST_N);
  fGm.SetGlobalBuffer((__gm__ float*)f, 6 * CAST_N);
  hiGm.SetGlobalBuffer((__gm__ int32_t*)hi, CAST_N);

  LocalTensor<float> xl = xb.Get<float>();
  LocalTensor<half> hl = hb.Get<half>();
  LocalTensor<int32_t> il = ib.Get<int32_t>();
  LocalTensor<bfloat16_t> bl = bb.Get<bfloat16_t>();
  LocalTensor<float> fl = fb.Get<float>();
  LocalTensor<int32_t> hil = hib.Get<int32_t>();
  DataCopy(xl, xGm, CAST_N);
  PipeBarrier<PIPE_ALL>();
  for (int k = 0; k < 6; ++k) Cast(hl[k * CAST_N], xl, MODES[k], CAST_N);
  for (int k = 0; k < 5; ++k) {
    Cast(il[k * CAST_N], xl, MODES[k], CAST_N);
    Cast(bl[k * CAST_N], xl, MODES[k], CAST_N);
    Cast(fl[k * CAST_N], xl, MODES[k], CAST_N);
  }
  // int32 (the RINT row) -> float with TRUNC, half (the RINT row) -> int32 with ROUND.
  Cast(fl[5 * CAST_N], il, RoundMode::CAST_TRUNC, CAST_N);
  Cast(hil, hl, RoundMode::CAST_ROUND, CAST_N);
  PipeBarrier<PIPE_ALL>();
  DataCopy(hGm, hl, 6 * CAST_N);
  DataCopy(iGm, il, 5 * CAST_N);
  DataCopy(bGm, bl, 5 * CAST_N);
  DataCopy(fGm, fl, 6 * CAST_N);
  DataCopy(hiGm, hil, CAST_N);
}

// ---------------------------------------------------------------------------------------------
// ReduceSum, ReduceMax and ReduceMin (with indices) of n <= 4096 halfs: out = [sum, max,
// max index bits, min, min index bits].

__aicore__ inline void ReduceHalfKernel(GM_ADDR x, GM_ADDR out, int32_t n) {
  TPipe pipe;
  TBuf<TPosition::VECCALC> src, work, res;
  pipe.InitBuffer(src, 4096 * sizeof(half));
  pipe.InitBuffer(work, 1024 * sizeof(half));
  pipe.InitBuffer(res, 16 * sizeof(half));
  GlobalTensor<half> xGm, outGm;
  xGm.SetGlobalBuffer((__gm__ half*)x, n);
  outGm.SetGlobalBuffer((__gm__ half*)out, 5);
  LocalTensor<half> s = src.Get<half>();
  LocalTensor<half> w = work.Get<half>();
  LocalTensor<half> r = res.Get<half>();
  DataCopyPad(s, xGm, DataCopyExtParams{1, uint32_t(n * sizeof(half)), 0, 0, 0},
              DataCopyPadExtParams<half>{false, 0, 0, half(0)});
  PipeBarrier<PIPE_ALL>();
  ReduceSum(r, s, w, n);
  ReduceMax(r[2], s, w, n, true);
  ReduceMin(r[4], s, w, n, true);
  SetFlag<HardEvent::V_S>(EVENT_ID0);
  WaitFlag<HardEvent::V_S>(EVENT_ID0);
  r.SetValue(1, r.GetValue(2));  // [sum, max, max index, min, min index]
  r.SetValue(2, r.GetValue(3));
  r.SetValue(3, r.GetValue(4));
  r.SetValue(4, r.GetValue(5));
  SetFlag<HardEvent::S_MTE3>(EVENT_ID0);
  WaitFlag<HardEvent::S_MTE3>(EVENT_ID0);
  DataCopyPad(outGm, r, DataCopyExtParams{1, 5 * sizeof(half), 0, 0, 0});
}

}  // namespace

extern "C" __global__ __aicore__ void reduce_half(GM_ADDR x, GM_ADDR out, int32_t n) {
  ReduceHalfKernel(x, out, n);
}

// Each block writes 1000 * GetBlockIdx() + GetBlockNum() to out[GetBlockIdx()] (pipe S on GM).
extern "C" __global__ __aicore__ void block_ids(GM_ADDR out) {
  GlobalTensor<int32_t> o;
  o.SetGlobalBuffer((__gm__ int32_t*)out, GetBlockNum());
  o.SetValue(GetBlockIdx(), int32_t(1000 * GetBlockIdx() + GetBlockNum()));
}

extern "C" __global__ __aicore__ void silu(GM_ADDR x, GM_ADDR y, GM_ADDR tiling) {
  KernelSilu op;
  op.Init(x, y, *reinterpret_cast<const SiluTiling*>(tiling));
  op.Process();
}

extern "C" __global__ __aicore__ void row_reduce(GM_ADDR x, GM_ADDR sum, GM_ADDR max,
                                                 GM_ADDR tiling) {
  KernelRowReduce op;
  op.Init(x, sum, max, *reinterpret_cast<const RowTiling*>(tiling));
  op.Process();
}

extern "C" __global__ __aicore__ void ops_f32(GM_ADDR a, GM_ADDR b, GM_ADDR out, GM_ADDR mask) {
  OpsKernel<float>(a, b, out, mask);
}

extern "C" __global__ __aicore__ void ops_f16(GM_ADDR a, GM_ADDR b, GM_ADDR out, GM_ADDR mask) {
  OpsKernel<half>(a, b, out, mask);
}

extern "C" __global__ __aicore__ void casts(GM_ADDR x, GM_ADDR h, GM_ADDR i, GM_ADDR b, GM_ADDR f,
                                            GM_ADDR hi) {
  CastKernel(x, h, i, b, f, hi);
}

// --- host entries (the role of tilec's generated host code on --target ascend-sim) ---------

extern "C" int run_silu(const void* x, void* y, int64_t n, int32_t blocks, int32_t tile) {
  const int64_t per = ((n + blocks - 1) / blocks + 15) / 16 * 16;
  SiluTiling tiling{n, per, tile, 0};
  tilec_twin_register_gm(x, uint64_t(n) * 2, "x");
  tilec_twin_register_gm(y, uint64_t(n) * 2, "y");
  return ASCEND_TWIN_LAUNCH(silu, blocks, nullptr, x, y, &tiling);
}

extern "C" int run_row_reduce(const float* x, float* sum, float* max, int32_t rows, int32_t cols,
                              int32_t blocks) {
  RowTiling tiling{rows, cols, (rows + blocks - 1) / blocks, 0};
  tilec_twin_register_gm(x, uint64_t(rows) * uint64_t(cols) * 4, "x");
  tilec_twin_register_gm(sum, uint64_t(rows) * 4, "sum");
  tilec_twin_register_gm(max, uint64_t(rows) * 4, "max");
  return ACLRT_LAUNCH_KERNEL(row_reduce)(blocks, nullptr, x, sum, max, &tiling);
}

extern "C" int run_ops(int half_precision, const void* a, const void* b, void* out, uint8_t* mask) {
  if (half_precision) return ASCEND_TWIN_LAUNCH(ops_f16, 1, nullptr, a, b, out, mask);
  return ASCEND_TWIN_LAUNCH(ops_f32, 1, nullptr, a, b, out, mask);
}

extern "C" int run_casts(const float* x, uint16_t* h, int32_t* i, uint16_t* b, float* f,
                         int32_t* hi) {
  return ASCEND_TWIN_LAUNCH(casts, 1, nullptr, x, h, i, b, f, hi);
}

extern "C" int run_reduce_half(const uint16_t* x, uint16_t* out, int32_t n) {
  return ASCEND_TWIN_LAUNCH(reduce_half, 1, nullptr, x, out, n);
}

extern "C" int run_block_ids(int32_t* out, int64_t blocks) {
  return ASCEND_TWIN_LAUNCH(block_ids, blocks, nullptr, out);
}

// The minimum work buffers (elements) of ReduceSum (which 0) and ReduceMax/Min (which 1).
extern "C" uint64_t reduce_work(int which, int half_precision, uint64_t count, int index) {
  using namespace AscendC::twin_detail;
  if (which == 0)
    return half_precision ? reduce_sum_work<half>(count) : reduce_sum_work<float>(count);
  return half_precision ? reduce_max_work<half>(count, index)
                        : reduce_max_work<float>(count, index);
}

// Scalar conversions, for exhaustive comparison with NumPy / ml_dtypes.
extern "C" void conv_f32_to_f16(const float* in, uint16_t* out, int64_t n, int mode, int saturate) {
  for (int64_t k = 0; k < n; ++k)
    out[k] = tilec_twin::f32_to_f16(in[k], tilec_twin::Rounding(mode), saturate != 0);
}
extern "C" void conv_f32_to_bf16(const float* in, uint16_t* out, int64_t n, int mode,
                                 int saturate) {
  for (int64_t k = 0; k < n; ++k)
    out[k] = tilec_twin::f32_to_bf16(in[k], tilec_twin::Rounding(mode), saturate != 0);
}
extern "C" void conv_f16_to_f32(const uint16_t* in, float* out, int64_t n) {
  for (int64_t k = 0; k < n; ++k) out[k] = float(half::from_bits(in[k]));
}
