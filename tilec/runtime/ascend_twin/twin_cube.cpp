/* The cube core (AIC) of the Ascend C twin: GM -> L1 with ND2NZ, LoadData into L0A/L0B, Mmad
 * into L0C and Fixpipe out to GM, with the layouts and parameter ranges of the public API pages
 * (asc-devkit docs/zh/api, "矩阵计算（ISASI）"): DataCopy (GMToL1 ND2NZ), LoadData (2D),
 * Mmad, Fixpipe (L0C to GM).  Every element loop works on whole rows or fractals; nothing
 * calls back per element.
 *
 * Layouts, with c0 = 32 / sizeof(T) elements (16 for half/bfloat16, 8 for float):
 * - L1 "NZ" of an R x D matrix (ND2NZ): the columns in blocks of c0; block b holds rows
 *   0..R-1 of c0 elements each, row r of block b at (b * dstNzC0Stride + r * dstNzNStride)
 *   * c0 elements; a partial last block is padded with zeros to 32 bytes.
 * - a fractal is 512 bytes: 16 x c0 (L0A, "ZZ": row-major fractals of row-major 16 x c0),
 *   c0 x 16 in L0B ("ZN": row-major fractals, each stored column by column: (k, n) at
 *   n * c0 + k), 16 x 16 float (1024 bytes) in L0C ("NZ": column blocks of 16, each holding
 *   ceil16(m) rows of 16).
 */
#include <algorithm>
#include <cinttypes>
#include <cstring>
#include <vector>

#include "twin_cube.h"

namespace tilec_twin {
namespace {

constexpr uint32_t FRACTAL = 512;

uint64_t ceil_div(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

void need_cube(const char* op, Loc loc) {
  if (core_kind() != CORE_AIC)
    fail(op, loc,
         "runs on the cube core (AIC), and this is a vector core: guard it with "
         "ASCEND_IS_AIC in a mixed kernel, or launch an AIC kernel");
}

void in_range(const char* op, Loc loc, const char* name, uint64_t v, uint64_t lo, uint64_t hi) {
  if (v < lo || v > hi)
    fail(op, loc, "%s %" PRIu64 " is outside [%" PRIu64 ", %" PRIu64 "]", name, v, lo, hi);
}

float to_f32(const uint8_t* p, Dt t) {
  switch (t) {
    case DT_HALF: return f16_to_f32(load<uint16_t>(p));
    case DT_BF16: return bf16_to_f32(load<uint16_t>(p));
    default: return load<float>(p);
  }
}

void from_f32(uint8_t* p, Dt t, float v) {
  switch (t) {
    case DT_HALF: store(p, f32_to_f16(v, Rounding::RINT, true)); break;
    case DT_BF16: store(p, f32_to_bf16(v, Rounding::RINT, true)); break;
    default: store(p, v);
  }
}

uint32_t size_of(Dt t) { return t == DT_F32 ? 4 : 2; }

}  // namespace

void nd2nz(const char* op, Loc loc, const TensorRef& dst, GmView src, uint32_t elem,
           const Nd2Nz& p) {
  need_cube(op, loc);
  in_range(op, loc, "ndNum", p.nd_num, 0, 4095);
  in_range(op, loc, "nValue", p.n_value, 0, 16384);
  in_range(op, loc, "srcDValue", p.src_d_value, 1, 65535);
  in_range(op, loc, "dstNzC0Stride", p.dst_c0_stride, 1, 16384);
  in_range(op, loc, "dstNzNStride", p.dst_n_stride, 1, 16384);
  in_range(op, loc, "dstNzMatrixStride", p.dst_matrix_stride, 0, 16384);
  if (p.nd_num == 0 || p.n_value == 0 || p.d_value == 0) return;  // a NOP, as documented
  const uint64_t c0 = BLOCK / elem, blocks = ceil_div(p.d_value, c0);
  const uint64_t last = ((blocks - 1) * p.dst_c0_stride + (p.n_value - 1) * p.dst_n_stride) * c0;
  const uint64_t span = ((p.nd_num - 1) * uint64_t(p.dst_matrix_stride) + last + c0) * elem;
  check_local_in(op, loc, "dst", dst, span, BLOCK, MEM_L1, "A1 or B1");
  const uint64_t seq = issue(PIPE_TWIN_MTE2);
  const uint64_t row_bytes = uint64_t(p.d_value) * elem;
  for (uint32_t i = 0; i < p.nd_num; ++i) {
    const uint64_t lo = uint64_t(i) * p.src_matrix_stride * elem;
    const uint64_t hi = lo + (uint64_t(p.n_value - 1) * p.src_d_value) * elem + row_bytes;
    check_gm(op, loc, src, elem, lo, hi, false);
    gm_access(op, loc, PIPE_TWIN_MTE2, seq, src.ptr + lo, hi - lo, false);
  }
  ub_access(op, loc, PIPE_TWIN_MTE2, seq, dst.off, span, true);
  uint8_t* out = ub_base() + dst.off;
  for (uint32_t i = 0; i < p.nd_num; ++i) {
    for (uint32_t r = 0; r < p.n_value; ++r) {
      const uint8_t* row = src.ptr + (uint64_t(i) * p.src_matrix_stride +
                                      uint64_t(r) * p.src_d_value) * elem;
      for (uint64_t b = 0; b < blocks; ++b) {
        uint8_t* to = out + (uint64_t(i) * p.dst_matrix_stride +
                             (b * p.dst_c0_stride + uint64_t(r) * p.dst_n_stride) * c0) * elem;
        const uint64_t n = std::min<uint64_t>(BLOCK, row_bytes - b * BLOCK);
        std::memcpy(to, row + b * BLOCK, n);
        std::memset(to + n, 0, BLOCK - n);  // padded with zeros to 32 bytes
      }
    }
  }
}

namespace {

/* One 16 x 16 fractal of 2-byte elements, transposed. */
void transpose16(uint8_t* to, const uint8_t* from) {
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c) std::memcpy(to + (c * 16 + r) * 2, from + (r * 16 + c) * 2, 2);
}

Mem l0_of(const char* op, Loc loc, const TensorRef& dst) {
  const Mem m = mem_of(dst);
  if (m != MEM_L0A && m != MEM_L0B)
    fail(op, loc, "dst is a tensor in %s; LoadData writes L0A (TPosition A2) or L0B (B2)",
         mem_name(m));
  return m;
}

}  // namespace

void load2d(const char* op, Loc loc, const TensorRef& dst, const TensorRef* src_l1,
            const GmView* src_gm, uint32_t elem, const Load2d& p) {
  need_cube(op, loc);
  in_range(op, loc, "repeatTimes", p.repeat, 0, 255);
  if (p.transpose && (elem != 2 || !src_l1))
    fail(op, loc, "ifTranspose needs 2-byte elements and an L1 source (LoadData page)");
  if (p.repeat == 0) return;
  const Mem to = l0_of(op, loc, dst);
  const uint64_t dst_bytes = (uint64_t(p.repeat - 1) * (1 + p.dst_gap) + 1) * FRACTAL;
  const uint64_t src_bytes = (p.start + uint64_t(p.repeat - 1) * p.src_stride + 1) * FRACTAL;
  check_local_in(op, loc, "dst", dst, dst_bytes, FRACTAL, to, to == MEM_L0A ? "A2" : "B2");
  const uint8_t* from;
  uint64_t seq;
  if (src_l1) {
    check_local_in(op, loc, "src", *src_l1, src_bytes, BLOCK, MEM_L1, "A1 or B1");
    seq = issue(PIPE_TWIN_MTE1);
    ub_access(op, loc, PIPE_TWIN_MTE1, seq, src_l1->off, src_bytes, false);
    from = ub_base() + src_l1->off;
  } else {
    check_gm(op, loc, *src_gm, 1, 0, src_bytes, false);
    seq = issue(PIPE_TWIN_MTE2);
    gm_access(op, loc, PIPE_TWIN_MTE2, seq, src_gm->ptr, src_bytes, false);
    from = src_gm->ptr;
  }
  const Pipe pipe = src_l1 ? PIPE_TWIN_MTE1 : PIPE_TWIN_MTE2;
  ub_access(op, loc, pipe, seq, dst.off, dst_bytes, true);
  uint8_t* out = ub_base() + dst.off;
  for (uint32_t j = 0; j < p.repeat; ++j) {
    const uint8_t* f = from + (p.start + uint64_t(j) * p.src_stride) * FRACTAL;
    uint8_t* t = out + uint64_t(j) * (1 + p.dst_gap) * FRACTAL;
    if (p.transpose)
      transpose16(t, f);
    else
      std::memcpy(t, f, FRACTAL);
  }
}

namespace {

/* A (m x k, row-major floats) from L0A's ZZ fractals of 16 x c0; with m = 1 the Cube runs
 * as GEMV and reads L0A as ND, k contiguous elements (Mmad page, constraints: "M = 1 turns
 * GEMV on by default ... the left matrix is read in ND format, not as ZZ"). */
void unpack_a(std::vector<float>& a, const uint8_t* l0a, Dt t, uint32_t m, uint32_t k) {
  const uint32_t e = size_of(t), c0 = BLOCK / e, k1 = uint32_t(ceil_div(k, c0));
  a.resize(size_t(m) * k);
  if (m == 1) {
    for (uint32_t kk = 0; kk < k; ++kk) a[kk] = to_f32(l0a + size_t(kk) * e, t);
    return;
  }
  for (uint32_t i = 0; i < m; ++i)
    for (uint32_t kk = 0; kk < k; ++kk)
      a[size_t(i) * k + kk] =
          to_f32(l0a + ((size_t(i / 16) * k1 + kk / c0) * 16 * c0 + (i % 16) * c0 + kk % c0) * e, t);
}

/* B (k x n, row-major floats) from L0B's ZN fractals of c0 x 16. */
void unpack_b(std::vector<float>& b, const uint8_t* l0b, Dt t, uint32_t k, uint32_t n) {
  const uint32_t e = size_of(t), c0 = BLOCK / e, n1 = uint32_t(ceil_div(n, 16));
  b.resize(size_t(k) * n);
  for (uint32_t kk = 0; kk < k; ++kk)
    for (uint32_t j = 0; j < n; ++j)
      b[size_t(kk) * n + j] =
          to_f32(l0b + ((size_t(kk / c0) * n1 + j / 16) * c0 * 16 + (j % 16) * c0 + kk % c0) * e, t);
}

}  // namespace

void mmad(const char* op, Loc loc, const TensorRef& dst, const TensorRef& fm,
          const TensorRef& filter, Dt t, const MmadShape& s) {
  need_cube(op, loc);
  in_range(op, loc, "m", s.m, 0, 4095);
  in_range(op, loc, "n", s.n, 0, 4095);
  in_range(op, loc, "k", s.k, 0, 4095);
  if (s.m == 0 || s.n == 0 || s.k == 0) return;
  const uint64_t c0 = BLOCK / size_of(t), m1 = ceil_div(s.m, 16), n1 = ceil_div(s.n, 16);
  const uint64_t k1 = ceil_div(s.k, c0);
  check_local_in(op, loc, "fm", fm, m1 * k1 * FRACTAL, FRACTAL, MEM_L0A, "A2");
  check_local_in(op, loc, "filter", filter, k1 * n1 * FRACTAL, FRACTAL, MEM_L0B, "B2");
  const uint64_t c_bytes = m1 * n1 * 1024;
  check_local_in(op, loc, "dst", dst, c_bytes, 1024, MEM_L0C, "CO1");
  const uint64_t seq = issue(PIPE_TWIN_M);
  ub_access(op, loc, PIPE_TWIN_M, seq, fm.off, m1 * k1 * FRACTAL, false);
  ub_access(op, loc, PIPE_TWIN_M, seq, filter.off, k1 * n1 * FRACTAL, false);
  if (!s.init) ub_access(op, loc, PIPE_TWIN_M, seq, dst.off, c_bytes, false);
  ub_access(op, loc, PIPE_TWIN_M, seq, dst.off, c_bytes, true);
  std::vector<float> a, b, c(size_t(s.m) * s.n, 0.0f);
  unpack_a(a, ub_base() + fm.off, t, s.m, s.k);
  unpack_b(b, ub_base() + filter.off, t, s.k, s.n);
  uint8_t* l0c = ub_base() + dst.off;
  const size_t m16 = size_t(m1) * 16;
  auto at = [&](uint32_t i, uint32_t j) { return l0c + ((j / 16) * m16 * 16 + i * 16 + j % 16) * 4; };
  if (!s.init)
    for (uint32_t i = 0; i < s.m; ++i)
      for (uint32_t j = 0; j < s.n; ++j) c[size_t(i) * s.n + j] = load<float>(at(i, j));
  for (uint32_t i = 0; i < s.m; ++i) {
    float* row = c.data() + size_t(i) * s.n;
    for (uint32_t kk = 0; kk < s.k; ++kk) {
      const float av = a[size_t(i) * s.k + kk];
      const float* brow = b.data() + size_t(kk) * s.n;
      for (uint32_t j = 0; j < s.n; ++j) row[j] += av * brow[j];
    }
  }
  for (uint32_t i = 0; i < s.m; ++i)
    for (uint32_t j = 0; j < s.n; ++j) store(at(i, j), c[size_t(i) * s.n + j]);
}

void fixpipe(const char* op, Loc loc, GmView dst, const TensorRef& src, Dt out, const Fix& p) {
  need_cube(op, loc);
  static const char* const quant[] = {"NoQuant", "F322F16", "F322BF16"};
  const int wanted = out == DT_HALF ? 1 : out == DT_BF16 ? 2 : 0;
  if (p.quant != wanted)
    fail(op, loc,
         "float -> %s needs quantPre = QuantMode_t::%s (it is not derived from the types, "
         "Fixpipe page), not %s",
         out == DT_HALF ? "half" : out == DT_BF16 ? "bfloat16_t" : "float", quant[wanted],
         p.quant >= 0 && p.quant < 3 ? quant[p.quant] : "a quantisation mode");
  if (!p.row_major) fail(op, loc, "only the NZ2ND form (CFG_ROW_MAJOR) is modelled");
  if (p.nd_num != 1) fail(op, loc, "ndNum %u: only ndNum 1 is modelled", p.nd_num);
  in_range(op, loc, "nSize", p.n, 0, 4095);
  in_range(op, loc, "mSize", p.m, 0, 8192);
  if (p.n == 0 || p.m == 0) return;
  if (p.src_stride < ceil_div(p.m, 16) * 16)
    fail(op, loc, "srcStride %u is less than mSize %u rounded up to 16 (Fixpipe page)",
         p.src_stride, p.m);
  if (p.dst_stride < p.n) fail(op, loc, "dstStride %u is less than nSize %u", p.dst_stride, p.n);
  const uint64_t src_bytes = ((ceil_div(p.n, 16) - 1) * p.src_stride + p.m) * 64;
  check_local_in(op, loc, "src", src, src_bytes, 64, MEM_L0C, "CO1");
  const uint32_t e = size_of(out);
  const uint64_t hi = (uint64_t(p.m - 1) * p.dst_stride + p.n) * e;
  check_gm(op, loc, dst, e, 0, hi, true);
  const uint64_t seq = issue(PIPE_TWIN_FIX);
  ub_access(op, loc, PIPE_TWIN_FIX, seq, src.off, src_bytes, false);
  const uint8_t* l0c = ub_base() + src.off;
  for (uint32_t i = 0; i < p.m; ++i) {
    uint8_t* row = dst.ptr + uint64_t(i) * p.dst_stride * e;
    gm_access(op, loc, PIPE_TWIN_FIX, seq, row, uint64_t(p.n) * e, true);
    for (uint32_t j = 0; j < p.n; ++j) {
      float v = load<float>(l0c + ((j / 16) * uint64_t(p.src_stride) * 16 + i * 16 + j % 16) * 4);
      if (p.relu) v = v > 0.0f ? v : 0.0f;
      from_f32(row + uint64_t(j) * e, out, v);
    }
  }
}

void peek(const TensorRef& t, void* out, uint64_t bytes) {
  if (bytes > t.bytes) fail("tilec_twin::peek", Loc{}, "%" PRIu64 " bytes is beyond the tensor",
                            bytes);
  std::memcpy(out, ub_base() + t.off, bytes);
}

}  // namespace tilec_twin
