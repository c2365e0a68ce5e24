/* The CPU GEMM (see cpu_gemm.h).
 *
 * Large M: for each block of nc columns and kc of K, the threads pack B's block into panels
 * NR wide (float32, zero-padded), then share out items of mc rows by a slice of the block's
 * columns: each packs its rows of A into panels MR high and runs the micro-kernel over the
 * slice, accumulating into the caller's float32 accumulator of m x nc; after the last kc
 * block the item hands its finished tile to the epilogue while it is still in L2.  A batch
 * whose B is shared (batch stride 0) and whose A rows follow each other is one problem of
 * batch * m rows.
 *
 * Small M (decode): B is read once, where it lies, in the order it lies: each item takes a
 * split of K (B's rows) by a block of columns and streams it a few rows at a time, every row
 * of A (widened once per call, or for vdpbf16ps paired) against each line of B as it
 * arrives, into the split's float32 sums, which a second pass adds in split order; a
 * transposed B (rows of it contiguous along K) is read as dot products instead.
 *
 * The packing code needs x86-64-v3 (AVX2, FMA, F16C), which every library's entries check
 * before they run; the x86-64-v4 micro-kernel runs where tilec_cpu_level() says 4, the AMX
 * ones (bfloat16 operands, and float16 split into bfloat16 parts) where tilec_cpu_amx() says
 * so, and where it does not but tilec_cpu_bf16() does, bfloat16 operands run AVX512-BF16's
 * vdpbf16ps (twice the float32 FMA rate on AMD's Zen 4; on Intel's Sapphire Rapids half of
 * it, but AMX comes first there): run-time checks inside the v4 code, not code levels of
 * their own.  float16 stays widened without AMX: split into bfloat16 parts it needs four dot
 * products, slower than the float32 FMA everywhere.
 */
#define _GNU_SOURCE
#include "cpu_gemm.h"

#include <immintrin.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_runtime.h"

#define V3 __attribute__((target("avx2,fma,f16c")))
#define V4 __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl")))
#define AMX __attribute__((target("amx-tile,amx-bf16")))
#define DP __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl,avx512bf16")))
#define MAX_MR 32
#define MAX_NR 32
#define AMX_K 32 /* the K of one tile product: 16 pairs of bfloat16 */
/* a launch large enough that the pool always shares it */
#define SHARED_TRAFFIC ((int64_t)1 << 40)

/* next: the accumulators (rows ldc apart) that the next call reads, prefetched one line an
 * iteration while this one computes (NULL: none) */
typedef void (*micro_fn)(int64_t kc, const float* a, const float* b, float* c, int64_t ldc,
                         int accumulate, const float* next);

/* pairs: the operands are packed as bfloat16 pairs along K in blocks of AMX_K (AMX's
 * layout: A's rows of AMX_K elements, B's rows of pairs), not as float32; tiles: the
 * micro-kernel runs on AMX's tiles (configured per thread around it); split: float16
 * operands, each element x packed as two bfloat16, hi (x with its low 16 bits of float32
 * cleared) and lo = x - hi, which hold it exactly (x has 11 significant bits, hi 8, lo the
 * other 3), hi's block of AMX_K then lo's */
typedef struct {
  int mr, nr, pairs, tiles, split;
  micro_fn micro;
} Micro;

/* -- widening ------------------------------------------------------------------------------ */

static V3 void widen(float* dst, const void* src, int dtype, int64_t n) {
  int64_t i = 0;
  if (dtype == TILEC_GEMM_F32) { /* mostly a panel's row of 16 or 32: no call to memcpy */
    const float* s = (const float*)src;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, _mm256_loadu_ps(s + i));
    for (; i < n; i++) dst[i] = s[i];
    return;
  }
  const uint16_t* s = (const uint16_t*)src;
  if (dtype == TILEC_GEMM_F16) {
    for (; i + 8 <= n; i += 8)
      _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(s + i))));
    for (; i < n; i++) dst[i] = tilec_f16_to_f32(s[i]);
    return;
  }
  for (; i + 8 <= n; i += 8) {
    __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)(s + i)));
    _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)));
  }
  for (; i < n; i++) dst[i] = tilec_bf16_to_f32(s[i]);
}

static float element(const tilec_gemm_operand* x, int64_t at) {
  if (x->dtype == TILEC_GEMM_F32) return ((const float*)x->data)[at];
  uint16_t h = ((const uint16_t*)x->data)[at];
  return x->dtype == TILEC_GEMM_F16 ? tilec_f16_to_f32(h) : tilec_bf16_to_f32(h);
}

static int element_bytes(int dtype) { return dtype == TILEC_GEMM_F32 ? 4 : 2; }

static const void* at(const tilec_gemm_operand* x, int64_t offset) {
  return (const char*)x->data + offset * element_bytes(x->dtype);
}

/* -- micro-kernels: C[mr x nr] (+)= A panel (kc x mr) * B panel (kc x nr) ------------------- */

/* Line `line` of the next call's mr x nr accumulators, of lines per row each. */
static inline void prefetch_line(const float* next, int64_t ldc, int64_t line, int lines) {
  _mm_prefetch((const char*)(next + line / lines * ldc + line % lines * 16), _MM_HINT_T0);
}

static V3 void micro_6x16(int64_t kc, const float* a, const float* b, float* c, int64_t ldc,
                          int accumulate, const float* next) {
  __m256 acc[6][2];
#pragma GCC unroll 6
  for (int i = 0; i < 6; i++) {
    acc[i][0] = accumulate ? _mm256_loadu_ps(c + i * ldc) : _mm256_setzero_ps();
    acc[i][1] = accumulate ? _mm256_loadu_ps(c + i * ldc + 8) : _mm256_setzero_ps();
  }
  for (int64_t k = 0; k < kc; k++, a += 6, b += 16) {
    if (next != NULL && k < 6) prefetch_line(next, ldc, k, 1);
    __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
#pragma GCC unroll 6
    for (int i = 0; i < 6; i++) {
      __m256 ai = _mm256_broadcast_ss(a + i);
      acc[i][0] = _mm256_fmadd_ps(ai, b0, acc[i][0]);
      acc[i][1] = _mm256_fmadd_ps(ai, b1, acc[i][1]);
    }
  }
#pragma GCC unroll 6
  for (int i = 0; i < 6; i++) {
    _mm256_storeu_ps(c + i * ldc, acc[i][0]);
    _mm256_storeu_ps(c + i * ldc + 8, acc[i][1]);
  }
}

static V4 void micro_14x32(int64_t kc, const float* a, const float* b, float* c, int64_t ldc,
                           int accumulate, const float* next) {
  __m512 acc[14][2];
#pragma GCC unroll 14
  for (int i = 0; i < 14; i++) {
    acc[i][0] = accumulate ? _mm512_loadu_ps(c + i * ldc) : _mm512_setzero_ps();
    acc[i][1] = accumulate ? _mm512_loadu_ps(c + i * ldc + 16) : _mm512_setzero_ps();
  }
  for (int64_t k = 0; k < kc; k++, a += 14, b += 32) {
    if (next != NULL && k < 28) prefetch_line(next, ldc, k, 2);
    __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);
#pragma GCC unroll 14
    for (int i = 0; i < 14; i++) {
      __m512 ai = _mm512_set1_ps(a[i]);
      acc[i][0] = _mm512_fmadd_ps(ai, b0, acc[i][0]);
      acc[i][1] = _mm512_fmadd_ps(ai, b1, acc[i][1]);
    }
  }
#pragma GCC unroll 14
  for (int i = 0; i < 14; i++) {
    _mm512_storeu_ps(c + i * ldc, acc[i][0]);
    _mm512_storeu_ps(c + i * ldc + 16, acc[i][1]);
  }
}

/* AMX, bfloat16 operands: C[32 x 32] (+)= A panel * B panel in four 16 x 16 float32 tiles.
 * Per K block of AMX_K, A's panel holds 32 rows of AMX_K elements and B's 16 rows of 32
 * column pairs (element (k, j) at (k / 2) * 64 + 2 * j + k % 2). */
static const unsigned char amx_config[64] __attribute__((aligned(64))) = {
    [0] = 1,                                                      /* palette 1 */
    [16] = 64, [18] = 64, [20] = 64, [22] = 64, [24] = 64, [26] = 64, [28] = 64, [30] = 64,
    [48] = 16, [49] = 16, [50] = 16, [51] = 16, [52] = 16, [53] = 16, [54] = 16, [55] = 16};

/* C's four 16 x 16 float32 tiles (0-3) at c: loaded, or zero. */
static inline AMX void c_tiles_load(const float* c, int64_t ldc, int accumulate) {
  int64_t stride = ldc * (int64_t)sizeof(float);
  if (accumulate) {
    _tile_loadd(0, c, stride);
    _tile_loadd(1, c + 16, stride);
    _tile_loadd(2, c + 16 * ldc, stride);
    _tile_loadd(3, c + 16 * ldc + 16, stride);
  } else {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
  }
}

static inline AMX void c_tiles_store(float* c, int64_t ldc) {
  int64_t stride = ldc * (int64_t)sizeof(float);
  _tile_stored(0, c, stride);
  _tile_stored(1, c + 16, stride);
  _tile_stored(2, c + 16 * ldc, stride);
  _tile_stored(3, c + 16 * ldc + 16, stride);
}

/* A's two tiles (4, 5: rows 0-15 and 16-31 of a K block) from a packed panel. */
static inline AMX void a_tiles(const uint16_t* ap) {
  _tile_loadd(4, ap, 64);
  _tile_loadd(5, ap + 16 * AMX_K, 64);
}

/* B's two tiles (6, 7: columns 0-15 and 16-31, rows of pairs) from a packed panel. */
static inline AMX void b_tiles(const uint16_t* bp) {
  _tile_loadd(6, bp, 128);
  _tile_loadd(7, bp + 32, 128);
}

/* C's tiles += A's tiles x B's tiles. */
static inline AMX void tile_products(void) {
  _tile_dpbf16ps(0, 4, 6);
  _tile_dpbf16ps(1, 4, 7);
  _tile_dpbf16ps(2, 5, 6);
  _tile_dpbf16ps(3, 5, 7);
}

static AMX void micro_amx_32x32(int64_t kc, const float* a, const float* b, float* c,
                                int64_t ldc, int accumulate, const float* next) {
  const uint16_t* ap = (const uint16_t*)a;
  const uint16_t* bp = (const uint16_t*)b;
  (void)next;
  c_tiles_load(c, ldc, accumulate);
  for (int64_t k = 0; k < kc; k += AMX_K, ap += 32 * AMX_K, bp += 32 * AMX_K) {
    a_tiles(ap);
    b_tiles(bp);
    tile_products();
  }
  c_tiles_store(c, ldc);
}

/* The same for float16 operands packed as hi and lo bfloat16 (Micro.split): C += Ah Bh +
 * Ah Bl + Al Bl + Al Bh per K block, every product exact in float32, so the sum is as
 * accurate as the float32 micro-kernel's; a quarter of the bfloat16 kernel's rate. */
static AMX void micro_amx_split_32x32(int64_t kc, const float* a, const float* b, float* c,
                                      int64_t ldc, int accumulate, const float* next) {
  const uint16_t* ap = (const uint16_t*)a;
  const uint16_t* bp = (const uint16_t*)b;
  int64_t lo = 32 * AMX_K;
  (void)next;
  c_tiles_load(c, ldc, accumulate);
  for (int64_t k = 0; k < kc; k += AMX_K, ap += 2 * lo, bp += 2 * lo) {
    a_tiles(ap);
    b_tiles(bp);
    tile_products();
    b_tiles(bp + lo);
    tile_products();
    a_tiles(ap + lo);
    tile_products();
    b_tiles(bp);
    tile_products();
  }
  c_tiles_store(c, ldc);
}

/* AVX512-BF16, bfloat16 operands packed as for AMX (Micro.pairs): C[14 x 32] (+)= A panel *
 * B panel, for each pair of K a vdpbf16ps per row and 16 columns (the two products of
 * bfloat16, exact in float32, added into the float32 accumulator).  Per K block of AMX_K,
 * A's panel holds 14 rows of AMX_K elements and B's 16 rows of 32 column pairs; K is zero
 * past kc up to the block's end. */
static DP void micro_dp_14x32(int64_t kc, const float* a, const float* b, float* c,
                              int64_t ldc, int accumulate, const float* next) {
  const uint32_t* ap = (const uint32_t*)a; /* pairs of A's rows */
  const uint32_t* bp = (const uint32_t*)b; /* pairs of B's columns */
  __m512 acc[14][2];
#pragma GCC unroll 14
  for (int i = 0; i < 14; i++) {
    acc[i][0] = accumulate ? _mm512_loadu_ps(c + i * ldc) : _mm512_setzero_ps();
    acc[i][1] = accumulate ? _mm512_loadu_ps(c + i * ldc + 16) : _mm512_setzero_ps();
  }
  for (int64_t k = 0; k < kc; k += AMX_K, ap += 14 * AMX_K / 2, bp += AMX_K / 2 * 32)
    for (int pair = 0; pair < AMX_K / 2; pair++) {
      if (next != NULL && k == 0 && pair < 14) {
        prefetch_line(next, ldc, 2 * pair, 2);
        prefetch_line(next, ldc, 2 * pair + 1, 2);
      }
      __m512bh b0 = (__m512bh)_mm512_loadu_si512(bp + pair * 32);
      __m512bh b1 = (__m512bh)_mm512_loadu_si512(bp + pair * 32 + 16);
#pragma GCC unroll 14
      for (int i = 0; i < 14; i++) {
        __m512bh ai = (__m512bh)_mm512_set1_epi32((int)ap[i * AMX_K / 2 + pair]);
        acc[i][0] = _mm512_dpbf16_ps(acc[i][0], ai, b0);
        acc[i][1] = _mm512_dpbf16_ps(acc[i][1], ai, b1);
      }
    }
#pragma GCC unroll 14
  for (int i = 0; i < 14; i++) {
    _mm512_storeu_ps(c + i * ldc, acc[i][0]);
    _mm512_storeu_ps(c + i * ldc + 16, acc[i][1]);
  }
}

static AMX void amx_begin(void) { _tile_loadconfig(amx_config); }
static AMX void amx_end(void) { _tile_release(); }

/* Whether a float16 operand (batches x rows x cols at its strides) holds an infinity or a
 * NaN: Micro.split would turn inf into NaN (0 x inf in the products of lo parts). */
static V4 int nonfinite_f16(const tilec_gemm_operand* x, int64_t batches, int64_t rows,
                            int64_t cols) {
  if (x->col != 1 && x->row == 1) { /* read it in memory order: a transposed operand */
    tilec_gemm_operand t = {x->data, x->dtype, x->batch, x->col, 1};
    return nonfinite_f16(&t, batches, cols, rows);
  }
  const uint16_t* data = x->data;
  __m512i top = _mm512_set1_epi16(0x7c00);
  for (int64_t b = 0; b < (x->batch != 0 ? batches : 1); b++)
    for (int64_t i = 0; i < rows; i++) {
      const uint16_t* row = data + b * x->batch + i * x->row;
      int64_t j = 0;
      for (; x->col == 1 && j + 32 <= cols; j += 32) {
        __m512i bits = _mm512_and_si512(_mm512_loadu_si512(row + j), top);
        if (_mm512_cmpeq_epi16_mask(bits, top)) return 1;
      }
      for (; j < cols; j++)
        if ((row[j * x->col] & 0x7c00) == 0x7c00) return 1;
    }
  return 0;
}

static Micro micro_for(const tilec_gemm_problem* p) {
  if (tilec_cpu_amx() && p->a.dtype == TILEC_GEMM_BF16 && p->b.dtype == TILEC_GEMM_BF16)
    return (Micro){32, 32, 1, 1, 0, micro_amx_32x32};
  /* float16 B with neither rows nor columns contiguous stays on the FMA kernel (no split
   * packing for it), and so do operands with an infinity or a NaN */
  if (tilec_cpu_amx() && p->a.dtype == TILEC_GEMM_F16 && p->b.dtype == TILEC_GEMM_F16 &&
      (p->b.col == 1 || p->b.row == 1) && !nonfinite_f16(&p->a, p->batch, p->m, p->k) &&
      !nonfinite_f16(&p->b, p->batch, p->k, p->n))
    return (Micro){32, 32, 1, 1, 1, micro_amx_split_32x32};
  if (tilec_cpu_bf16() && p->a.dtype == TILEC_GEMM_BF16 && p->b.dtype == TILEC_GEMM_BF16)
    return (Micro){14, 32, 1, 0, 0, micro_dp_14x32};
  if (tilec_cpu_level() >= 4) return (Micro){14, 32, 0, 0, 0, micro_14x32};
  return (Micro){6, 16, 0, 0, 0, micro_6x16};
}

static int64_t round_up(int64_t x, int64_t to) { return (x + to - 1) / to * to; }

/* -- scratch: grown, never shrunk, per thread ----------------------------------------------- */

typedef struct {
  float* data;
  int64_t floats;
} Scratch;

static float* grown(Scratch* s, int64_t floats) {
  if (s->floats >= floats) return s->data;
  tilec_free(s->data);
  s->data = tilec_alloc(floats * (int64_t)sizeof(float));
  s->floats = s->data != NULL ? floats : 0;
  return s->data;
}

static __thread Scratch packed_a, packed_b, accumulators, widened_a;

/* -- the large-M problem -------------------------------------------------------------------- */

typedef struct {
  const tilec_gemm_problem* p;
  Micro u;
  int64_t rows;                   /* rows of a batch (batch * m when B is shared) */
  int64_t m0, m;                  /* the rows of this pass: [m0, m0 + m) */
  int64_t mc, kc, nc;             /* blocks */
  int64_t ld;                     /* of the accumulators: nc and a line, so that their rows
                                   * do not all fall in the same cache sets */
  int64_t batch;                  /* the batch being computed */
  int64_t jc, pc, nc_now, kc_now; /* the current block */
  int64_t slice, slices;          /* columns per item, items per row block */
  float* bp;                      /* B's block, packed */
  float* acc;                     /* m x nc accumulators */
  uint64_t call;                  /* this call's number (gemm_packed) */
  int failed;
} Gemm;

static const tilec_gemm_operand* b_of(const Gemm* g) { return &g->p->b; }

/* Floats of a packed panel per row of A or column of B in the current K block. */
static int64_t kstride(const Gemm* g) {
  int64_t padded = (g->kc_now + AMX_K - 1) / AMX_K * AMX_K;
  return g->u.pairs ? padded / 2 * (1 + g->u.split) : g->kc_now;
}

static uint16_t bits_at(const tilec_gemm_operand* x, int64_t at) {
  return ((const uint16_t*)x->data)[at];
}

/* The first n of 32 lanes (none for n <= 0, all for n >= 32). */
static inline __mmask32 first_lanes(int64_t n) {
  return n >= 32 ? 0xffffffffu : n <= 0 ? 0 : (1u << n) - 1;
}

/* Lanes of two rows of 32 interleaved into pairs: the first 16 of each (add 16 for the rest). */
static const uint16_t PAIR_LOW[32] = {0, 32, 1, 33, 2, 34, 3, 35, 4, 36, 5, 37, 6, 38, 7, 39,
                                      8, 40, 9, 41, 10, 42, 11, 43, 12, 44, 13, 45, 14, 46,
                                      15, 47};

/* A finite x as Micro.split's hi and lo bfloat16. */
static void split_bits(float x, uint16_t* hi, uint16_t* lo) {
  uint32_t bits;
  memcpy(&bits, &x, sizeof bits);
  bits &= 0xffff0000u;
  float high, low;
  memcpy(&high, &bits, sizeof bits);
  low = x - high;
  *hi = (uint16_t)(bits >> 16);
  memcpy(&bits, &low, sizeof bits);
  *lo = (uint16_t)(bits >> 16);
}

/* 16 float32 as the top halves of their bits. */
static inline V4 __m256i top_halves(__m512 x) {
  return _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_castps_si512(x), 16));
}

/* split_bits for 32 finite float16 at once. */
static inline V4 void split32(__m512i h, __m512i* hi, __m512i* lo) {
  __m512i keep = _mm512_set1_epi32((int)0xffff0000u);
  __m256i parts[2][2];
  for (int half = 0; half < 2; half++) {
    __m512 x = _mm512_cvtph_ps(half ? _mm512_extracti64x4_epi64(h, 1)
                                    : _mm512_castsi512_si256(h));
    __m512 high = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(x), keep));
    __m512 low = _mm512_sub_ps(x, high);
    parts[0][half] = top_halves(high);
    parts[1][half] = top_halves(low);
  }
  *hi = _mm512_inserti64x4(_mm512_castsi256_si512(parts[0][0]), parts[0][1], 1);
  *lo = _mm512_inserti64x4(_mm512_castsi256_si512(parts[1][0]), parts[1][1], 1);
}

/* Rows k and k + 1 of a row-major float16 B (ld apart, cols of 32 real, kc of padded real)
 * split into hi and lo (Micro.split) and interleaved into rows of 32 pairs, per K block of
 * AMX_K hi's rows of pairs, then lo's; zeros past both ends. */
static V4 void interleave_split(uint16_t* dst, const uint16_t* src, int64_t ld, int64_t kc,
                                int64_t padded, int64_t cols) {
  __m512i lo = _mm512_loadu_si512(PAIR_LOW), hi = _mm512_add_epi16(lo, _mm512_set1_epi16(16));
  __mmask32 mask = first_lanes(cols);
  for (int64_t k = 0; k < padded; k += 2) {
    __m512i r[2][2]; /* [row][hi, lo] */
    for (int t = 0; t < 2; t++)
      split32(k + t < kc ? _mm512_maskz_loadu_epi16(mask, src + (k + t) * ld)
                         : _mm512_setzero_si512(), &r[t][0], &r[t][1]);
    uint16_t* out = dst + k / AMX_K * 2 * AMX_K * 32 + k % AMX_K / 2 * 64;
    for (int part = 0; part < 2; part++, out += AMX_K * 32) {
      _mm512_storeu_si512(out, _mm512_permutex2var_epi16(r[0][part], lo, r[1][part]));
      _mm512_storeu_si512(out + 32, _mm512_permutex2var_epi16(r[0][part], hi, r[1][part]));
    }
  }
}

/* The same for a transposed float16 B (column j of cols at src + j * ld, contiguous along K,
 * kc of padded real): per K block of AMX_K, each column's run split into hi and lo, whose
 * pairs (32-bit words) are then transposed into the rows of pairs of hi's tile and lo's. */
static V4 void split_columns(uint16_t* dst, const uint16_t* src, int64_t ld, int64_t kc,
                             int64_t padded, int64_t cols) {
  uint32_t* out = (uint32_t*)dst;
  for (int64_t k = 0; k < padded; k += AMX_K, out += 2 * AMX_K * 16) {
    uint32_t parts[2][32][AMX_K / 2]; /* [hi, lo][column][pair] */
    __mmask32 mask = first_lanes(kc - k);
    for (int64_t j = 0; j < 32; j++) {
      __m512i hi, lo;
      split32(j < cols ? _mm512_maskz_loadu_epi16(mask, src + j * ld + k)
                       : _mm512_setzero_si512(), &hi, &lo);
      _mm512_storeu_si512(parts[0][j], hi);
      _mm512_storeu_si512(parts[1][j], lo);
    }
    for (int part = 0; part < 2; part++)
      for (int pair = 0; pair < AMX_K / 2; pair++)
        for (int j = 0; j < 32; j++) out[part * AMX_K * 16 + pair * 32 + j] = parts[part][j][pair];
  }
}

/* r (16 rows of 16 32-bit words) transposed in place: word w of row i becomes word i of row
 * w.  Four rounds, each exchanging the blocks of s = 8, 4, 2, 1 words that rows s apart hold
 * in each other's place. */
static inline V4 void transpose_words16(__m512i r[16]) {
  const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
#pragma GCC unroll 4
  for (int s = 8; s >= 1; s /= 2) {
    __mmask16 upper = _mm512_test_epi32_mask(lane, _mm512_set1_epi32(s));
    /* lanes 0-15 index the first row, 16-31 the second */
    __m512i first = _mm512_mask_add_epi32(lane, upper, lane, _mm512_set1_epi32(16 - s));
    __m512i second = _mm512_mask_add_epi32(_mm512_add_epi32(lane, _mm512_set1_epi32(s)), upper,
                                           lane, _mm512_set1_epi32(16));
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++)
      if (!(i & s)) {
        __m512i a = r[i], b = r[i + s];
        r[i] = _mm512_permutex2var_epi32(a, first, b);
        r[i + s] = _mm512_permutex2var_epi32(a, second, b);
      }
  }
}

/* A transposed bfloat16 B in pairs (column j of cols at src + j * ld, contiguous along K, kc
 * of padded real): each column's run of K is already its pairs, 32-bit words, so a panel is
 * their transpose, 16 columns by 16 pairs at a time; zeros past the K block's end and the
 * columns'. */
static V4 void transpose_pairs(uint16_t* dst, const uint16_t* src, int64_t ld, int64_t kc,
                               int64_t padded, int64_t cols) {
  uint32_t* out = (uint32_t*)dst;
  for (int half = 0; half < 32; half += 16)
    for (int64_t k = 0; k < padded; k += 32) {
      __mmask32 mask = first_lanes(kc - k);
      __m512i r[16];
#pragma GCC unroll 16
      for (int i = 0; i < 16; i++) {
        const uint16_t* column = src + (half + i) * ld + k;
        _mm_prefetch((const char*)column + 256, _MM_HINT_T0);   /* 16 short runs at once */
        r[i] = half + i < cols ? _mm512_maskz_loadu_epi16(mask, column) : _mm512_setzero_si512();
      }
      transpose_words16(r);
#pragma GCC unroll 16
      for (int w = 0; w < 16; w++) _mm512_storeu_si512(out + (k / 2 + w) * 32 + half, r[w]);
    }
}

/* A panel of B in pairs (Micro.pairs): B's element (k, j) of the block at (k / 2) * 2 nr +
 * 2 j + k % 2, zero past the K block's end and the columns' (cols); the rows of pairs form
 * AMX's tiles. */
static void pack_b_pairs(const Gemm* g, uint16_t* dst, int64_t base, int64_t cols) {
  const tilec_gemm_operand* b = b_of(g);
  int nr = g->u.nr;
  int64_t kc = kstride(g) * 2 / (1 + g->u.split);
  if (g->u.split && b->col == 1) { /* nr == 32, and b->col or b->row is 1: micro_for */
    interleave_split(dst, (const uint16_t*)b->data + base, b->row, g->kc_now, kc, cols);
    return;
  }
  if (g->u.split) {
    split_columns(dst, (const uint16_t*)b->data + base, b->col, g->kc_now, kc, cols);
    return;
  }
  if (b->row == 1) { /* nr == 32 */
    transpose_pairs(dst, (const uint16_t*)b->data + base, b->col, g->kc_now, kc, cols);
    return;
  }
  memset(dst, 0, (size_t)(kc * nr) * sizeof(uint16_t));
  for (int64_t k = 0; k < g->kc_now; k++) {
    uint16_t* row = dst + k / 2 * 2 * nr + k % 2;
    for (int64_t j = 0; j < cols; j++) row[2 * j] = bits_at(b, base + k * b->row + j * b->col);
  }
}

/* Distance, in rows of an operand, at which its packing prefetches the row it will read:
 * the runs it reads are short (a K block of A, a slice of B's row) and a page apart, too
 * short for the hardware prefetcher to find and follow them. */
#define PACK_AHEAD 4

/* The lines [from, from + bytes) prefetched into L1. */
static void prefetch_run(const void* from, int64_t bytes) {
  for (int64_t at = 0; at < bytes; at += 64) _mm_prefetch((const char*)from + at, _MM_HINT_T0);
}

/* Panels [first, last) of a B whose rows are contiguous, row by row: each row of B read as
 * one run, its next rows prefetched. */
static void pack_b_rows(const Gemm* g, int64_t first, int64_t last) {
  const tilec_gemm_operand* b = b_of(g);
  int nr = g->u.nr;
  int64_t j0 = g->jc + first * nr, width = g->p->n - j0 < (last - first) * nr ?
                                            g->p->n - j0 : (last - first) * nr;
  int64_t base = g->batch * b->batch + g->pc * b->row + j0, bytes = width * element_bytes(b->dtype);
  for (int64_t k = 0; k < g->kc_now; k++) {
    if (k + PACK_AHEAD < g->kc_now) prefetch_run(at(b, base + (k + PACK_AHEAD) * b->row), bytes);
    for (int64_t panel = first; panel < last; panel++) {
      float* dst = g->bp + panel * kstride(g) * nr + k * nr;
      int64_t j = (panel - first) * nr, cols = width - j < nr ? width - j : nr;
      widen(dst, at(b, base + k * b->row + j), b->dtype, cols);
      for (int64_t c = cols; c < nr; c++) dst[c] = 0.0f;
    }
  }
}

/* Panels [first, last) of a row-major bfloat16 B in pairs (nr = 32, pack_b_pairs' layout:
 * rows k and k + 1 interleaved into rows of 32 pairs, zeros past the K block's end and the
 * columns'), two rows of B at a time across all the panels: each row read as one run, its
 * next rows prefetched (a panel at a time reads 64 bytes of each row, a page apart). */
static V4 void pack_b_row_pairs(const Gemm* g, int64_t first, int64_t last) {
  const tilec_gemm_operand* b = b_of(g);
  const __m512i lo = _mm512_loadu_si512(PAIR_LOW);
  const __m512i hi = _mm512_add_epi16(lo, _mm512_set1_epi16(16));
  int64_t j0 = g->jc + first * 32, width = g->p->n - j0 < (last - first) * 32 ?
                                            g->p->n - j0 : (last - first) * 32;
  const uint16_t* src = (const uint16_t*)b->data + g->batch * b->batch + g->pc * b->row + j0;
  int64_t kc = g->kc_now, padded = kstride(g) * 2, ld = b->row;
  for (int64_t k = 0; k < padded; k += 2) {
    for (int64_t t = k + PACK_AHEAD; t < k + PACK_AHEAD + 2 && t < kc; t++)
      prefetch_run(src + t * ld, 2 * width);
    for (int64_t panel = first; panel < last; panel++) {
      int64_t j = (panel - first) * 32;
      __mmask32 mask = first_lanes(width - j);
      __m512i r0 = k < kc ? _mm512_maskz_loadu_epi16(mask, src + k * ld + j)
                          : _mm512_setzero_si512();
      __m512i r1 = k + 1 < kc ? _mm512_maskz_loadu_epi16(mask, src + (k + 1) * ld + j)
                              : _mm512_setzero_si512();
      uint16_t* dst = (uint16_t*)(g->bp + panel * kstride(g) * 32) + k * 32;
      _mm512_storeu_si512(dst, _mm512_permutex2var_epi16(r0, lo, r1));
      _mm512_storeu_si512(dst + 32, _mm512_permutex2var_epi16(r0, hi, r1));
    }
  }
}

/* Eight elements of an operand's type from src, as float32. */
static inline V3 __m256 widen8(const void* src, int dtype) {
  if (dtype == TILEC_GEMM_F32) return _mm256_loadu_ps((const float*)src);
  __m128i h = _mm_loadu_si128((const __m128i*)src);
  if (dtype == TILEC_GEMM_F16) return _mm256_cvtph_ps(h);
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* r[t][u] becomes r[u][t]. */
static inline V3 void transpose8(__m256 r[8]) {
  __m256 t[8], s[8];
#pragma GCC unroll 4
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
#pragma GCC unroll 2
  for (int i = 0; i < 8; i += 4) {
    s[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
    s[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xee);
    s[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
    s[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xee);
  }
#pragma GCC unroll 4
  for (int i = 0; i < 4; i++) {
    r[i] = _mm256_permute2f128_ps(s[i], s[i + 4], 0x20);
    r[i + 4] = _mm256_permute2f128_ps(s[i], s[i + 4], 0x31);
  }
}

/* A panel of a B whose columns are contiguous along K (a transposed weight), columns
 * [0, cols / 8 * 8) and K [0, kc_now / 8 * 8): blocks of 8 x 8 read as eight runs of
 * columns, transposed in registers, stored as eight runs of rows; every column read one line
 * after another, the lines PACK_AHEAD ahead prefetched.  Returns the columns it packed. */
static V3 int64_t pack_b_columns(const Gemm* g, float* dst, int64_t base, int64_t cols) {
  const tilec_gemm_operand* b = b_of(g);
  int nr = g->u.nr, size = element_bytes(b->dtype);
  int64_t full = cols / 8 * 8;
  for (int64_t k = 0; k + 8 <= g->kc_now; k += 8) {
    int line_starts = (k * size & 63) == 0;    /* k is the first element of a line */
    for (int64_t j = 0; j < full; j += 8) {
      __m256 r[8];
#pragma GCC unroll 8
      for (int t = 0; t < 8; t++) {
        const char* column = at(b, base + (j + t) * b->col + k);
        if (line_starts) _mm_prefetch(column + PACK_AHEAD * 64, _MM_HINT_T0);
        r[t] = widen8(column, b->dtype);
      }
      transpose8(r);
#pragma GCC unroll 8
      for (int t = 0; t < 8; t++) _mm256_storeu_ps(dst + (k + t) * nr + j, r[t]);
    }
  }
  return full;
}

/* B's rows [pc, pc + kc_now) and columns of panels [first, last) of the block, packed. */
static void pack_b(void* ctx, int64_t first, int64_t last) {
  Gemm* g = ctx;
  const tilec_gemm_operand* b = b_of(g);
  int nr = g->u.nr;
  if (b->col == 1 && !g->u.pairs) {   /* a row-major B: its rows across all the panels */
    pack_b_rows(g, first, last);
    return;
  }
  if (b->col == 1 && !g->u.split) {   /* the same in pairs, nr == 32 */
    pack_b_row_pairs(g, first, last);
    return;
  }
  for (int64_t panel = first; panel < last; panel++) {
    float* dst = g->bp + panel * kstride(g) * nr;
    int64_t j0 = g->jc + panel * nr;
    int64_t cols = g->p->n - j0 < nr ? g->p->n - j0 : nr;
    int64_t base = g->batch * b->batch + g->pc * b->row + j0 * b->col;
    if (g->u.pairs) {
      pack_b_pairs(g, (uint16_t*)dst, base, cols);
      continue;
    }
    for (int64_t k = 0; k < g->kc_now; k++)
      for (int64_t j = cols; j < nr; j++) dst[k * nr + j] = 0.0f;
    int64_t done = b->row == 1 ? pack_b_columns(g, dst, base, cols) : 0;
    for (int64_t j = done; j < cols; j++)
      for (int64_t k = 0; k < g->kc_now; k++)
        dst[k * nr + j] = element(b, base + k * b->row + j * b->col);
    for (int64_t j = 0; j < done; j++) /* K past the last block of 8 */
      for (int64_t k = g->kc_now / 8 * 8; k < g->kc_now; k++)
        dst[k * nr + j] = element(b, base + k + j * b->col);
  }
}

/* A row of n bfloat16 in runs of AMX_K, step apart, zero from n to padded. */
static V4 void copy_runs(uint16_t* dst, const uint16_t* src, int64_t n, int64_t padded,
                         int64_t step) {
  for (int64_t k = 0; k < padded; k += AMX_K, dst += step) {
    __mmask32 mask = first_lanes(n - k);
    _mm512_storeu_si512(dst, _mm512_maskz_loadu_epi16(mask, src + k));
  }
}

/* The same for a row of n float16 split into hi and lo (Micro.split): lo's run lo_at after
 * hi's. */
static V4 void split_runs(uint16_t* dst, const uint16_t* src, int64_t n, int64_t padded,
                          int64_t step, int64_t lo_at) {
  for (int64_t k = 0; k < padded; k += AMX_K, dst += step) {
    __mmask32 mask = first_lanes(n - k);
    __m512i hi, lo;
    split32(_mm512_maskz_loadu_epi16(mask, src + k), &hi, &lo);
    _mm512_storeu_si512(dst, hi);
    _mm512_storeu_si512(dst + lo_at, lo);
  }
}

/* The same in pairs: per K block of AMX_K, a panel's rows of AMX_K elements (hi's then lo's
 * where split), zero past the K block's end and the rows. */
static void pack_a_pairs(const Gemm* g, uint16_t* dst, int64_t i0, int64_t rows) {
  const tilec_gemm_operand* a = &g->p->a;
  int mr = g->u.mr, parts = 1 + g->u.split;
  int64_t kc = kstride(g) * 2 / parts, step = parts * mr * AMX_K, lo_at = mr * AMX_K;
  if (a->col != 1 || rows % mr != 0)
    memset(dst, 0, (size_t)(round_up(rows, mr) * kc * parts) * sizeof(uint16_t));
  for (int64_t i = 0; i < rows; i++) {
    uint16_t* panel = dst + (i / mr) * kc * mr * parts + i % mr * AMX_K;
    int64_t base = g->batch * a->batch + (g->m0 + i0 + i) * a->row + g->pc * a->col;
    const uint16_t* row = (const uint16_t*)a->data + base;
    if (a->col == 1 && g->u.split) {
      split_runs(panel, row, g->kc_now, kc, step, lo_at);
      continue;
    }
    if (a->col == 1) {
      copy_runs(panel, row, g->kc_now, kc, step);
      continue;
    }
    for (int64_t k = 0; k < g->kc_now; k++) {
      uint16_t* at_k = panel + k / AMX_K * step + k % AMX_K;
      if (g->u.split)
        split_bits(element(a, base + k * a->col), at_k, at_k + lo_at);
      else
        *at_k = bits_at(a, base + k * a->col);
    }
  }
}

/* The full panels of A's rows [i0, i0 + rows) (rows contiguous along K), K [0, kc_now / 8 *
 * 8): blocks of up to 8 rows x 8 K read as runs of the rows, transposed in registers and
 * stored as runs of the panel (masked where a panel's rows are not a multiple of 8), every
 * row's lines PACK_AHEAD ahead prefetched.  Returns the rows it packed. */
static V3 int64_t pack_a_panels(const Gemm* g, float* dst, int64_t i0, int64_t rows) {
  const tilec_gemm_operand* a = &g->p->a;
  int mr = g->u.mr, size = element_bytes(a->dtype);
  int64_t kc = g->kc_now, full = rows / mr * mr;
  int64_t base = g->batch * a->batch + (g->m0 + i0) * a->row + g->pc;
  for (int64_t i = 0; i < full; i += mr) {
    float* panel = dst + i * kc;
    for (int64_t k = 0; k + 8 <= kc; k += 8) {
      int line_starts = (k * size & 63) == 0;    /* k is the first element of a line */
      for (int r0 = 0; r0 < mr; r0 += 8) {
        int lanes = mr - r0 < 8 ? mr - r0 : 8;
        __m256 r[8];
#pragma GCC unroll 8
        for (int t = 0; t < 8; t++) {
          const char* row = at(a, base + (i + r0 + t) * a->row + k);
          if (t < lanes && line_starts) _mm_prefetch(row + PACK_AHEAD * 64, _MM_HINT_T0);
          r[t] = t < lanes ? widen8(row, a->dtype) : _mm256_setzero_ps();
        }
        transpose8(r);
        if (lanes == 8) {
#pragma GCC unroll 8
          for (int t = 0; t < 8; t++) _mm256_storeu_ps(panel + (k + t) * mr + r0, r[t]);
          continue;
        }
        __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(lanes),
                                          _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
#pragma GCC unroll 8
        for (int t = 0; t < 8; t++) _mm256_maskstore_ps(panel + (k + t) * mr + r0, mask, r[t]);
      }
    }
  }
  return full;
}

/* A's rows [i0, i0 + rows) and columns [pc, pc + kc_now), packed into panels MR high. */
static void pack_a(const Gemm* g, float* dst, int64_t i0, int64_t rows) {
  const tilec_gemm_operand* a = &g->p->a;
  int mr = g->u.mr;
  if (g->u.pairs) {
    pack_a_pairs(g, (uint16_t*)dst, i0, rows);
    return;
  }
  float line[4096];
  int64_t kc = g->kc_now, done = a->col == 1 ? pack_a_panels(g, dst, i0, rows) : 0;
  for (int64_t i = 0; i < done; i++) { /* K past the last block of 8 */
    int64_t base = g->batch * a->batch + (g->m0 + i0 + i) * a->row + g->pc;
    for (int64_t k = kc / 8 * 8; k < kc; k++)
      dst[(i / mr) * kc * mr + k * mr + i % mr] = element(a, base + k);
  }
  for (int64_t i = done; i < rows; i++) {
    float* panel = dst + (i / mr) * kc * mr + i % mr;
    int64_t base = g->batch * a->batch + (g->m0 + i0 + i) * a->row + g->pc * a->col;
    if (a->col == 1 && i + PACK_AHEAD < rows)
      prefetch_run(at(a, base + PACK_AHEAD * a->row), kc * element_bytes(a->dtype));
    if (a->col == 1 && kc <= 4096) {
      widen(line, at(a, base), a->dtype, kc);
      for (int64_t k = 0; k < kc; k++) panel[k * mr] = line[k];
    } else {
      for (int64_t k = 0; k < kc; k++) panel[k * mr] = element(a, base + k * a->col);
    }
  }
  int64_t padded = (rows + mr - 1) / mr * mr;
  for (int64_t i = rows; i < padded; i++) {
    float* panel = dst + (i / mr) * kc * mr + i % mr;
    for (int64_t k = 0; k < kc; k++) panel[k * mr] = 0.0f;
  }
}

/* One micro-tile at c (rows x cols of it real), through a full-size buffer at the edges. */
static void micro_tile(const Gemm* g, const float* ap, const float* bp, float* c, int64_t rows,
                       int64_t cols, int accumulate, const float* next) {
  int mr = g->u.mr, nr = g->u.nr;
  if (rows == mr && cols == nr) {
    g->u.micro(g->kc_now, ap, bp, c, g->ld, accumulate, next);
    return;
  }
  float edge[MAX_MR * MAX_NR];
  for (int64_t i = 0; i < rows && accumulate; i++)
    memcpy(edge + i * nr, c + i * g->ld, (size_t)cols * sizeof(float));
  g->u.micro(g->kc_now, ap, bp, edge, nr, accumulate, NULL);
  for (int64_t i = 0; i < rows; i++)
    memcpy(c + i * g->ld, edge + i * nr, (size_t)cols * sizeof(float));
}

/* Share `tile` of `tiles` of packed B's panel at column j, fetched into L2 while the tiles
 * before it run on the panel before: the panels of a K block of 512 do not fit L1 and are
 * read from L3 once per item, each by its first tile otherwise. */
static void prefetch_panel(const Gemm* g, int64_t j, int64_t tile, int64_t tiles) {
  int64_t lines = kstride(g) * g->u.nr * (int64_t)sizeof(float) / 64;
  int64_t share = (lines + tiles - 1) / tiles, from = tile * share;
  const char* panel = (const char*)(g->bp + j * kstride(g));
  for (int64_t line = from; line < from + share && line < lines; line++)
    _mm_prefetch(panel + 64 * line, _MM_HINT_T1);
}

/* What a thread's packed A holds: a call's rows [i0, i0 + mc) of a batch and pass, K block
 * pc.  Items are row blocks by column slices; a thread given the next slice of the row block
 * it just computed (one thread always, two often) reuses the panels instead of packing them
 * again. */
typedef struct {
  uint64_t call;
  int64_t batch, m0, i0, pc;
  const float* at;
} PackedA;

static __thread PackedA packed_a_holds;
static uint64_t gemm_calls;

static int holds(const PackedA* x, const PackedA* y) {
  return x->call == y->call && x->batch == y->batch && x->m0 == y->m0 && x->i0 == y->i0
         && x->pc == y->pc && x->at == y->at;
}

/* Whether each item packs its own slice of B: with one row block an item's slice is read by
 * that item alone, and packed right before its tiles it is still in L2 for them (with a
 * packing pass of its own, the whole block went out to memory and back between the two). */
static int packs_in_items(const Gemm* g) { return g->m <= g->mc; }

static void compute_items(void* ctx, int64_t first, int64_t last) {
  Gemm* g = ctx;
  int mr = g->u.mr, nr = g->u.nr;
  float* ap = grown(&packed_a, g->mc * round_up(g->kc, AMX_K));
  if (ap == NULL) {
    __atomic_store_n(&g->failed, 1, __ATOMIC_RELAXED);
    return;
  }
  if (g->u.tiles) amx_begin();
  for (int64_t item = first; item < last; item++) {
    int64_t i0 = item / g->slices * g->mc, s0 = item % g->slices * g->slice;
    int64_t rows = g->m - i0 < g->mc ? g->m - i0 : g->mc;
    int64_t s1 = s0 + g->slice < g->nc_now ? s0 + g->slice : g->nc_now;
    if (packs_in_items(g)) pack_b(g, s0 / nr, (s1 + nr - 1) / nr);
    PackedA want = {g->call, g->batch, g->m0, i0, g->pc, ap};
    if (!holds(&want, &packed_a_holds)) {
      pack_a(g, ap, i0, rows);
      packed_a_holds = want;
    }
    for (int64_t j = s0; j < s1; j += nr)
      for (int64_t i = 0; i < rows; i += mr) {
        if (j + nr < s1) prefetch_panel(g, j + nr, i / mr, (rows + mr - 1) / mr);
        float* c = g->acc + (i0 + i) * g->ld + j;
        /* the next full tile, when this pass reads the accumulators */
        const float* next = i + 2 * mr <= rows ? c + mr * g->ld
                          : j + 2 * nr <= s1 && rows >= mr ? g->acc + i0 * g->ld + j + nr : NULL;
        micro_tile(g, ap + i * kstride(g), g->bp + j * kstride(g), c,
                   rows - i < mr ? rows - i : mr, s1 - j < nr ? s1 - j : nr, g->pc > 0,
                   g->pc > 0 ? next : NULL);
      }
    if (g->pc + g->kc_now >= g->p->k)
      g->p->epilogue(g->p->ctx, g->acc + i0 * g->ld + s0, g->ld,
                     g->batch * g->rows + g->m0 + i0, g->batch * g->rows + g->m0 + i0 + rows,
                     g->jc + s0, g->jc + s1);
  }
  if (g->u.tiles) amx_end();
}

/* Items: row blocks by column slices, at least four per thread where the block allows, and
 * a multiple of the threads where up to twice the slices allow it.  The items cost about the
 * same and are handed out one at a time: 7 row blocks by 2 slices on 4 threads would leave
 * two threads idle for the last item, 7 by 4 none. */
static void plan_items(Gemm* g) {
  int64_t row_blocks = (g->m + g->mc - 1) / g->mc;
  int64_t panels = (g->nc_now + g->u.nr - 1) / g->u.nr;
  int64_t threads = tilec_num_threads(), wanted = 4 * threads;
  int64_t per_block = (wanted + row_blocks - 1) / row_blocks;
  for (int64_t more = per_block; more <= 2 * per_block && more <= panels; more++)
    if (row_blocks * more % threads == 0) {
      per_block = more;
      break;
    }
  if (per_block > panels) per_block = panels;
  int64_t panels_per_slice = (panels + per_block - 1) / per_block;
  g->slice = panels_per_slice * g->u.nr;
  g->slices = (g->nc_now + g->slice - 1) / g->slice;
}

static int gemm_batch(Gemm* g) {
  const tilec_gemm_problem* p = g->p;
  for (g->jc = 0; g->jc < p->n; g->jc += g->nc) {
    g->nc_now = p->n - g->jc < g->nc ? p->n - g->jc : g->nc;
    plan_items(g);
    g->pc = 0;
    do {
      g->kc_now = p->k - g->pc < g->kc ? p->k - g->pc : g->kc;
      int64_t panels = (g->nc_now + g->u.nr - 1) / g->u.nr;
      if (!packs_in_items(g)) tilec_parallel_for(panels, SHARED_TRAFFIC, pack_b, g);
      tilec_parallel_items((g->m + g->mc - 1) / g->mc * g->slices, compute_items, g);
      if (g->failed) return TILEC_ERR_NO_MEMORY;
      g->pc += g->kc_now;
    } while (g->pc < p->k);
  }
  return TILEC_OK;
}

/* Rows per pass: the accumulators (rows x nc floats) are bounded, B is packed once a pass. */
#define ROWS_PER_PASS 2048

static int gemm_packed(const tilec_gemm_problem* p) {
  Gemm g = {.p = p, .u = micro_for(p), .rows = p->m,
            .call = __atomic_add_fetch(&gemm_calls, 1, __ATOMIC_RELAXED)};
  int64_t batches = p->batch;
  if (p->b.batch == 0 && p->a.batch == p->m * p->a.row) { /* one problem of batch * m rows */
    g.rows = p->m * p->batch;
    batches = 1;
  }
  g.kc = p->kc > 0 ? p->kc : 256;
  g.nc = round_up(p->nc > 0 ? p->nc : 4096, g.u.nr);
  if (g.nc > round_up(p->n, g.u.nr)) g.nc = round_up(p->n, g.u.nr);
  if (g.kc > 4096) g.kc = 4096; /* the packing's line buffers */
  /* passes and row blocks of equal size: no thread is left with a short last block */
  int64_t pass = (g.rows + ROWS_PER_PASS - 1) / ROWS_PER_PASS;
  pass = (g.rows + pass - 1) / pass;
  int64_t most = round_up(p->mc > 0 ? p->mc : 336, g.u.mr), blocks = (pass + most - 1) / most;
  g.mc = round_up((pass + blocks - 1) / blocks, g.u.mr);
  g.bp = grown(&packed_b, g.nc * round_up(g.kc, AMX_K));
  g.ld = g.nc + 16;
  g.acc = grown(&accumulators, pass * g.ld);
  if (g.bp == NULL || g.acc == NULL) return TILEC_ERR_NO_MEMORY;
  for (g.batch = 0; g.batch < batches; g.batch++)
    for (g.m0 = 0; g.m0 < g.rows; g.m0 += pass) {
      g.m = g.rows - g.m0 < pass ? g.rows - g.m0 : pass;
      int status = gemm_batch(&g);
      if (status != TILEC_OK) return status;
    }
  return TILEC_OK;
}

/* -- the small-M problem -------------------------------------------------------------------- */

/* B's rows contiguous (x @ w): items of `rows` rows of B (a split) by `width` columns.
 * Each item streams its rows as they lie in memory, a few rows at a time (so that the
 * prefetchers follow a few long streams, not one per row), against every row of A, into its
 * split's float32 sums; a second pass adds the splits of each column in split order and hands
 * them to the epilogue.  Items and splits depend on the shape alone, so the sums do not change with
 * the number of threads.  B's columns contiguous (x @ transpose(w)): each item owns `width`
 * columns and takes the dot products of each, read once, with every row of A. */
typedef struct {
  const tilec_gemm_problem* p;
  int64_t batch;
  const float* a;          /* the batch's rows of A, widened: k x m for B's rows (A
                            * transposed: a row of B's m factors in one line), else m x k */
  int pairs;               /* bfloat16 A and B on vdpbf16ps (dp_streams).  B's rows: a holds
                            * A's pairs, (k + 1) / 2 x m words, the elements k and k + 1 of
                            * row i at word (k / 2) m + i (zero past K); B's columns: A's rows
                            * as they are, m x k bfloat16 */
  int64_t width;           /* columns per item */
  int64_t splits, rows;    /* B's rows: splits of K of `rows` rows each */
  float* sums;             /* B's rows: splits x m rows of the splits' sums, ld apart */
  int64_t ld;              /* floats from a row of sums to the next: n, and a line more
                            * where rows n apart would all fall in one set of L1 (n a
                            * multiple of 1024: 16 rows of a group, 12 ways) */
} Stream;

#define STREAM_ACC 16384    /* floats of an item's sums (m x width), in L2 */
#define STREAM_ITEMS 32     /* items wanted per call (shape-only: no thread count) */
#define STREAM_MIN_ROWS 256 /* rows of B a split holds at least */
#define STREAM_ROWS 16      /* rows of B read side by side; the sums stay in registers */
#define STREAM_ROWS_1 8     /* the same for one row of A: each row a line or two a step */
#define STREAM_ROWS_FEW 8   /* ... for 2-4 rows of A: 8 streams read 1.05-1.16x faster than
                             * 16 there (6 rows 0.96-1.08x, 16 rows 0.85-0.94x) */
#define ALWAYS_INLINE inline __attribute__((always_inline))

/* 16 elements of B from element e of `line` on (float32, float16 or bfloat16) as float32;
 * lanes past live 0. */
static ALWAYS_INLINE V4 __m512 b_elements(const void* line, int64_t e, int dtype,
                                         __mmask16 live) {
  if (dtype == TILEC_GEMM_F32) return _mm512_maskz_loadu_ps(live, (const float*)line + e);
  __m256i h = _mm256_maskz_loadu_epi16(live, (const uint16_t*)line + e);
  if (dtype == TILEC_GEMM_F16) return _mm512_cvtph_ps(h);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* Vector v (16 elements) of a line of B. */
static ALWAYS_INLINE V4 __m512 b_vector(const void* line, int64_t v, int dtype) {
  return b_elements(line, 16 * v, dtype, 0xffff);
}

static ALWAYS_INLINE V3 __m256 b_vector8(const void* line, int64_t v, int dtype) {
  if (dtype == TILEC_GEMM_F32) return _mm256_loadu_ps((const float*)line + 8 * v);
  __m128i h = _mm_loadu_si128((const __m128i*)line + v);
  if (dtype == TILEC_GEMM_F16) return _mm256_cvtph_ps(h);
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* A chunk reads STREAM_ROWS rows of B side by side (STREAM_ROWS_1 for one row of A, a
 * decode), a line or a few of each a step: the hardware prefetchers fall behind on so many
 * short streams (one row of A read float32 at 16 GB/s, and a weight stored [N, K], read in
 * the same order by dots_v4, at 23).  The lines STREAM_AHEAD bytes ahead in each row are
 * prefetched (one row of A: float32 1.23x, bfloat16 1.21x the bandwidth, 512 bytes ahead
 * 4-10% less, 2048 3-14% less, 4096 19-37% less; 2-16 rows: up to 1.43x). */
#define STREAM_AHEAD 1024

static ALWAYS_INLINE void prefetch_ahead(const char* from, int64_t bytes) {
  for (int64_t u = 0; u < bytes; u += 64) _mm_prefetch(from + STREAM_AHEAD + u, _MM_HINT_T0);
}

/* A chunk of rows of B read side by side, and where its sums go. */
typedef struct {
  const char* line0; /* B's element at the chunk's first row and the item's first column */
  int64_t row;       /* bytes from a row of B to the next */
  int64_t rows;      /* rows in the chunk */
  int dtype;
  const float* a; /* A's element at the group's first row and the chunk's first row of B */
  int64_t m;      /* floats from A's elements for a row of B to those for the next */
  float* acc;     /* the group's first row of sums, at the item's first column */
  int64_t ld;
} Chunk;

/* Vectors [v, v + NV) of the chunk's columns for R rows of A: the R x NV sums stay in
 * registers over the chunk's rows, each line of B is loaded once.  Inlined with constant R,
 * NV and dtype (B's, the chunk's), the arrays of fixed size and the loops over them unrolled:
 * the arrays become registers, the widening one instruction (sized [R][NV], C's variable-length
 * arrays, they stayed on the stack: the B line copied there and a load, FMA and store a
 * vector). */
static ALWAYS_INLINE V4 void stream_group(const Chunk* ch, int64_t v, const int dtype,
                                          const int R, const int NV) {
  const char* line0 = ch->line0;
  const float* a = ch->a;
  float* acc = ch->acc;
  int64_t row = ch->row, m = ch->m, ld = ch->ld;
  __m512 c[32]; /* c[i * NV + u]: R x NV <= 32 (fixed sizes: a VLA stays in memory) */
#pragma GCC unroll 16
  for (int i = 0; i < R; i++)
#pragma GCC unroll 16
    for (int u = 0; u < NV; u++) c[i * NV + u] = _mm512_loadu_ps(acc + i * ld + 16 * (v + u));
  /* One row of A and a full chunk: row r of B into partial sums r % 4, added at the end.  With
   * one sum the chunk's FMAs waited on each other, and those queued behind them held back the
   * loads of the lines after (4 sums: 1.07-1.11x the bandwidth, median of 10 alternating
   * rounds, K x N from 4096 x 4096 to 4096 x 14336; 8 sums no more than 4). */
  if (R == 1 && ch->rows == STREAM_ROWS_1) {
    __m512 d[4][4];
#pragma GCC unroll 8
    for (int r = 0; r < STREAM_ROWS_1; r++) {
      const char* line = line0 + r * row;
      prefetch_ahead(line + 16 * v * element_bytes(dtype), 16 * NV * element_bytes(dtype));
      __m512 ar = _mm512_set1_ps(a[r * m]);
#pragma GCC unroll 4
      for (int u = 0; u < NV; u++)
        d[r % 4][u] = r < 4 ? _mm512_mul_ps(ar, b_vector(line, v + u, dtype))
                            : _mm512_fmadd_ps(ar, b_vector(line, v + u, dtype), d[r % 4][u]);
    }
#pragma GCC unroll 4
    for (int u = 0; u < NV; u++)
      _mm512_storeu_ps(acc + 16 * (v + u),
                       _mm512_add_ps(c[u], _mm512_add_ps(_mm512_add_ps(d[0][u], d[1][u]),
                                                         _mm512_add_ps(d[2][u], d[3][u]))));
    return;
  }
  for (int64_t r = 0; r < ch->rows; r++) {
    const char* line = line0 + r * row;
    __m512 bv[8];
    prefetch_ahead(line + 16 * v * element_bytes(dtype), 16 * NV * element_bytes(dtype));
#pragma GCC unroll 16
    for (int u = 0; u < NV; u++) bv[u] = b_vector(line, v + u, dtype);
#pragma GCC unroll 16
    for (int i = 0; i < R; i++) {
      __m512 ai = _mm512_set1_ps(a[r * m + i]);
#pragma GCC unroll 16
      for (int u = 0; u < NV; u++) c[i * NV + u] = _mm512_fmadd_ps(ai, bv[u], c[i * NV + u]);
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < R; i++)
#pragma GCC unroll 16
    for (int u = 0; u < NV; u++) _mm512_storeu_ps(acc + i * ld + 16 * (v + u), c[i * NV + u]);
}

/* The same with 8 lanes and 16 registers (x86-64-v3). */
static ALWAYS_INLINE V3 void stream_group8(const Chunk* ch, int64_t v, const int dtype,
                                           const int R, const int NV) {
  const char* line0 = ch->line0;
  const float* a = ch->a;
  float* acc = ch->acc;
  int64_t row = ch->row, m = ch->m, ld = ch->ld;
  __m256 c[16]; /* c[i * NV + u]: R x NV <= 16 */
#pragma GCC unroll 16
  for (int i = 0; i < R; i++)
#pragma GCC unroll 16
    for (int u = 0; u < NV; u++) c[i * NV + u] = _mm256_loadu_ps(acc + i * ld + 8 * (v + u));
  if (R == 1 && ch->rows == STREAM_ROWS_1) {   /* as stream_group's, in 2 sums (1.06-1.12x) */
    __m256 d[2][4];
#pragma GCC unroll 8
    for (int r = 0; r < STREAM_ROWS_1; r++) {
      const char* line = line0 + r * row;
      prefetch_ahead(line + 8 * v * element_bytes(dtype), 8 * NV * element_bytes(dtype));
      __m256 ar = _mm256_broadcast_ss(a + r * m);
#pragma GCC unroll 4
      for (int u = 0; u < NV; u++)
        d[r % 2][u] = r < 2 ? _mm256_mul_ps(ar, b_vector8(line, v + u, dtype))
                            : _mm256_fmadd_ps(ar, b_vector8(line, v + u, dtype), d[r % 2][u]);
    }
#pragma GCC unroll 4
    for (int u = 0; u < NV; u++)
      _mm256_storeu_ps(acc + 8 * (v + u), _mm256_add_ps(c[u], _mm256_add_ps(d[0][u], d[1][u])));
    return;
  }
  for (int64_t r = 0; r < ch->rows; r++) {
    const char* line = line0 + r * row;
    __m256 bv[4];
    prefetch_ahead(line + 8 * v * element_bytes(dtype), 8 * NV * element_bytes(dtype));
#pragma GCC unroll 16
    for (int u = 0; u < NV; u++) bv[u] = b_vector8(line, v + u, dtype);
#pragma GCC unroll 16
    for (int i = 0; i < R; i++) {
      __m256 ai = _mm256_broadcast_ss(a + r * m + i);
#pragma GCC unroll 16
      for (int u = 0; u < NV; u++) c[i * NV + u] = _mm256_fmadd_ps(ai, bv[u], c[i * NV + u]);
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < R; i++)
#pragma GCC unroll 16
    for (int u = 0; u < NV; u++) _mm256_storeu_ps(acc + i * ld + 8 * (v + u), c[i * NV + u]);
}

/* Vectors per group for R rows and B's type D: R x NV sums, NV vectors of B and a broadcast
 * in the 32 (x86-64-v4) or 16 (x86-64-v3, R <= 12) registers; for one row of A (a decode,
 * bound by memory) two lines of B's row a step, so that its STREAM_ROWS_1 rows of B advance
 * together, as MKL's gemv reads them: 2 vectors of float32, 4 of a half type on x86-64-v4
 * (1.00-1.29x the bandwidth of 2 in ten A/Bs, never less, the rows prefetched ahead). */
#define NV4(R, D) \
  ((R) == 1 ? ((D) == TILEC_GEMM_F32 ? 2 : 4) : (R) <= 2 ? 8 : (R) <= 6 ? 4 : (R) <= 14 ? 2 : 1)
#define NV3(R) ((R) <= 2 ? 4 : (R) <= 6 ? 2 : 1)
#define ROWS_V3 12

/* The rows of A a group takes (GROUP_ROWS: 16, 12, 8, 6, 4, 3, 2 or 1, the sizes compiled
 * below): the most up to `left` and `most`. */
static int64_t group_rows(int64_t left, int64_t most) {
  static const int64_t sizes[] = {16, 12, 8, 6, 4, 3, 2, 1};
  int i = 0;
  while (sizes[i] > left || sizes[i] > most) i++;
  return sizes[i];
}

#define GROUP4(R, NV, DTYPE) stream_group(c, v, DTYPE, R, NV)
#define FULL4(R) \
  case R: \
    for (; v + NV4(R, dtype) <= vectors; v += NV4(R, dtype)) GROUP4(R, NV4(R, dtype), dtype); \
    break;
#define LEFT4(R) \
  case R: for (; v < vectors; v++) GROUP4(R, 1, c->dtype); break;

/* The chunk's whole groups of NV4(m, dtype) vectors (16 lanes) for m rows of A (one of
 * GROUP_ROWS), B's elements of type `dtype` (a constant where inlined); returns the vectors
 * done. */
static ALWAYS_INLINE V4 int64_t groups_v4(const Chunk* c, int64_t m, int64_t vectors,
                                          const int dtype) {
  int64_t v = 0;
  switch (m) {
    FULL4(1) FULL4(2) FULL4(3) FULL4(4) FULL4(6) FULL4(8) FULL4(12) FULL4(16)
    default: break;
  }
  return v;
}

static V4 void stream_chunk_v4(const Chunk* c, int64_t m, int64_t vectors) {
  int64_t v = c->dtype == TILEC_GEMM_F32 ? groups_v4(c, m, vectors, TILEC_GEMM_F32)
            : c->dtype == TILEC_GEMM_F16 ? groups_v4(c, m, vectors, TILEC_GEMM_F16)
                                         : groups_v4(c, m, vectors, TILEC_GEMM_BF16);
  switch (m) { /* the vectors left over, one at a time, any dtype */
    LEFT4(1) LEFT4(2) LEFT4(3) LEFT4(4) LEFT4(6) LEFT4(8) LEFT4(12) LEFT4(16)
    default: break;
  }
}

/* stream_group for bfloat16 A and B on vdpbf16ps (Stream.pairs): two rows of B a step, each
 * 16 columns of the two interleaved into pairs (the second row zero past the chunk's end),
 * against a pair of A's elements per row of A: half the instructions of the widened FMAs. */
static ALWAYS_INLINE DP void stream_group_dp(const Chunk* ch, int64_t v, const int R,
                                             const int NV) {
  const __m512i order = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25,
                                         9, 24, 8, 23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2,
                                         17, 1, 16, 0);
  const char* line0 = ch->line0;
  const uint32_t* a = (const uint32_t*)ch->a;
  float* acc = ch->acc;
  int64_t row = ch->row, m = ch->m, ld = ch->ld;
  __m512 c[32];
#pragma GCC unroll 16
  for (int i = 0; i < R; i++)
#pragma GCC unroll 16
    for (int u = 0; u < NV; u++) c[i * NV + u] = _mm512_loadu_ps(acc + i * ld + 16 * (v + u));
  for (int64_t r = 0; r < ch->rows; r += 2) {
    const __m256i* line = (const __m256i*)(line0 + r * row);
    const __m256i* next = (const __m256i*)(line0 + (r + 1) * row);
    prefetch_ahead((const char*)(line + v), 32 * NV);
    if (r + 1 < ch->rows) prefetch_ahead((const char*)(next + v), 32 * NV);
    __m512bh bv[8];
#pragma GCC unroll 16
    for (int u = 0; u < NV; u++) {
      __m256i second = r + 1 < ch->rows ? _mm256_loadu_si256(next + v + u) : _mm256_setzero_si256();
      __m512i both = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(line + v + u)),
                                        second, 1);
      bv[u] = (__m512bh)_mm512_permutexvar_epi16(order, both);
    }
#pragma GCC unroll 16
    for (int i = 0; i < R; i++) {
      __m512bh ai = (__m512bh)_mm512_set1_epi32((int)a[r / 2 * m + i]);
#pragma GCC unroll 16
      for (int u = 0; u < NV; u++) c[i * NV + u] = _mm512_dpbf16_ps(c[i * NV + u], ai, bv[u]);
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < R; i++)
#pragma GCC unroll 16
    for (int u = 0; u < NV; u++) _mm512_storeu_ps(acc + i * ld + 16 * (v + u), c[i * NV + u]);
}

#define FULLDP(R) \
  case R: \
    for (; v + NV4(R, TILEC_GEMM_BF16) <= vectors; v += NV4(R, TILEC_GEMM_BF16)) \
      stream_group_dp(c, v, R, NV4(R, TILEC_GEMM_BF16)); \
    break;
#define LEFTDP(R) \
  case R: for (; v < vectors; v++) stream_group_dp(c, v, R, 1); break;

static DP void stream_chunk_dp(const Chunk* c, int64_t m, int64_t vectors) {
  int64_t v = 0;
  switch (m) {
    FULLDP(1) FULLDP(2) FULLDP(3) FULLDP(4) FULLDP(6) FULLDP(8) FULLDP(12) FULLDP(16)
    default: break;
  }
  switch (m) {
    LEFTDP(1) LEFTDP(2) LEFTDP(3) LEFTDP(4) LEFTDP(6) LEFTDP(8) LEFTDP(12) LEFTDP(16)
    default: break;
  }
}

#define GROUP3(R, NV, DTYPE) stream_group8(c, v, DTYPE, R, NV)
#define FULL3(R) \
  case R: for (; v + NV3(R) <= vectors; v += NV3(R)) GROUP3(R, NV3(R), dtype); break;
#define LEFT3(R) \
  case R: for (; v < vectors; v++) GROUP3(R, 1, c->dtype); break;

/* The same with 8 lanes for m rows of A (one of GROUP_ROWS, at most ROWS_V3). */
static ALWAYS_INLINE V3 int64_t groups_v3(const Chunk* c, int64_t m, int64_t vectors,
                                          const int dtype) {
  int64_t v = 0;
  switch (m) {
    FULL3(1) FULL3(2) FULL3(3) FULL3(4) FULL3(6) FULL3(8) FULL3(12)
    default: break;
  }
  return v;
}

static V3 void stream_chunk_v3(const Chunk* c, int64_t m, int64_t vectors) {
  int64_t v = c->dtype == TILEC_GEMM_F32 ? groups_v3(c, m, vectors, TILEC_GEMM_F32)
            : c->dtype == TILEC_GEMM_F16 ? groups_v3(c, m, vectors, TILEC_GEMM_F16)
                                         : groups_v3(c, m, vectors, TILEC_GEMM_BF16);
  switch (m) {
    LEFT3(1) LEFT3(2) LEFT3(3) LEFT3(4) LEFT3(6) LEFT3(8) LEFT3(12)
    default: break;
  }
}

/* A's element (i, k) as Stream.a holds it (widened, k x m, or pairs). */
static float a_element(const Stream* s, int64_t k, int64_t i) {
  if (!s->pairs) return s->a[k * s->p->m + i];
  uint32_t pair = ((const uint32_t*)s->a)[k / 2 * s->p->m + i];
  return tilec_bf16_to_f32((uint16_t)(pair >> (16 * (k % 2))));
}

/* Item `item` of B's rows: its split's sums of its columns, zeroed, then its rows of B in
 * chunks of STREAM_ROWS (STREAM_ROWS_1 or STREAM_ROWS_FEW for fewer rows of A; each chunk's
 * columns in vectors, the last few one at a time). */
static void stream_rows(const Stream* s, int64_t item) {
  const tilec_gemm_problem* p = s->p;
  const tilec_gemm_operand* b = &p->b;
  int64_t blocks = (p->n + s->width - 1) / s->width;
  int64_t split = item / blocks, j0 = item % blocks * s->width;
  int64_t cols = p->n - j0 < s->width ? p->n - j0 : s->width;
  int64_t k0 = split * s->rows, k1 = k0 + s->rows < p->k ? k0 + s->rows : p->k;
  float* acc = s->sums + split * p->m * s->ld + j0;
  for (int64_t i = 0; i < p->m; i++) memset(acc + i * s->ld, 0, (size_t)cols * sizeof(float));
  int v4 = tilec_cpu_level() >= 4, lanes = v4 ? 16 : 8;
  int64_t vectors = cols / lanes, m;
  int64_t step = p->m == 1 ? STREAM_ROWS_1 : p->m <= 4 ? STREAM_ROWS_FEW : STREAM_ROWS;
  for (int64_t r = k0; r < k1; r += step) {
    int64_t rows = k1 - r < step ? k1 - r : step;
    for (int64_t i0 = 0; i0 < p->m; i0 += m) {
      m = group_rows(p->m - i0, v4 ? 16 : ROWS_V3);
      Chunk c = {at(b, s->batch * b->batch + r * b->row + j0), b->row * element_bytes(b->dtype),
                 rows, b->dtype, s->a + r * p->m + i0, p->m, acc + i0 * s->ld, s->ld};
      if (s->pairs) {   /* r is even: splits and chunks are multiples of STREAM_ROWS rows */
        c.a = s->a + r / 2 * p->m + i0;
        stream_chunk_dp(&c, m, vectors);
      } else if (v4)
        stream_chunk_v4(&c, m, vectors);
      else
        stream_chunk_v3(&c, m, vectors);
    }
    for (int64_t j = vectors * lanes; j < cols; j++)
      for (int64_t kk = r; kk < r + rows; kk++) {
        float bj = element(b, s->batch * b->batch + kk * b->row + j0 + j);
        for (int64_t i = 0; i < p->m; i++) acc[i * s->ld + j] += a_element(s, kk, i) * bj;
      }
  }
}

static V3 float sum8(__m256 v) {
  __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  x = _mm_add_ps(x, _mm_movehl_ps(x, x));
  x = _mm_add_ss(x, _mm_movehdup_ps(x));
  return _mm_cvtss_f32(x);
}

/* The same for a B whose columns are contiguous along K (x @ transpose(w), a Linear weight
 * stored [out, in]): dot products of DOT_COLUMNS_V4 (x86-64-v4; DOT_COLUMNS on x86-64-v3's
 * 16 registers) columns of B at a time, each read once where it lies (the rows of a weight
 * side by side, as MKL's gemv reads them), with every row of A, two sums a column.  A half
 * type's rows are prefetched STREAM_AHEAD bytes ahead as the first row of A reads them
 * (x86-64-v4: 1.07-1.18x the bandwidth at M = 1, x86-64-v3: 1.16-1.27x); float32's, read
 * twice as fast a step, gained nothing from it (0.82-1.0x). */
#define DOT_COLUMNS_V4 8   /* 1.09-1.19x the bandwidth of 4 in bfloat16 and float16 */
#define DOT_COLUMNS 4

/* acc[i * ld + j] = A's row i . column j of B for the columns [j0, j0 + cols) of the batch,
 * B's element type `dtype` (a constant where inlined). */
static ALWAYS_INLINE V4 void dots_v4(const Stream* s, int64_t j0, int64_t cols, float* acc,
                                     int64_t ld, const int dtype) {
  const tilec_gemm_problem* p = s->p;
  const tilec_gemm_operand* b = &p->b;
  int64_t k = p->k;
  for (int64_t j = 0; j < cols; j += DOT_COLUMNS_V4) {
    const char* w[DOT_COLUMNS_V4];
    int64_t nc = cols - j < DOT_COLUMNS_V4 ? cols - j : DOT_COLUMNS_V4;
#pragma GCC unroll 8
    for (int c = 0; c < DOT_COLUMNS_V4; c++)    /* past the last column: the last again */
      w[c] = at(b, s->batch * b->batch + (j0 + j + (c < nc ? c : nc - 1)) * b->col);
    for (int64_t i = 0; i < p->m; i++) {
      const float* a = s->a + i * k;
      __m512 sum[DOT_COLUMNS_V4][2];
#pragma GCC unroll 8
      for (int c = 0; c < DOT_COLUMNS_V4; c++) sum[c][0] = sum[c][1] = _mm512_setzero_ps();
      int64_t e = 0;
      for (; e + 32 <= k; e += 32) {
        __m512 a0 = _mm512_loadu_ps(a + e), a1 = _mm512_loadu_ps(a + e + 16);
#pragma GCC unroll 8
        for (int c = 0; c < DOT_COLUMNS_V4; c++) {
          if (dtype != TILEC_GEMM_F32 && i == 0)
            prefetch_ahead(w[c] + e * element_bytes(dtype), 64);
          sum[c][0] = _mm512_fmadd_ps(b_elements(w[c], e, dtype, 0xffff), a0, sum[c][0]);
          sum[c][1] = _mm512_fmadd_ps(b_elements(w[c], e + 16, dtype, 0xffff), a1, sum[c][1]);
        }
      }
      for (; e < k; e += 16) {
        __mmask16 live = k - e >= 16 ? 0xffff : (__mmask16)((1u << (k - e)) - 1);
        __m512 a0 = _mm512_maskz_loadu_ps(live, a + e);
#pragma GCC unroll 8
        for (int c = 0; c < DOT_COLUMNS_V4; c++)
          sum[c][0] = _mm512_fmadd_ps(b_elements(w[c], e, dtype, live), a0, sum[c][0]);
      }
#pragma GCC unroll 8
      for (int c = 0; c < DOT_COLUMNS_V4; c++)
        if (c < nc) acc[i * ld + j + c] = _mm512_reduce_add_ps(_mm512_add_ps(sum[c][0], sum[c][1]));
    }
  }
}

static V4 void dots_columns_v4(const Stream* s, int64_t j0, int64_t cols, float* acc,
                               int64_t ld) {
  int dtype = s->p->b.dtype;
  if (dtype == TILEC_GEMM_F32)
    dots_v4(s, j0, cols, acc, ld, TILEC_GEMM_F32);
  else if (dtype == TILEC_GEMM_F16)
    dots_v4(s, j0, cols, acc, ld, TILEC_GEMM_F16);
  else
    dots_v4(s, j0, cols, acc, ld, TILEC_GEMM_BF16);
}

/* Elements of K that dots_dp takes for all of 8 or more rows of A before the next: the
 * block of a group's columns (8 KiB) and of A's rows (up to 16 KiB) stay in L1 for every row
 * of A (at K = 4096: 8 rows 1.09x, 16 rows 1.16x; fewer rows of A read K whole, 0.95-0.98x
 * in blocks). */
#define DOT_BLOCK 512

/* dots_v4 for bfloat16 A and B on vdpbf16ps (Stream.pairs): a column's run of K and a row of
 * A's are both pairs already, so each step takes 32 elements of both as they lie, no
 * widening, two products a lane; K in blocks (DOT_BLOCK), its tail masked. */
static DP void dots_dp(const Stream* s, int64_t j0, int64_t cols, float* acc, int64_t ld) {
  const tilec_gemm_problem* p = s->p;
  const tilec_gemm_operand* b = &p->b;
  const uint16_t* a = (const uint16_t*)s->a;
  int64_t k = p->k, block = p->m >= 8 ? DOT_BLOCK : k;
  __m512 part[TILEC_GEMM_SMALL_M][DOT_COLUMNS_V4]; /* row i's sums of each column so far */
  for (int64_t j = 0; j < cols; j += DOT_COLUMNS_V4) {
    const uint16_t* w[DOT_COLUMNS_V4];
    int64_t nc = cols - j < DOT_COLUMNS_V4 ? cols - j : DOT_COLUMNS_V4;
#pragma GCC unroll 8
    for (int c = 0; c < DOT_COLUMNS_V4; c++)    /* past the last column: the last again */
      w[c] = at(b, s->batch * b->batch + (j0 + j + (c < nc ? c : nc - 1)) * b->col);
    for (int64_t e0 = 0; e0 < k; e0 += block) {
      int64_t e1 = k - e0 < block ? k : e0 + block;
      for (int64_t i = 0; i < p->m; i++) {
        const uint16_t* ai = a + i * k;
        __m512 sum[DOT_COLUMNS_V4][2];
#pragma GCC unroll 8
        for (int c = 0; c < DOT_COLUMNS_V4; c++) {
          sum[c][0] = e0 > 0 ? part[i][c] : _mm512_setzero_ps();
          sum[c][1] = _mm512_setzero_ps();
        }
        int64_t e = e0;
        for (; e + 64 <= e1; e += 64) {
          __m512bh a0 = (__m512bh)_mm512_loadu_si512(ai + e);
          __m512bh a1 = (__m512bh)_mm512_loadu_si512(ai + e + 32);
#pragma GCC unroll 8
          for (int c = 0; c < DOT_COLUMNS_V4; c++) {
            if (i == 0) prefetch_ahead((const char*)(w[c] + e), 128);
            sum[c][0] = _mm512_dpbf16_ps(sum[c][0], a0, (__m512bh)_mm512_loadu_si512(w[c] + e));
            sum[c][1] = _mm512_dpbf16_ps(sum[c][1], a1,
                                         (__m512bh)_mm512_loadu_si512(w[c] + e + 32));
          }
        }
        for (; e < e1; e += 32) {
          __mmask32 live = first_lanes(e1 - e);
          __m512bh a0 = (__m512bh)_mm512_maskz_loadu_epi16(live, ai + e);
#pragma GCC unroll 8
          for (int c = 0; c < DOT_COLUMNS_V4; c++)
            sum[c][0] = _mm512_dpbf16_ps(sum[c][0], a0,
                                         (__m512bh)_mm512_maskz_loadu_epi16(live, w[c] + e));
        }
#pragma GCC unroll 8
        for (int c = 0; c < DOT_COLUMNS_V4; c++) part[i][c] = _mm512_add_ps(sum[c][0], sum[c][1]);
      }
    }
    for (int64_t i = 0; i < p->m; i++)
#pragma GCC unroll 8
      for (int c = 0; c < DOT_COLUMNS_V4; c++)
        if (c < nc) acc[i * ld + j + c] = _mm512_reduce_add_ps(part[i][c]);
  }
}

/* x86-64-v3: dots_v4 on 8 lanes, the last k % 16 elements one at a time. */
static ALWAYS_INLINE V3 void dots_v3(const Stream* s, int64_t j0, int64_t cols, float* acc,
                                     int64_t ld, const int dtype) {
  const tilec_gemm_problem* p = s->p;
  const tilec_gemm_operand* b = &p->b;
  int64_t k = p->k;
  for (int64_t j = 0; j < cols; j += DOT_COLUMNS) {
    const char* w[DOT_COLUMNS];
    int64_t nc = cols - j < DOT_COLUMNS ? cols - j : DOT_COLUMNS;
#pragma GCC unroll 4
    for (int c = 0; c < DOT_COLUMNS; c++)
      w[c] = at(b, s->batch * b->batch + (j0 + j + (c < nc ? c : nc - 1)) * b->col);
    for (int64_t i = 0; i < p->m; i++) {
      const float* a = s->a + i * k;
      __m256 sum[DOT_COLUMNS][2];
#pragma GCC unroll 4
      for (int c = 0; c < DOT_COLUMNS; c++) sum[c][0] = sum[c][1] = _mm256_setzero_ps();
      int64_t e = 0;
      for (; e + 16 <= k; e += 16) {
        __m256 a0 = _mm256_loadu_ps(a + e), a1 = _mm256_loadu_ps(a + e + 8);
#pragma GCC unroll 4
        for (int c = 0; c < DOT_COLUMNS; c++) {
          if (dtype != TILEC_GEMM_F32 && i == 0 && e % 32 == 0)
            prefetch_ahead(w[c] + e * element_bytes(dtype), 64);
          sum[c][0] = _mm256_fmadd_ps(widen8((const char*)w[c] + e * element_bytes(dtype), dtype),
                                      a0, sum[c][0]);
          sum[c][1] = _mm256_fmadd_ps(
              widen8((const char*)w[c] + (e + 8) * element_bytes(dtype), dtype), a1, sum[c][1]);
        }
      }
#pragma GCC unroll 4
      for (int c = 0; c < DOT_COLUMNS; c++) {
        if (c >= nc) break;
        float total = sum8(_mm256_add_ps(sum[c][0], sum[c][1]));
        for (int64_t r = e; r < k; r++)
          total += a[r] * element(b, s->batch * b->batch + (j0 + j + c) * b->col + r * b->row);
        acc[i * ld + j + c] = total;
      }
    }
  }
}

static V3 void dots_columns_v3(const Stream* s, int64_t j0, int64_t cols, float* acc,
                               int64_t ld) {
  int dtype = s->p->b.dtype;
  if (dtype == TILEC_GEMM_F32)
    dots_v3(s, j0, cols, acc, ld, TILEC_GEMM_F32);
  else if (dtype == TILEC_GEMM_F16)
    dots_v3(s, j0, cols, acc, ld, TILEC_GEMM_F16);
  else
    dots_v3(s, j0, cols, acc, ld, TILEC_GEMM_BF16);
}

#define COLUMNS_ACC 4096 /* floats of an item's sums, B's columns contiguous */

static void column_items(void* ctx, int64_t first, int64_t last) {
  const Stream* s = ctx;
  const tilec_gemm_problem* p = s->p;
  float acc[COLUMNS_ACC];
  for (int64_t item = first; item < last; item++) {
    int64_t j0 = item * s->width;
    int64_t cols = p->n - j0 < s->width ? p->n - j0 : s->width;
    if (s->pairs)
      dots_dp(s, j0, cols, acc, s->width);
    else if (tilec_cpu_level() >= 4)
      dots_columns_v4(s, j0, cols, acc, s->width);
    else
      dots_columns_v3(s, j0, cols, acc, s->width);
    p->epilogue(p->ctx, acc, s->width, s->batch * p->m, (s->batch + 1) * p->m, j0,
                j0 + cols);
  }
}

static void row_items(void* ctx, int64_t first, int64_t last) {
  for (int64_t item = first; item < last; item++) stream_rows(ctx, item);
}

/* Column blocks of B's rows: the splits' sums added in split order into the first split's,
 * then handed to the epilogue. */
static void add_splits(void* ctx, int64_t first, int64_t last) {
  const Stream* s = ctx;
  const tilec_gemm_problem* p = s->p;
  for (int64_t item = first; item < last; item++) {
    int64_t j0 = item * s->width;
    int64_t cols = p->n - j0 < s->width ? p->n - j0 : s->width;
    for (int64_t split = 1; split < s->splits; split++)
      for (int64_t i = 0; i < p->m; i++) {
        float* dst = s->sums + i * s->ld + j0;
        const float* src = s->sums + (split * p->m + i) * s->ld + j0;
        for (int64_t j = 0; j < cols; j++) dst[j] += src[j];
      }
    p->epilogue(p->ctx, s->sums + j0, s->ld, s->batch * p->m, (s->batch + 1) * p->m, j0,
                j0 + cols);
  }
}

static __thread Scratch stream_sums;

/* B's rows: column blocks whose sums fit STREAM_ACC, and as many splits of K as make about
 * STREAM_ITEMS items, each of at least STREAM_MIN_ROWS rows; 0 when out of memory. */
static int plan_rows(Stream* s) {
  const tilec_gemm_problem* p = s->p;
  s->width = p->m * p->n <= STREAM_ACC ? p->n : STREAM_ACC / p->m / 64 * 64;
  int64_t blocks = (p->n + s->width - 1) / s->width, most = p->k / STREAM_MIN_ROWS;
  int64_t splits = (STREAM_ITEMS + blocks - 1) / blocks;
  if (splits > most) splits = most > 1 ? most : 1;
  s->rows = round_up((p->k + splits - 1) / splits, STREAM_ROWS);
  if (s->rows == 0) s->rows = STREAM_ROWS;
  s->splits = (p->k + s->rows - 1) / s->rows > 1 ? (p->k + s->rows - 1) / s->rows : 1;
  s->ld = p->n % 1024 == 0 ? p->n + 16 : p->n;
  s->sums = grown(&stream_sums, s->splits * p->m * s->ld);
  return s->sums != NULL;
}

static void plan_columns(Stream* s) {
  const tilec_gemm_problem* p = s->p;
  int64_t shared = p->n / (2 * (int64_t)tilec_num_threads()) / 64 * 64;
  s->width = COLUMNS_ACC / p->m / 64 * 64;
  if (shared >= 64 && shared < s->width) s->width = shared;
}

/* The batch's rows of A, widened into s->a: m x k, or k x m (``transposed``): the m
 * factors of a row of B side by side, where rows of A k apart (k a multiple of 1024, say)
 * would all fall in one set of L1. */
static void widen_a(const Stream* s, float* a, int transposed) {
  const tilec_gemm_problem* p = s->p;
  const tilec_gemm_operand* x = &p->a;
  float line[1024];
  for (int64_t i = 0; i < p->m; i++) {
    int64_t base = s->batch * x->batch + i * x->row;
    if (x->col == 1 && !transposed) {
      widen(a + i * p->k, at(x, base), x->dtype, p->k);
      continue;
    }
    for (int64_t k0 = 0; k0 < p->k; k0 += 1024) {
      int64_t n = p->k - k0 < 1024 ? p->k - k0 : 1024;
      if (x->col == 1)
        widen(line, at(x, base + k0), x->dtype, n);
      else
        for (int64_t k = 0; k < n; k++) line[k] = element(x, base + (k0 + k) * x->col);
      for (int64_t k = 0; k < n; k++) {
        if (transposed)
          a[(k0 + k) * p->m + i] = line[k];
        else
          a[i * p->k + k0 + k] = line[k];
      }
    }
  }
}

/* A's rows as Stream.pairs's pairs into words. */
static void pair_a(const Stream* s, uint32_t* words) {
  const tilec_gemm_problem* p = s->p;
  const tilec_gemm_operand* x = &p->a;
  for (int64_t k = 0; k < p->k; k += 2)
    for (int64_t i = 0; i < p->m; i++) {
      int64_t base = s->batch * x->batch + i * x->row;
      uint32_t second = k + 1 < p->k ? bits_at(x, base + (k + 1) * x->col) : 0;
      words[k / 2 * p->m + i] = bits_at(x, base + k * x->col) | second << 16;
    }
}

/* A's rows as they are into m x k bfloat16 (Stream.pairs, B's columns). */
static void copy_a(const Stream* s, uint16_t* rows) {
  const tilec_gemm_problem* p = s->p;
  const tilec_gemm_operand* x = &p->a;
  for (int64_t i = 0; i < p->m; i++)
    for (int64_t k = 0; k < p->k; k++)
      rows[i * p->k + k] = bits_at(x, s->batch * x->batch + i * x->row + k * x->col);
}

/* Whether B streams on vdpbf16ps: bfloat16 A and B, AVX512-BF16 without AMX (where AMX is,
 * as on Sapphire Rapids, vdpbf16ps runs at half the float32 FMA rate), and B's rows
 * contiguous with at least 8 rows of A (fewer are bound by memory: 4 rows ran as fast
 * either way, 2 slower) or B's columns contiguous (dots_dp: 1.08x at M = 1, 1.16-1.34x at
 * 8-16). */
static int dp_streams(const tilec_gemm_problem* p) {
  if (p->a.dtype != TILEC_GEMM_BF16 || p->b.dtype != TILEC_GEMM_BF16 || !tilec_cpu_bf16() ||
      tilec_cpu_amx())
    return 0;
  if (p->b.col == 1) return p->m >= 8;
  return p->b.row == 1;
}

static int gemm_streamed(const tilec_gemm_problem* p) {
  float* a = grown(&widened_a, p->m * p->k > 0 ? p->m * p->k : 1);
  if (a == NULL) return TILEC_ERR_NO_MEMORY;
  Stream s = {.p = p, .a = a, .pairs = dp_streams(p)};
  int rows = p->b.col == 1 || p->b.row != 1;   /* else B's columns contiguous along K */
  if (rows && !plan_rows(&s)) return TILEC_ERR_NO_MEMORY;
  if (!rows) plan_columns(&s);
  int64_t blocks = (p->n + s.width - 1) / s.width;
  for (s.batch = 0; s.batch < p->batch; s.batch++) {
    if (s.pairs && rows)
      pair_a(&s, (uint32_t*)a);
    else if (s.pairs)
      copy_a(&s, (uint16_t*)a);
    else
      widen_a(&s, a, rows);
    if (!rows) {
      tilec_parallel_items(blocks, column_items, &s);
      continue;
    }
    tilec_parallel_items(blocks * s.splits, row_items, &s);
    tilec_parallel_items(blocks, add_splits, &s);
  }
  return TILEC_OK;
}

/* -- the entry ------------------------------------------------------------------------------ */

/* Problems that run on the caller alone, where waking the pool (20-50 us) costs more than
 * a second thread saves: packed, at most ALONE_FMAS products (float32 on Zen 5: 256^3 in
 * 195 us alone, 220 on two threads; 320^3 in 344 and 253-272); streamed, B of at most
 * ALONE_BYTES (x @ w, M = 1, 1 MiB of float32: 70 us alone, 97 on two threads). */
#define ALONE_FMAS ((int64_t)1 << 24)
#define ALONE_BYTES ((int64_t)1 << 20)

static int streams(const tilec_gemm_problem* p) {
  const tilec_gemm_operand* b = &p->b;
  return p->m <= TILEC_GEMM_SMALL_M && (b->col == 1 || b->row == 1 || p->n == 1);
}

static int gemm_run(const tilec_gemm_problem* p) {
  return streams(p) ? gemm_streamed(p) : gemm_packed(p);
}

typedef struct {
  const tilec_gemm_problem* p;
  int status;
} Alone;

static void gemm_alone(void* ctx, int64_t first, int64_t last) {
  (void)first, (void)last;
  Alone* a = ctx;
  a->status = gemm_run(a->p);
}

static int alone(const tilec_gemm_problem* p) {
  double fmas = (double)p->batch * p->m * p->n * p->k;
  if (streams(p)) return fmas / p->m * element_bytes(p->b.dtype) <= (double)ALONE_BYTES;
  return fmas <= (double)ALONE_FMAS;
}

int tilec_gemm(const tilec_gemm_problem* p) {
  if (p->batch <= 0 || p->m <= 0 || p->n <= 0) return TILEC_OK;
  Alone a = {p, TILEC_OK};
  if (alone(p))
    tilec_alone(gemm_alone, &a);
  else
    a.status = gemm_run(p);
  int status = a.status;
  if (status != TILEC_OK)
    return tilec_fail(status, "matmul: out of memory for the packed operands and accumulators "
                              "of %lld x %lld x %lld", (long long)p->m, (long long)p->n,
                      (long long)p->k);
  return TILEC_OK;
}
