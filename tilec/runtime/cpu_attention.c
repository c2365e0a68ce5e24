/* The CPU attention of tilec (see cpu_attention.h).
 *
 * A task is one block of BM query rows of one batch index and one range of key blocks (all of
 * them, or one of the splits of a decode).  It widens its query rows to float32 and transposes
 * them once, then for each block of BN keys: widens the keys and values where they are not
 * float32, computes the block's raw scores with an FMA tile (8 keys x 32 queries on
 * x86-64-v4), and, 16 query rows at a time while they are in L1, transposes them, hands them
 * to the kernel's scores function and folds them into the running max m, sum l and
 * accumulator o of each row (softmax_row):
 *     m' = max(m, max_j s_j),  o = o * exp(m - m') + sum_j exp(s_j - m') v_j,  likewise l.
 * A row whose scores so far are all -inf contributes nothing; at the end o / l (0 / 0 = NaN
 * for a row with no key, as softmax of all -inf is).  A split writes (o, m, l) to a workspace
 * and a second pass combines the splits of each block in order.
 * Where q, k and v are bfloat16 and the CPU has AMX, both products run on AMX tiles instead
 * (keys_pairs; where it has AVX512-BF16 but no AMX, on vdpbf16ps over the same packing) over
 * blocks of BNA keys, a row at a time from the scores to the bfloat16
 * weights, the keys and values of a key head packed once, tile by tile, for all the threads
 * where its row blocks keep them all busy.  A task of at most FEW rows (a decode) streams its
 * keys and values once instead (keys_few, and keys_few_v3 on x86-64-v3 where d and dv are
 * multiples of 8; bfloat16 on AVX512-BF16's vdpbf16ps where the CPU has it, keys_few_dp).
 */
#include "cpu_attention.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "cpu_runtime.h"

#define V3 __attribute__((target("avx2,fma,f16c")))
#define V4 __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl")))
#define AMX __attribute__(( \
    target("avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl,avx512bf16,amx-tile,amx-bf16")))
#define DP __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl,avx512bf16")))
#define BM 64           /* query rows per task (a multiple of 32) */
#define BN 128          /* keys per block (a multiple of 16) */
#define BNA 256         /* keys per block on AMX (a multiple of 32): its fixed costs per
                         * block (o's tiles loaded and stored, a row's reductions) halved */
#define INLINE static inline __attribute__((always_inline))
#define MIN_SPLIT_KEYS 512   /* a split of a decode holds at least this many keys */
/* AMX: the most bytes of one key head's packed keys and values that all the threads share (t
 * up to 65536 at d = 128): bounded whatever the number of threads */
#define SHARED_BYTES ((int64_t)32 << 20)
/* AMX: the units packed at once where one takes less (t up to 16384 at d = 128): fewer
 * launches for short sequences, memory still bounded */
#define BATCH_BYTES ((int64_t)8 << 20)

typedef struct {
  const tilec_attention_problem* p;
  /* a unit: the rows of the query heads that read one key head (share of them, s rows
   * each), contiguous in the grid; it is cut into row_blocks blocks of at most BM rows */
  int64_t share, unit_rows, row_blocks, splits, keys_per_split;
  float* partial; /* splits: per task BM * (dv + 2) floats: o, then m and l */
  int pairs;      /* bfloat16 q, k, v packed as pairs (keys_pairs) ... */
  int tiles;      /* ... for AMX's tiles, else for vdpbf16ps */
  int failed;     /* a thread could not allocate its scratch */
  /* AMX, where a unit has row blocks enough for every thread: the keys and values of units
   * [unit0, unit0 + units packed at once), packed once (pack_items) for all the threads to
   * read, unit_words apart, and the first task of unit0 */
  uint32_t* packed;
  int64_t unit0, task0;
  int64_t chunk, count; /* tasks a chunk of (task_chunks), and in all */
} Attention;

/* -- conversions ---------------------------------------------------------------------------- */

static int element_bytes(int dtype) { return dtype == TILEC_ATTENTION_F32 ? 4 : 2; }

static V3 void widen(float* dst, const void* src, int dtype, int64_t n) {
  int64_t i = 0;
  const uint16_t* s = (const uint16_t*)src;
  if (dtype == TILEC_ATTENTION_F32) {
    memcpy(dst, src, (size_t)n * sizeof(float));
  } else if (dtype == TILEC_ATTENTION_F16) {
    for (; i + 8 <= n; i += 8)
      _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(s + i))));
    for (; i < n; i++) dst[i] = tilec_f16_to_f32(s[i]);
  } else {
    for (; i + 8 <= n; i += 8) {
      __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)(s + i)));
      _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)));
    }
    for (; i < n; i++) dst[i] = tilec_bf16_to_f32(s[i]);
  }
}

/* tilec_f32_to_bf16 on 16 lanes: round to nearest even, NaN kept quiet. */
static V4 int64_t narrow_bf16_v4(uint16_t* d, const float* src, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512 x = _mm512_loadu_ps(src + i);
    __m512i u = _mm512_castps_si512(x), high = _mm512_srli_epi32(u, 16);
    __m512i odd = _mm512_and_si512(high, _mm512_set1_epi32(1));
    __m512i r = _mm512_srli_epi32(
        _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), odd), 16);
    r = _mm512_mask_mov_epi32(r, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q),
                              _mm512_or_si512(high, _mm512_set1_epi32(0x40)));
    _mm256_storeu_si256((__m256i*)(d + i), _mm512_cvtepi32_epi16(r));
  }
  return i;
}

/* The same on 8 lanes (x86-64-v3), 16 elements a step. */
static V3 int64_t narrow_bf16_v3(uint16_t* d, const float* src, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m256i half[2];
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
      __m256 x = _mm256_loadu_ps(src + i + 8 * h);
      __m256i u = _mm256_castps_si256(x), high = _mm256_srli_epi32(u, 16);
      __m256i odd = _mm256_and_si256(high, _mm256_set1_epi32(1));
      __m256i r = _mm256_srli_epi32(
          _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), odd), 16);
      __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
      half[h] = _mm256_blendv_epi8(r, _mm256_or_si256(high, _mm256_set1_epi32(0x40)), nan);
    }
    /* packus interleaves the halves' 128-bit lanes: 0-3, 8-11 | 4-7, 12-15 */
    __m256i packed = _mm256_packus_epi32(half[0], half[1]);
    _mm256_storeu_si256((__m256i*)(d + i), _mm256_permute4x64_epi64(packed, 0xd8));
  }
  return i;
}

static void narrow(void* dst, const float* src, int dtype, int64_t n) {
  uint16_t* d = (uint16_t*)dst;
  if (dtype == TILEC_ATTENTION_F32) {
    memcpy(dst, src, (size_t)n * sizeof(float));
    return;
  }
  int64_t i = 0;
  if (dtype == TILEC_ATTENTION_BF16)   /* a library never runs below x86-64-v3 */
    i = tilec_cpu_level() >= 4 ? narrow_bf16_v4(d, src, n) : narrow_bf16_v3(d, src, n);
  for (; i < n; i++)
    d[i] = dtype == TILEC_ATTENTION_F16 ? tilec_f32_to_f16(src[i]) : tilec_f32_to_bf16(src[i]);
}

/* exp(x) within 2 float32 ulp: 2**n * e**r, |r| <= ln(2) / 2, a degree-6 polynomial; -inf
 * gives 0. */
INLINE V3 __m256 exp8(__m256 x) {
  const __m256 lo = _mm256_set1_ps(-104.0f), hi = _mm256_set1_ps(88.7f);
  __m256 zero = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
  x = _mm256_min_ps(_mm256_max_ps(x, lo), hi);
  __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                             _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 y = _mm256_set1_ps(1.0f / 720);
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.0f / 120));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.0f / 24));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.0f / 6));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(0.5f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.0f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.0f));
  /* 2**n in two halves, so that n = -127 .. -150 (below the normal range) stays exact */
  __m256i ni = _mm256_cvtps_epi32(n);
  __m256i half = _mm256_srai_epi32(ni, 1);
  __m256 a = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(half, _mm256_set1_epi32(127)), 23));
  __m256 b = _mm256_castsi256_ps(_mm256_slli_epi32(
      _mm256_add_epi32(_mm256_sub_epi32(ni, half), _mm256_set1_epi32(127)), 23));
  y = _mm256_mul_ps(_mm256_mul_ps(y, a), b);
  return _mm256_andnot_ps(zero, y);
}

static V3 float exp1(float x) {
  float out[8];
  _mm256_storeu_ps(out, exp8(_mm256_set1_ps(x)));
  return out[0];
}

/* -- addressing ----------------------------------------------------------------------------- */

/* The key and value offsets (elements) of query batch index b. */
static void kv_offsets(const tilec_attention_problem* p, int64_t b, int64_t* k, int64_t* v) {
  *k = *v = 0;
  for (int axis = p->rank - 1; axis >= 0; axis--) {
    int64_t i = b % p->extents[axis];
    b /= p->extents[axis];
    *k += i * p->k_stride[axis];
    *v += i * p->v_stride[axis];
  }
}

static const char* at(const void* base, int dtype, int64_t offset) {
  return (const char*)base + offset * element_bytes(dtype);
}

/* -- one block of keys ---------------------------------------------------------------------- */

typedef struct {
  float *q, *qt, *kb, *vb, *st, *sb, *o, *m, *l, *scores;   /* per-thread scratch */
  uint16_t *qa, *pa;   /* AMX's A operands (bfloat16): the queries, the weights */
  /* AMX: one key and value block packed by this thread, or where shared (not NULL) all of
   * the task's unit's blocks, packed by pack_items */
  uint32_t *kc, *vc;
  const uint32_t *shared_k, *shared_v;
} Scratch;

/* What a task reads: its grid rows [row0, row0 + rows), their key head's offsets, the keys
 * [first, last) it computes of its split [first, end). */
typedef struct {
  int64_t row0, rows, k_base, v_base, first, last, end;
} Span;

#define KEYS_V3 6   /* keys of block_scores' tile: 12 sums, 2 queries' vectors, a key */

/* st[j][i] = q[i] . k[j] for keys j < cols (rounded up to KEYS_V3, at most BN) and all BM
 * queries, from the queries transposed (qt[c][i], zero past the task's rows) and the keys'
 * rows (kb[j][c]). */
static V3 void block_scores(const float* qt, const float* kb, float* st, int64_t cols,
                            int64_t d, int64_t queries) {
  for (int64_t j0 = 0; j0 < cols; j0 += KEYS_V3) {
    const float* k[KEYS_V3];
    #pragma GCC unroll 8
    for (int r = 0; r < KEYS_V3; r++) k[r] = kb + (j0 + r < cols ? j0 + r : cols - 1) * d;
    for (int64_t i = 0; i < queries; i += 16) {
      __m256 acc[KEYS_V3][2];
      #pragma GCC unroll 8
      for (int r = 0; r < KEYS_V3; r++) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
      for (int64_t c = 0; c < d; c++) {
        __m256 q0 = _mm256_loadu_ps(qt + c * BM + i), q1 = _mm256_loadu_ps(qt + c * BM + i + 8);
        #pragma GCC unroll 8
        for (int r = 0; r < KEYS_V3; r++) {
          __m256 kr = _mm256_broadcast_ss(k[r] + c);
          acc[r][0] = _mm256_fmadd_ps(kr, q0, acc[r][0]);
          acc[r][1] = _mm256_fmadd_ps(kr, q1, acc[r][1]);
        }
      }
      #pragma GCC unroll 8
      for (int r = 0; r < KEYS_V3; r++) {
        if (j0 + r >= BN) break;
        _mm256_storeu_ps(st + (j0 + r) * BM + i, acc[r][0]);
        _mm256_storeu_ps(st + (j0 + r) * BM + i + 8, acc[r][1]);
      }
    }
  }
}

/* block_values' tile: o's rows r0 .. r0 + R - 1 (those past rows repeat row r0 and are not
 * stored), 16 columns a step: 2R sums, 2 vectors of a value row and a weight in registers. */
INLINE V3 void values_tile(const float* sb, const float* vb, float* o, int64_t r0, int64_t nr,
                           const int R, int64_t cols, int64_t dv, int64_t c_first, int64_t c_end) {
  const float* w[6];
  float* out[6];
  #pragma GCC unroll 6
  for (int r = 0; r < R; r++) {
    int64_t rr = r0 + (r < nr ? r : 0);
    w[r] = sb + rr * BN;
    out[r] = o + rr * dv;
  }
  for (int64_t c0 = c_first; c0 < c_end; c0 += 16) {
    __m256 acc[6][2];
    #pragma GCC unroll 6
    for (int r = 0; r < R; r++) {
      acc[r][0] = _mm256_loadu_ps(out[r] + c0);
      acc[r][1] = _mm256_loadu_ps(out[r] + c0 + 8);
    }
    const float* vj = vb + c0;
    for (int64_t j = 0; j < cols; j++, vj += dv) {
      __m256 v0 = _mm256_loadu_ps(vj), v1 = _mm256_loadu_ps(vj + 8);
      #pragma GCC unroll 6
      for (int r = 0; r < R; r++) {
        __m256 pr = _mm256_broadcast_ss(w[r] + j);
        acc[r][0] = _mm256_fmadd_ps(pr, v0, acc[r][0]);
        acc[r][1] = _mm256_fmadd_ps(pr, v1, acc[r][1]);
      }
    }
    #pragma GCC unroll 6
    for (int r = 0; r < R; r++) {
      if (r >= nr) break;
      _mm256_storeu_ps(out[r] + c0, acc[r][0]);
      _mm256_storeu_ps(out[r] + c0 + 8, acc[r][1]);
    }
  }
}

/* o[r] += sum_j sb[r][j] * vb[j] over the block's cols keys (p in sb), for the columns from
 * c_first: 6 rows at a time (12 sums: 8 left the FMAs waiting on their latency), the last
 * 1-4 rows 4 at a time. */
static V3 void block_values(const float* sb, const float* vb, float* o, int64_t rows,
                            int64_t cols, int64_t dv, int64_t c_first) {
  int64_t c = c_first + (dv - c_first) / 16 * 16;
  for (int64_t r0 = 0; r0 < rows; r0 += 6) {
    int64_t nr = rows - r0 < 6 ? rows - r0 : 6;
    if (nr > 4)
      values_tile(sb, vb, o, r0, nr, 6, cols, dv, c_first, c);
    else
      values_tile(sb, vb, o, r0, nr, 4, cols, dv, c_first, c);
  }
  for (; c < dv; c++)
    for (int64_t r = 0; r < rows; r++) {
      float sum = o[r * dv + c];
      for (int64_t j = 0; j < cols; j++) sum += sb[r * BN + j] * vb[j * dv + c];
      o[r * dv + c] = sum;
    }
}

/* x86-64-v4: block_scores with an 8 keys x 32 queries tile (queries rounded up to 32: qt
 * holds BM, zero past the task's rows). */
static V4 void block_scores_v4(const float* qt, const float* kb, float* st, int64_t cols,
                               int64_t d, int64_t queries) {
  for (int64_t j0 = 0; j0 < cols; j0 += 8) {
    const float* k[8];
#pragma GCC unroll 8
    for (int r = 0; r < 8; r++) k[r] = kb + (j0 + r < cols ? j0 + r : cols - 1) * d;
    for (int64_t i = 0; i < queries; i += 32) {
      __m512 acc[8][2];
#pragma GCC unroll 8
      for (int r = 0; r < 8; r++) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
      for (int64_t c = 0; c < d; c++) {
        __m512 q0 = _mm512_loadu_ps(qt + c * BM + i), q1 = _mm512_loadu_ps(qt + c * BM + i + 16);
#pragma GCC unroll 8
        for (int r = 0; r < 8; r++) {
          __m512 kr = _mm512_set1_ps(k[r][c]);
          acc[r][0] = _mm512_fmadd_ps(kr, q0, acc[r][0]);
          acc[r][1] = _mm512_fmadd_ps(kr, q1, acc[r][1]);
        }
      }
#pragma GCC unroll 8
      for (int r = 0; r < 8; r++) {
        if (j0 + r >= BN) break;
        _mm512_storeu_ps(st + (j0 + r) * BM + i, acc[r][0]);
        _mm512_storeu_ps(st + (j0 + r) * BM + i + 16, acc[r][1]);
      }
    }
  }
}

/* x86-64-v4: block_values over the columns below a multiple of 32, 8 rows x 32 columns at a
 * time; the columns it leaves. */
static V4 int64_t block_values_v4(const float* sb, const float* vb, float* o, int64_t rows,
                                  int64_t cols, int64_t dv) {
  int64_t c = dv / 32 * 32;
  for (int64_t r0 = 0; r0 < rows; r0 += 8) {
    int64_t nr = rows - r0 < 8 ? rows - r0 : 8;
    const float* w[8];
    float* out[8];
#pragma GCC unroll 8
    for (int r = 0; r < 8; r++) {
      int64_t rr = r0 + (r < nr ? r : 0);
      w[r] = sb + rr * BN;
      out[r] = o + rr * dv;
    }
    for (int64_t c0 = 0; c0 < c; c0 += 32) {
      __m512 acc[8][2];
#pragma GCC unroll 8
      for (int r = 0; r < 8; r++) {
        acc[r][0] = _mm512_loadu_ps(out[r] + c0);
        acc[r][1] = _mm512_loadu_ps(out[r] + c0 + 16);
      }
      const float* vj = vb + c0;
      for (int64_t j = 0; j < cols; j++, vj += dv) {
        __m512 v0 = _mm512_loadu_ps(vj), v1 = _mm512_loadu_ps(vj + 16);
#pragma GCC unroll 8
        for (int r = 0; r < 8; r++) {
          __m512 pr = _mm512_set1_ps(w[r][j]);
          acc[r][0] = _mm512_fmadd_ps(pr, v0, acc[r][0]);
          acc[r][1] = _mm512_fmadd_ps(pr, v1, acc[r][1]);
        }
      }
#pragma GCC unroll 8
      for (int r = 0; r < 8; r++) {
        if (r >= nr) break;
        _mm512_storeu_ps(out[r] + c0, acc[r][0]);
        _mm512_storeu_ps(out[r] + c0 + 16, acc[r][1]);
      }
    }
  }
  return c;
}

/* Fold the block's scores (row r at scores + r * t) into m, l and o; sb gets the weights. */
static V3 void online_softmax(const float* scores, int64_t t, float* sb, float* m, float* l,
                              float* o, int64_t rows, int64_t cols, int64_t dv) {
  for (int64_t r = 0; r < rows; r++) {
    const float* s = scores + r * t;
    __m256 most = _mm256_set1_ps(m[r]), most2 = most;
    int64_t j = 0;
    for (; j + 16 <= cols; j += 16) {     /* two chains: the max's latency halved */
      most = _mm256_max_ps(most, _mm256_loadu_ps(s + j));
      most2 = _mm256_max_ps(most2, _mm256_loadu_ps(s + j + 8));
    }
    float lanes[8], top;
    _mm256_storeu_ps(lanes, _mm256_max_ps(most, most2));
    top = lanes[0];
    for (int k = 1; k < 8; k++) top = lanes[k] > top ? lanes[k] : top;
    for (; j < cols; j++) top = s[j] > top ? s[j] : top;
    float* w = sb + r * BN;
    if (top == -INFINITY) {          /* every score so far masked: nothing to add */
      memset(w, 0, BN * sizeof(float));
      continue;
    }
    float scale = m[r] == -INFINITY ? 0.0f : exp1(m[r] - top), sum = 0.0f;
    __m256 vtop = _mm256_set1_ps(top), sum0 = _mm256_setzero_ps(), sum1 = sum0;
    for (j = 0; j + 16 <= cols; j += 16) {   /* two chains for the sum */
      __m256 e0 = exp8(_mm256_sub_ps(_mm256_loadu_ps(s + j), vtop));
      __m256 e1 = exp8(_mm256_sub_ps(_mm256_loadu_ps(s + j + 8), vtop));
      _mm256_storeu_ps(w + j, e0);
      _mm256_storeu_ps(w + j + 8, e1);
      sum0 = _mm256_add_ps(sum0, e0);
      sum1 = _mm256_add_ps(sum1, e1);
    }
    if (j + 8 <= cols) {
      __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(s + j), vtop));
      _mm256_storeu_ps(w + j, e);
      sum0 = _mm256_add_ps(sum0, e);
      j += 8;
    }
    _mm256_storeu_ps(lanes, _mm256_add_ps(sum0, sum1));
    for (int k = 0; k < 8; k++) sum += lanes[k];
    for (; j < cols; j++) sum += (w[j] = exp1(s[j] - top));
    for (; j < BN; j++) w[j] = 0.0f;
    l[r] = l[r] * scale + sum;
    m[r] = top;
    if (scale == 1.0f) continue;
    float* out = o + r * dv;
    int64_t c = 0;
    for (; c + 8 <= dv; c += 8)
      _mm256_storeu_ps(out + c, _mm256_mul_ps(_mm256_loadu_ps(out + c), _mm256_set1_ps(scale)));
    for (; c < dv; c++) out[c] *= scale;
  }
}

/* exp8 on 16 lanes (the same polynomial; 2**n by scalef). */
static V4 __m512 exp16(__m512 x) {
  const __m512 lo = _mm512_set1_ps(-104.0f), hi = _mm512_set1_ps(88.7f);
  __mmask16 live = _mm512_cmp_ps_mask(x, lo, _CMP_NLT_UQ);
  x = _mm512_min_ps(_mm512_max_ps(x, lo), hi);
  __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                  _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 y = _mm512_set1_ps(1.0f / 720);
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.0f / 120));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.0f / 24));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.0f / 6));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(0.5f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.0f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.0f));
  return _mm512_maskz_scalef_ps(live, y, n);
}

static __mmask16 lanes(int64_t left) {
  return left >= 16 ? 0xffff : left <= 0 ? 0 : (1u << left) - 1;
}

/* exp16 within about 5e-5 (relative): a degree-4 polynomial, for weights that p v rounds to
 * bfloat16 (2**-9) anyway. */
INLINE V4 __m512 exp16_bf16(__m512 x) {
  const __m512 lo = _mm512_set1_ps(-104.0f), hi = _mm512_set1_ps(88.7f);
  __mmask16 live = _mm512_cmp_ps_mask(x, lo, _CMP_NLT_UQ);
  x = _mm512_min_ps(_mm512_max_ps(x, lo), hi);
  __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                  _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693147181f), x);
  __m512 y = _mm512_fmadd_ps(_mm512_set1_ps(1.0f / 24), r, _mm512_set1_ps(1.0f / 6));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(0.5f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.0f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.0f));
  return _mm512_maskz_scalef_ps(live, y, n);
}

/* How softmax_row stores 16 weights at w + j: float32, or (store_bf16, in an AVX512-BF16
 * function) rounded to bfloat16 for the bfloat16 p v of AMX or vdpbf16ps.  A constant where
 * inlined, so the call disappears. */
typedef void (*weights_store)(void* w, int64_t j, __m512 e);

INLINE V4 void store_f32(void* w, int64_t j, __m512 e) { _mm512_storeu_ps((float*)w + j, e); }

/* One row's cols scores s into its running max m, sum l and accumulator o (dv columns, scaled
 * where the max grows), its ``width`` weights (a multiple of 32, zero past cols) into w by
 * ``store``; exp16_bf16 for the weights of a bfloat16 p v (``bf16``). */
INLINE V4 void softmax_row(const float* s, int64_t cols, float* m, float* l, float* o,
                           int64_t dv, void* w, int64_t width, weights_store store, int bf16) {
  __m512 most = _mm512_set1_ps(*m), most2 = most;
  int64_t j = 0;
  for (; j + 32 <= cols; j += 32) {     /* two chains: the max's latency halved */
    most = _mm512_max_ps(most, _mm512_loadu_ps(s + j));
    most2 = _mm512_max_ps(most2, _mm512_loadu_ps(s + j + 16));
  }
  for (; j < cols; j += 16)
    most = _mm512_mask_max_ps(most, lanes(cols - j), most,
                              _mm512_maskz_loadu_ps(lanes(cols - j), s + j));
  float top = _mm512_reduce_max_ps(_mm512_max_ps(most, most2));
  if (top == -INFINITY) {          /* every score so far masked: nothing to add */
    for (j = 0; j < width; j += 16) store(w, j, _mm512_setzero_ps());
    return;
  }
  float scale = *m == -INFINITY ? 0.0f : _mm512_cvtss_f32(exp16(_mm512_set1_ps(*m - top)));
  __m512 vtop = _mm512_set1_ps(top), sum[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
  for (j = 0; j < width; j += 32)
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {     /* two chains for the sum */
      __mmask16 live = lanes(cols - j - 16 * h);
      __m512 x = _mm512_sub_ps(_mm512_maskz_loadu_ps(live, s + j + 16 * h), vtop);
      __m512 e = _mm512_maskz_mov_ps(live, bf16 ? exp16_bf16(x) : exp16(x));
      store(w, j + 16 * h, e);
      sum[h] = _mm512_add_ps(sum[h], e);
    }
  *l = *l * scale + _mm512_reduce_add_ps(_mm512_add_ps(sum[0], sum[1]));
  *m = top;
  if (scale != 1.0f)
    for (int64_t c = 0; c < dv; c += 16)
      _mm512_mask_storeu_ps(o + c, lanes(dv - c),
                            _mm512_mul_ps(_mm512_maskz_loadu_ps(lanes(dv - c), o + c),
                                          _mm512_set1_ps(scale)));
}

/* softmax_row over ``rows`` rows of scores t apart, their weights into sb (rows BN apart), o's
 * rows ldo apart. */
static V4 void online_softmax_v4(const float* scores, int64_t t, float* sb, float* m, float* l,
                                 float* o, int64_t ldo, int64_t rows, int64_t cols, int64_t dv) {
  for (int64_t r = 0; r < rows; r++)
    softmax_row(scores + r * t, cols, m + r, l + r, o + r * ldo, dv, sb + r * BN, BN, store_f32, 0);
}

/* The kernel's scores function over a block of rows x cols raw scores, rows BN apart in raw
 * and in scores. */
static void block_epilogue(const tilec_attention_problem* p, const float* raw, float* scores,
                           int64_t row0, int64_t rows, int64_t j0, int64_t cols) {
  p->scores(p->ctx, raw, scores, BN, row0, row0 + rows, j0, j0 + cols);
}

/* -- bfloat16 on AMX -------------------------------------------------------------------------
 * Where q, k and v are all bfloat16 and tilec_cpu_amx(): both block products run on AMX tiles
 * (bfloat16 operands, float32 accumulation).  The weights p enter p v rounded to bfloat16:
 * with bfloat16 values the program itself casts softmax(...) to bfloat16 before @ v (a
 * matmul's operands have one element type), so the rounding is the program's own cast. */

#define PAIRS 32   /* the K of one tile product: 16 pairs of bfloat16 */

/* Every tile 16 rows of 64 bytes: C 16 x 16 float32, A 16 rows of PAIRS, B 16 rows of pairs. */
static const unsigned char amx_config[64] __attribute__((aligned(64))) = {
    [0] = 1,
    [16] = 64, [18] = 64, [20] = 64, [22] = 64, [24] = 64, [26] = 64, [28] = 64, [30] = 64,
    [48] = 16, [49] = 16, [50] = 16, [51] = 16, [52] = 16, [53] = 16, [54] = 16, [55] = 16};

static AMX void amx_begin(void) { _tile_loadconfig(amx_config); }
static AMX void amx_end(void) { _tile_release(); }

static int64_t up32(int64_t x) { return (x + 31) / 32 * 32; }

/* qa: the task's query rows, dp (d rounded up to PAIRS) apart, zero past rows and d. */
static void pack_q(uint16_t* qa, const uint16_t* q, int64_t rows, int64_t d, int64_t dp) {
  memset(qa, 0, (size_t)(BM * dp) * sizeof(uint16_t));
  for (int64_t r = 0; r < rows; r++) memcpy(qa + r * dp, q + r * d, (size_t)d * sizeof(uint16_t));
}

/* Where element (w, c) of a B operand ``width`` columns wide is packed: tile by tile (16
 * pairs x 16 columns, 1 KiB), so that a tile loads from one contiguous KiB. */
static inline int64_t tiled(int64_t w, int64_t c, int64_t width) {
  return (w / 16 * (width / 16) + c / 16) * 256 + w % 16 * 16 + c % 16;
}

/* kp, tiled over BNA columns: (w, j) pair w of key j (elements 2w, 2w + 1), zero past cols
 * and d: the B operand of q k^T. */
static AMX void pack_k(uint32_t* kp, const uint16_t* k, int64_t cols, int64_t d, int64_t dp) {
  for (int64_t j0 = 0; j0 < BNA; j0 += 16) {
    __mmask16 live = lanes(cols - j0);
    int64_t w = 0;
    if (d % 2 == 0 && live != 0) {
      __m512i index = _mm512_mullo_epi32(
          _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
          _mm512_set1_epi32((int)(d / 2)));
      const int* base = (const int*)(k + j0 * d);
      for (; w < d / 2; w++)
        _mm512_storeu_si512(kp + tiled(w, j0, BNA), _mm512_mask_i32gather_epi32(
                                                 _mm512_setzero_si512(), live, index, base + w, 4));
    }
    for (; w < dp / 2; w++)
      for (int64_t j = j0; j < j0 + 16; j++) {
        uint32_t lo = j < cols && 2 * w < d ? k[j * d + 2 * w] : 0;
        uint32_t hi = j < cols && 2 * w + 1 < d ? k[j * d + 2 * w + 1] : 0;
        kp[tiled(w, j, BNA)] = lo | hi << 16;
      }
  }
}

/* vp, tiled over dvp columns: (w, c) column c of values 2w and 2w + 1, zero past cols and
 * dv: the B operand of p v. */
static AMX void pack_v(uint32_t* vp, const uint16_t* v, int64_t cols, int64_t dv, int64_t dvp) {
  for (int64_t w = 0; w < BNA / 2; w++) {
    const uint16_t *a = v + 2 * w * dv, *b = a + dv;
    int64_t c = 0;
    if (2 * w + 1 < cols)
      for (; c + 16 <= dv; c += 16) {
        __m512i lo = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)(a + c)));
        __m512i hi = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)(b + c)));
        _mm512_storeu_si512(vp + tiled(w, c, dvp), _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
      }
    for (; c < dvp; c++) {
      uint32_t lo = 2 * w < cols && c < dv ? a[c] : 0;
      uint32_t hi = 2 * w + 1 < cols && c < dv ? b[c] : 0;
      vp[tiled(w, c, dvp)] = lo | hi << 16;
    }
  }
}

/* s[i * ld + j] = q_i . k_j for rows and cols rounded up to 32 (both at most BM, BNA). */
static AMX void scores_amx(const uint16_t* qa, const uint32_t* kp, float* s, int64_t ld,
                           int64_t rows, int64_t cols, int64_t dp) {
  int64_t stride = ld * (int64_t)sizeof(float), qstride = dp * (int64_t)sizeof(uint16_t);
  for (int64_t j0 = 0; j0 < cols; j0 += 32)     /* the keys' tiles reused at once, from L1 */
    for (int64_t i0 = 0; i0 < rows; i0 += 32) {
      _tile_zero(0);
      _tile_zero(1);
      _tile_zero(2);
      _tile_zero(3);
      for (int64_t c = 0; c < dp; c += PAIRS) {
        _tile_loadd(4, qa + i0 * dp + c, qstride);
        _tile_loadd(5, qa + (i0 + 16) * dp + c, qstride);
        _tile_loadd(6, kp + tiled(c / 2, j0, BNA), 64);
        _tile_loadd(7, kp + tiled(c / 2, j0 + 16, BNA), 64);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
      }
      _tile_stored(0, s + i0 * ld + j0, stride);
      _tile_stored(1, s + i0 * ld + j0 + 16, stride);
      _tile_stored(2, s + (i0 + 16) * ld + j0, stride);
      _tile_stored(3, s + (i0 + 16) * ld + j0 + 16, stride);
    }
}

/* o[i * dvp + c] += sum_j pa[i * BNA + j] vp(j, c) for rows and cols rounded up to 32. */
static AMX void values_amx(const uint16_t* pa, const uint32_t* vp, float* o, int64_t rows,
                           int64_t cols, int64_t dvp) {
  int64_t stride = dvp * (int64_t)sizeof(float);
  for (int64_t c0 = 0; c0 < dvp; c0 += 32)     /* the values' tiles reused at once, from L1 */
    for (int64_t i0 = 0; i0 < rows; i0 += 32) {
      float* out = o + i0 * dvp + c0;
      _tile_loadd(0, out, stride);
      _tile_loadd(1, out + 16, stride);
      _tile_loadd(2, out + 16 * dvp, stride);
      _tile_loadd(3, out + 16 * dvp + 16, stride);
      for (int64_t j = 0; j < cols; j += PAIRS) {
        _tile_loadd(4, pa + i0 * BNA + j, BNA * 2);
        _tile_loadd(5, pa + (i0 + 16) * BNA + j, BNA * 2);
        _tile_loadd(6, vp + tiled(j / 2, c0, dvp), 64);
        _tile_loadd(7, vp + tiled(j / 2, c0 + 16, dvp), 64);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
      }
      _tile_stored(0, out, stride);
      _tile_stored(1, out + 16, stride);
      _tile_stored(2, out + 16 * dvp, stride);
      _tile_stored(3, out + 16 * dvp + 16, stride);
    }
}

/* scores_amx on vdpbf16ps (AVX512-BF16 without AMX): 8 rows by 32 keys a register tile, a
 * row of the packed keys' tile (one pair of 16 keys) against a pair of each query's
 * elements.  rows and cols rounded up to 32 as there (qa and kp are zero past them). */
static DP void scores_dp(const uint16_t* qa, const uint32_t* kp, float* s, int64_t ld,
                         int64_t rows, int64_t cols, int64_t dp) {
  const uint32_t* q = (const uint32_t*)qa;
  for (int64_t j0 = 0; j0 < cols; j0 += 32)
    for (int64_t i0 = 0; i0 < rows; i0 += 8) {
      __m512 acc[8][2];
#pragma GCC unroll 8
      for (int i = 0; i < 8; i++) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
      for (int64_t w = 0; w < dp / 2; w++) {
        __m512bh k0 = (__m512bh)_mm512_loadu_si512(kp + tiled(w, j0, BNA));
        __m512bh k1 = (__m512bh)_mm512_loadu_si512(kp + tiled(w, j0 + 16, BNA));
#pragma GCC unroll 8
        for (int i = 0; i < 8; i++) {
          __m512bh qi = (__m512bh)_mm512_set1_epi32((int)q[(i0 + i) * (dp / 2) + w]);
          acc[i][0] = _mm512_dpbf16_ps(acc[i][0], qi, k0);
          acc[i][1] = _mm512_dpbf16_ps(acc[i][1], qi, k1);
        }
      }
#pragma GCC unroll 8
      for (int i = 0; i < 8; i++) {
        _mm512_storeu_ps(s + (i0 + i) * ld + j0, acc[i][0]);
        _mm512_storeu_ps(s + (i0 + i) * ld + j0 + 16, acc[i][1]);
      }
    }
}

/* values_amx on vdpbf16ps: 8 rows by 32 columns of o a register tile, a row of the packed
 * values' tile (16 columns of a pair of keys) against each row's pair of weights. */
static DP void values_dp(const uint16_t* pa, const uint32_t* vp, float* o, int64_t rows,
                         int64_t cols, int64_t dvp) {
  const uint32_t* p = (const uint32_t*)pa;
  int64_t pairs = (cols + 1) / 2;
  for (int64_t c0 = 0; c0 < dvp; c0 += 32)
    for (int64_t i0 = 0; i0 < rows; i0 += 8) {
      float* out = o + i0 * dvp + c0;
      __m512 acc[8][2];
#pragma GCC unroll 8
      for (int i = 0; i < 8; i++) {
        acc[i][0] = _mm512_loadu_ps(out + i * dvp);
        acc[i][1] = _mm512_loadu_ps(out + i * dvp + 16);
      }
      for (int64_t w = 0; w < pairs; w++) {
        __m512bh v0 = (__m512bh)_mm512_loadu_si512(vp + tiled(w, c0, dvp));
        __m512bh v1 = (__m512bh)_mm512_loadu_si512(vp + tiled(w, c0 + 16, dvp));
#pragma GCC unroll 8
        for (int i = 0; i < 8; i++) {
          __m512bh pi = (__m512bh)_mm512_set1_epi32((int)p[(i0 + i) * (BNA / 2) + w]);
          acc[i][0] = _mm512_dpbf16_ps(acc[i][0], pi, v0);
          acc[i][1] = _mm512_dpbf16_ps(acc[i][1], pi, v1);
        }
      }
#pragma GCC unroll 8
      for (int i = 0; i < 8; i++) {
        _mm512_storeu_ps(out + i * dvp, acc[i][0]);
        _mm512_storeu_ps(out + i * dvp + 16, acc[i][1]);
      }
    }
}

/* softmax_row's weights rounded to bfloat16 (as vcvtneps2bf16 rounds: to nearest even). */
INLINE DP void store_bf16(void* w, int64_t j, __m512 e) {
  _mm256_storeu_si256((__m256i*)((uint16_t*)w + j), (__m256i)_mm512_cvtneps_pbh(e));
}

/* The packed keys and values of block [j0, j0 + BNA) of the task's key head: the unit's
 * shared ones, or packed now into the thread's block. */
static void packed_block(const tilec_attention_problem* p, Scratch* x, const Span* w,
                         int64_t j0, const uint32_t** kp, const uint32_t** vp) {
  int64_t d = p->d, dv = p->dv, dp = up32(d), dvp = up32(dv);
  if (x->shared_k != NULL) {
    *kp = x->shared_k + j0 / BNA * (dp / 2) * BNA;
    *vp = x->shared_v + j0 / BNA * (BNA / 2) * dvp;
    return;
  }
  int64_t cols = w->last - j0 < BNA ? w->last - j0 : BNA;
  pack_k(x->kc, (const uint16_t*)p->k + w->k_base + j0 * d, cols, d, dp);
  pack_v(x->vc, (const uint16_t*)p->v + w->v_base + j0 * dv, cols, dv, dvp);
  *kp = x->kc;
  *vp = x->vc;
}

/* The key blocks of one unit, and the 32-bit words of their packed keys and values. */
static int64_t key_blocks(const tilec_attention_problem* p) { return (p->t + BNA - 1) / BNA; }

static int64_t unit_words(const tilec_attention_problem* p) {
  return key_blocks(p) * BNA * (up32(p->d) + up32(p->dv)) / 2;
}

/* Where a unit's packed values start in its words: after its keys. */
static int64_t unit_values(const tilec_attention_problem* p) {
  return key_blocks(p) * (up32(p->d) / 2) * BNA;
}

/* Packing items [first, last) of the units packed at once: key block item % key_blocks of
 * unit unit0 + item / key_blocks, its keys then its values. */
static AMX void pack_items(void* ctx, int64_t first, int64_t last) {
  const Attention* a = (const Attention*)ctx;
  const tilec_attention_problem* p = a->p;
  int64_t d = p->d, dv = p->dv, dp = up32(d), dvp = up32(dv), blocks = key_blocks(p);
  for (int64_t item = first; item < last; item++) {
    int64_t unit = item / blocks, j0 = item % blocks * BNA, k_base, v_base;
    int64_t cols = p->t - j0 < BNA ? p->t - j0 : BNA;
    uint32_t* kc = a->packed + unit * unit_words(p);
    uint32_t* vc = kc + unit_values(p);
    kv_offsets(p, (a->unit0 + unit) * a->unit_rows / p->s, &k_base, &v_base);
    pack_k(kc + j0 / BNA * (dp / 2) * BNA, (const uint16_t*)p->k + k_base + j0 * d, cols, d,
           dp);
    pack_v(vc + j0 / BNA * (BNA / 2) * dvp, (const uint16_t*)p->v + v_base + j0 * dv, cols, dv,
           dvp);
  }
}

/* The key blocks [first, last) of the task's rows on AMX's tiles (see above), or with
 * ``tiles`` 0 on vdpbf16ps over the same packing; o is rows of dvp. */
static AMX void keys_pairs(const tilec_attention_problem* p, Scratch* x, const Span* w,
                           int tiles) {
  int64_t d = p->d, dv = p->dv, dp = up32(d), dvp = up32(dv), row0 = w->row0, rows = w->rows;
  pack_q(x->qa, (const uint16_t*)p->q + row0 * d, rows, d, dp);
  memset(x->pa, 0, BM * BNA * sizeof(uint16_t));
  for (int64_t j0 = w->first; j0 < w->last; j0 += BNA) {
    int64_t cols = w->last - j0 < BNA ? w->last - j0 : BNA;
    const uint32_t *kp, *vp;
    packed_block(p, x, w, j0, &kp, &vp);
    if (tiles)
      scores_amx(x->qa, kp, x->st, BNA, rows, cols, dp);
    else
      scores_dp(x->qa, kp, x->st, BNA, (rows + 31) / 32 * 32, (cols + 31) / 32 * 32, dp);
    for (int64_t r0 = 0; r0 < rows; r0 += 8) {  /* 8 rows a call: they stay in L1 */
      int64_t n = rows - r0 < 8 ? rows - r0 : 8;
      p->scores(p->ctx, x->st + r0 * BNA, x->scores, BNA, row0 + r0, row0 + r0 + n, j0,
                j0 + cols);
      for (int64_t r = r0; r < r0 + n; r++)
        softmax_row(x->scores + (r - r0) * BNA, cols, x->m + r, x->l + r, x->o + r * dvp, dv,
                    x->pa + r * BNA, BNA, store_bf16, 1);
    }
    if (tiles)
      values_amx(x->pa, vp, x->o, rows, cols, dvp);
    else
      values_dp(x->pa, vp, x->o, (rows + 31) / 32 * 32, cols, dvp);
  }
}

/* -- a few query rows (decode) ---------------------------------------------------------------
 * Where a task holds at most FEW rows (a decode: the query heads that share one key head, a
 * row each), the keys and values stream once, straight from the caller's buffers: each key is
 * read once for all the rows (a 16-lane dot product per row), each value once (o += p v for
 * all the rows), nothing packed, widened into scratch or transposed. */

#define FEW 8
#define AHEAD 16   /* keys ahead that a decode prefetches */

/* Key j's prefetches, ``bytes`` of each row: key j + AHEAD (rows ``bytes`` apart from kj)
 * and value j's row vj, read by the values pass once this block's scores are done.  A
 * prefetch never faults, so the rows past the keys are harmless. */
INLINE void prefetch_key(const char* kj, const char* vj, int64_t bytes) {
  for (int64_t line = 0; line < bytes; line += 64) {
    _mm_prefetch(kj + AHEAD * bytes + line, _MM_HINT_T0);
    _mm_prefetch(vj + line, _MM_HINT_T0);
  }
}

/* 16 elements of a float32, float16 or bfloat16 row as float32; lanes past live 0. */
INLINE V4 __m512 load16(const char* src, int dtype, __mmask16 live) {
  if (dtype == TILEC_ATTENTION_F32) return _mm512_maskz_loadu_ps(live, src);
  __m256i h = _mm256_maskz_loadu_epi16(live, src);
  if (dtype == TILEC_ATTENTION_F16) return _mm512_cvtph_ps(h);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* The sums of a[0..3]'s lanes, in lanes 0..3. */
INLINE V4 __m128 sum4(const __m512* a) {
  __m512 t0 = _mm512_add_ps(_mm512_unpacklo_ps(a[0], a[1]), _mm512_unpackhi_ps(a[0], a[1]));
  __m512 t1 = _mm512_add_ps(_mm512_unpacklo_ps(a[2], a[3]), _mm512_unpackhi_ps(a[2], a[3]));
  __m512 u = _mm512_add_ps(_mm512_shuffle_ps(t0, t1, 0x44), _mm512_shuffle_ps(t0, t1, 0xee));
  __m256 h = _mm256_add_ps(_mm512_castps512_ps256(u), _mm512_extractf32x8_ps(u, 1));
  return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

/* Key j's sums of rows 0 .. rows - 1 (lanes 0 .. 3 of s) into st, rows BN apart. */
INLINE void put_sums(float* st, int64_t j, int rows, __m128 s) {
  float sums[4];
  _mm_storeu_ps(sums, s);
#pragma GCC unroll 4
  for (int r = 0; r < 4; r++)
    if (r < rows) st[r * BN + j] = sums[r];
}

/* st[r * BN + j] = q[r] . k[j] for ``rows`` <= 4 (a constant where inlined; q rows d apart,
 * float32) and keys j < cols. */
INLINE V4 void few_scores(const float* q, const char* k, const char* v, int dtype, float* st,
                          int rows, int64_t cols, int64_t d, int64_t dv) {
  int64_t bytes = element_bytes(dtype), full = d / 16 * 16;
  for (int64_t j = 0; j < cols; j++) {
    const char* kj = k + j * d * bytes;
    prefetch_key(kj, v + j * dv * bytes, d * bytes);
    __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                     _mm512_setzero_ps()};
    for (int64_t c = 0; c < d; c += 16) {
      __mmask16 live = c < full ? 0xffff : lanes(d - c);
      __m512 kc = load16(kj + c * bytes, dtype, live);
#pragma GCC unroll 4
      for (int r = 0; r < 4; r++) if (r < rows)
        acc[r] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(live, q + r * d + c), kc, acc[r]);
    }
    put_sums(st, j, rows, sum4(acc));
  }
}

/* o[r] += sum_j w[r * BN + j] v[j] for ``rows`` <= 4 (o rows dv apart): 16 columns at a time
 * over all the keys, the sum in 4 accumulators a row (keys j mod 4), so that every cache
 * line of v is read once. */
INLINE V4 void few_values(const float* w, const char* v, int dtype, float* o, int rows,
                          int64_t cols, int64_t dv) {
  int64_t bytes = element_bytes(dtype);
  for (int64_t c = 0; c < dv; c += 16) {
    __mmask16 live = lanes(dv - c);
    __m512 acc[4][4];
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++) if (r < rows) {
      acc[r][0] = _mm512_maskz_loadu_ps(live, o + r * dv + c);
      acc[r][1] = acc[r][2] = acc[r][3] = _mm512_setzero_ps();
    }
    const char* vc = v + c * bytes;
    int64_t j = 0;
    for (; j + 4 <= cols; j += 4)
#pragma GCC unroll 4
      for (int u = 0; u < 4; u++) {
        __m512 vj = load16(vc + (j + u) * dv * bytes, dtype, live);
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) if (r < rows)
          acc[r][u] = _mm512_fmadd_ps(_mm512_set1_ps(w[r * BN + j + u]), vj, acc[r][u]);
      }
    for (; j < cols; j++) {
      __m512 vj = load16(vc + j * dv * bytes, dtype, live);
#pragma GCC unroll 4
      for (int r = 0; r < 4; r++) if (r < rows)
        acc[r][0] = _mm512_fmadd_ps(_mm512_set1_ps(w[r * BN + j]), vj, acc[r][0]);
    }
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++) if (r < rows)
      _mm512_mask_storeu_ps(o + r * dv + c, live,
                            _mm512_add_ps(_mm512_add_ps(acc[r][0], acc[r][1]),
                                          _mm512_add_ps(acc[r][2], acc[r][3])));
  }
}

/* few_scores (or few_values) for 1 to 4 rows, the count a constant in each call. */
#define FEW_ROWS(call, rows) \
  switch (rows) { case 1: call(1); break; case 2: call(2); break; case 3: call(3); break; \
                  default: call(4); }

/* The rest of a block once its raw scores are in x->st: the kernel's scores function, the
 * online softmax and few_values (for one element type of the values). */
INLINE V4 void few_rest(const tilec_attention_problem* p, Scratch* x, const Span* w,
                        int64_t j0, int64_t cols, int dtype) {
  const char* v = at(p->v, dtype, w->v_base + j0 * p->dv);
  block_epilogue(p, x->st, x->scores, w->row0, w->rows, j0, cols);
  online_softmax_v4(x->scores, BN, x->sb, x->m, x->l, x->o, p->dv, w->rows, cols, p->dv);
  for (int64_t r0 = 0; r0 < w->rows; r0 += 4) {
#define VALUES(n) few_values(x->sb + r0 * BN, v, dtype, x->o + r0 * p->dv, n, cols, p->dv)
    FEW_ROWS(VALUES, w->rows - r0)
#undef VALUES
  }
}

/* One block of keys and values of one element type. */
INLINE V4 void few_block(const tilec_attention_problem* p, Scratch* x, const Span* w,
                         int64_t j0, int64_t cols, int dtype) {
  const char* k = at(p->k, dtype, w->k_base + j0 * p->d);
  const char* v = at(p->v, dtype, w->v_base + j0 * p->dv);
  for (int64_t r0 = 0; r0 < w->rows; r0 += 4) {
#define SCORES(n) few_scores(x->q + r0 * p->d, k, v, dtype, x->st + r0 * BN, n, cols, p->d, p->dv)
    FEW_ROWS(SCORES, w->rows - r0)
#undef SCORES
  }
  few_rest(p, x, w, j0, cols, dtype);
}

/* few_scores for bfloat16 queries (qa: rows dp apart, zero past d) and keys: 32 products of
 * pairs a vdpbf16ps, as AMX's tiles compute them. */
INLINE DP void few_scores_dp(const uint16_t* qa, int64_t dp, const uint16_t* k, const char* v,
                             float* st, int rows, int64_t cols, int64_t d, int64_t dv) {
  for (int64_t j = 0; j < cols; j++) {
    const uint16_t* kj = k + j * d;
    prefetch_key((const char*)kj, v + j * dv * 2, 2 * d);
    __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                     _mm512_setzero_ps()};
    for (int64_t c = 0; c < d; c += 32) {
      __mmask32 live = d - c >= 32 ? 0xffffffffu : (1u << (d - c)) - 1;
      __m512bh kc = (__m512bh)_mm512_maskz_loadu_epi16(live, kj + c);
#pragma GCC unroll 4
      for (int r = 0; r < 4; r++)
        if (r < rows)
          acc[r] = _mm512_dpbf16_ps(acc[r], (__m512bh)_mm512_loadu_si512(qa + r * dp + c), kc);
    }
    put_sums(st, j, rows, sum4(acc));
  }
}

/* o[r] += sum_j w[r * BN + j] v[j] for ``rows`` <= 4 (o rows dv apart) with bfloat16 weights
 * (zero from cols to the next even key) and values: 32 columns at a time over all the keys,
 * keys j and j + 1 interleaved into pairs (vpunpck{l,h}wd: per 128-bit lane, columns 0-3 in
 * lo's and 4-7 in hi's) for a vdpbf16ps each, and the columns put back in order once at the
 * end. */
INLINE DP void few_values_dp(const uint16_t* w, const uint16_t* v, float* o, int rows,
                             int64_t cols, int64_t dv) {
  const __m512i lo_order = _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21,
                                             22, 23);
  const __m512i hi_order = _mm512_add_epi32(lo_order, _mm512_set1_epi32(8));
  for (int64_t c = 0; c < dv; c += 32) {
    __mmask32 live = dv - c >= 32 ? 0xffffffffu : (1u << (dv - c)) - 1;
    __m512 acc[4][2];
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
    const uint16_t* vc = v + c;
    for (int64_t j = 0; j < cols; j += 2) {
      __m512i r0 = _mm512_maskz_loadu_epi16(live, vc + j * dv);
      __m512i r1 = j + 1 < cols ? _mm512_maskz_loadu_epi16(live, vc + (j + 1) * dv)
                                : _mm512_setzero_si512();
      __m512bh lo = (__m512bh)_mm512_unpacklo_epi16(r0, r1);
      __m512bh hi = (__m512bh)_mm512_unpackhi_epi16(r0, r1);
#pragma GCC unroll 4
      for (int r = 0; r < 4; r++)
        if (r < rows) {
          uint32_t pair;
          memcpy(&pair, w + r * BN + j, sizeof pair);
          __m512bh wr = (__m512bh)_mm512_set1_epi32((int)pair);
          acc[r][0] = _mm512_dpbf16_ps(acc[r][0], wr, lo);
          acc[r][1] = _mm512_dpbf16_ps(acc[r][1], wr, hi);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++)
      if (r < rows) {
        float* at = o + r * dv + c;
        __m512 first = _mm512_permutex2var_ps(acc[r][0], lo_order, acc[r][1]);
        __m512 second = _mm512_permutex2var_ps(acc[r][0], hi_order, acc[r][1]);
        __mmask16 live0 = (__mmask16)live, live1 = (__mmask16)(live >> 16);
        _mm512_mask_storeu_ps(at, live0, _mm512_add_ps(_mm512_maskz_loadu_ps(live0, at), first));
        _mm512_mask_storeu_ps(at + 16, live1,
                              _mm512_add_ps(_mm512_maskz_loadu_ps(live1, at + 16), second));
      }
  }
}

/* The key blocks of a task of at most FEW rows where q, k and v are bfloat16 and the CPU has
 * AVX512_BF16: q k on vdpbf16ps, and p v too (the weights rounded to bfloat16, as on AMX)
 * where there is no AMX (on Sapphire Rapids vdpbf16ps runs at half the FMA rate). */
static DP void keys_few_dp(const tilec_attention_problem* p, Scratch* x, const Span* w) {
  int64_t d = p->d, dv = p->dv, dp = up32(d);
  pack_q(x->qa, (const uint16_t*)p->q + w->row0 * d, w->rows, d, dp);
  for (int64_t j0 = w->first; j0 < w->last; j0 += BN) {
    int64_t cols = w->last - j0 < BN ? w->last - j0 : BN;
    const uint16_t* k = (const uint16_t*)p->k + w->k_base + j0 * d;
    const uint16_t* v = (const uint16_t*)p->v + w->v_base + j0 * dv;
    for (int64_t r0 = 0; r0 < w->rows; r0 += 4) {
#define SCORES(n) \
  few_scores_dp(x->qa + r0 * dp, dp, k, (const char*)v, x->st + r0 * BN, n, cols, d, dv)
      FEW_ROWS(SCORES, w->rows - r0)
#undef SCORES
    }
    if (tilec_cpu_amx()) {   /* vdpbf16ps at half the FMA rate: p v on FMAs */
      few_rest(p, x, w, j0, cols, TILEC_ATTENTION_BF16);
      continue;
    }
    block_epilogue(p, x->st, x->scores, w->row0, w->rows, j0, cols);
    for (int64_t r = 0; r < w->rows; r++)
      softmax_row(x->scores + r * BN, cols, x->m + r, x->l + r, x->o + r * dv, dv,
                  x->pa + r * BN, BN, store_bf16, 1);
    for (int64_t r0 = 0; r0 < w->rows; r0 += 4) {
#define VALUES(n) few_values_dp(x->pa + r0 * BN, v, x->o + r0 * dv, n, cols, dv)
      FEW_ROWS(VALUES, w->rows - r0)
#undef VALUES
    }
  }
}

/* The key blocks [first, last) of a task of at most FEW rows; o is rows of dv.  The keys and
 * values have one element type (else keys_fma). */
static V4 void keys_few(const tilec_attention_problem* p, Scratch* x, const Span* w) {
  if (p->q_dtype == TILEC_ATTENTION_BF16 && p->k_dtype == TILEC_ATTENTION_BF16 &&
      tilec_cpu_bf16()) {
    keys_few_dp(p, x, w);
    return;
  }
  widen(x->q, at(p->q, p->q_dtype, w->row0 * p->d), p->q_dtype, w->rows * p->d);
  for (int64_t j0 = w->first; j0 < w->last; j0 += BN) {
    int64_t cols = w->last - j0 < BN ? w->last - j0 : BN;
    if (p->k_dtype == TILEC_ATTENTION_F32)
      few_block(p, x, w, j0, cols, TILEC_ATTENTION_F32);
    else if (p->k_dtype == TILEC_ATTENTION_BF16)
      few_block(p, x, w, j0, cols, TILEC_ATTENTION_BF16);
    else
      few_block(p, x, w, j0, cols, TILEC_ATTENTION_F16);
  }
}

/* x86-64-v3: the same on 8 lanes, for d and dv multiples of 8. */

INLINE V3 __m256 load8(const char* src, int dtype) {
  if (dtype == TILEC_ATTENTION_F32) return _mm256_loadu_ps((const float*)src);
  __m128i h = _mm_loadu_si128((const __m128i*)src);
  if (dtype == TILEC_ATTENTION_F16) return _mm256_cvtph_ps(h);
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* The sums of a[0..3]'s lanes, in lanes 0..3. */
INLINE V3 __m128 sum4_v3(const __m256* a) {
  __m256 u = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
  return _mm_add_ps(_mm256_castps256_ps128(u), _mm256_extractf128_ps(u, 1));
}

INLINE V3 void few_scores_v3(const float* q, const char* k, const char* v, int dtype,
                             float* st, int rows, int64_t cols, int64_t d, int64_t dv) {
  int64_t bytes = element_bytes(dtype);
  for (int64_t j = 0; j < cols; j++) {
    const char* kj = k + j * d * bytes;
    prefetch_key(kj, v + j * dv * bytes, d * bytes);
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                     _mm256_setzero_ps()};
    for (int64_t c = 0; c < d; c += 8) {
      __m256 kc = load8(kj + c * bytes, dtype);
#pragma GCC unroll 4
      for (int r = 0; r < 4; r++)
        if (r < rows) acc[r] = _mm256_fmadd_ps(_mm256_loadu_ps(q + r * d + c), kc, acc[r]);
    }
    put_sums(st, j, rows, sum4_v3(acc));
  }
}

INLINE V3 void few_values_v3(const float* w, const char* v, int dtype, float* o, int rows,
                             int64_t cols, int64_t dv) {
  int64_t bytes = element_bytes(dtype);
  for (int64_t c = 0; c < dv; c += 8) {
    __m256 acc[4][2];
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++)
      if (r < rows) acc[r][0] = _mm256_loadu_ps(o + r * dv + c), acc[r][1] = _mm256_setzero_ps();
    const char* vc = v + c * bytes;
    for (int64_t j = 0; j < cols; j += 2) {   /* w is zero past cols: key cols may be read */
#pragma GCC unroll 2
      for (int u = 0; u < 2; u++) {
        __m256 vj = j + u < cols ? load8(vc + (j + u) * dv * bytes, dtype) : _mm256_setzero_ps();
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++)
          if (r < rows)
            acc[r][u] = _mm256_fmadd_ps(_mm256_broadcast_ss(w + r * BN + j + u), vj, acc[r][u]);
      }
    }
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++)
      if (r < rows) _mm256_storeu_ps(o + r * dv + c, _mm256_add_ps(acc[r][0], acc[r][1]));
  }
}

/* bfloat16 on AVX2, 16 elements a load (not 8 a vpmovzxwd and a shift): the load's 32-bit
 * lanes hold elements 2i (low half) and 2i + 1 (high half), so that a shift left by 16 makes
 * the even elements float32 and masking off the low half the odd ones.  The dot
 * products take q's 16-element chunks as their 8 even elements then their 8 odd ones
 * (bf16_pairs_order); the values' accumulators hold even and odd columns, put back in order
 * once a block. */

/* Each row's 16-element chunks of q (rows d apart, d a multiple of 16) reordered in place:
 * the even elements, then the odd. */
static void bf16_pairs_order(float* q, int64_t rows, int64_t d) {
  for (int64_t c = 0; c < rows * d; c += 16) {
    float chunk[16];
    for (int i = 0; i < 8; i++) chunk[i] = q[c + 2 * i], chunk[8 + i] = q[c + 2 * i + 1];
    memcpy(q + c, chunk, sizeof chunk);
  }
}

INLINE V3 __m256 bf16_even(__m256i pairs) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(pairs, 16));
}

INLINE V3 __m256 bf16_odd(__m256i pairs) {
  return _mm256_castsi256_ps(_mm256_and_si256(pairs, _mm256_set1_epi32((int)0xffff0000u)));
}

/* few_scores_v3 for bfloat16 keys, q in bf16_pairs_order.  A chunk's even and odd products
 * are summed by a multiply and an FMA before they join the row's sum by an add: the sums'
 * chains wait on the adder (8 adds a key), not on 16 FMAs' latency, and the adds run beside
 * the FMAs (the loop alone, in L1: 1.4x on Zen 5). */
INLINE V3 void few_scores_bf16_v3(const float* q, const uint16_t* k, const uint16_t* v,
                                  float* st, int rows, int64_t cols, int64_t d, int64_t dv) {
  for (int64_t j = 0; j < cols; j++) {
    const uint16_t* kj = k + j * d;
    prefetch_key((const char*)kj, (const char*)(v + j * dv), 2 * d);
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                     _mm256_setzero_ps()};
    for (int64_t c = 0; c < d; c += 16) {
      __m256i kc = _mm256_loadu_si256((const __m256i*)(kj + c));
      __m256 ke = bf16_even(kc), ko = bf16_odd(kc);
#pragma GCC unroll 4
      for (int r = 0; r < 4; r++)
        if (r < rows) {
          __m256 pair = _mm256_mul_ps(_mm256_loadu_ps(q + r * d + c), ke);
          pair = _mm256_fmadd_ps(_mm256_loadu_ps(q + r * d + c + 8), ko, pair);
          acc[r] = _mm256_add_ps(acc[r], pair);
        }
    }
    put_sums(st, j, rows, sum4_v3(acc));
  }
}

/* few_values_v3 for bfloat16 values, dv a multiple of 16: 16 columns at a time, a weight
 * broadcast for the even and the odd ones. */
INLINE V3 void few_values_bf16_v3(const float* w, const uint16_t* v, float* o, int rows,
                                  int64_t cols, int64_t dv) {
  for (int64_t c = 0; c < dv; c += 16) {
    __m256 even[4], odd[4];
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++) even[r] = odd[r] = _mm256_setzero_ps();
    for (int64_t j = 0; j < cols; j++) {
      __m256i vj = _mm256_loadu_si256((const __m256i*)(v + j * dv + c));
      __m256 ve = bf16_even(vj), vo = bf16_odd(vj);
#pragma GCC unroll 4
      for (int r = 0; r < 4; r++)
        if (r < rows) {
          __m256 wr = _mm256_broadcast_ss(w + r * BN + j);
          even[r] = _mm256_fmadd_ps(wr, ve, even[r]);
          odd[r] = _mm256_fmadd_ps(wr, vo, odd[r]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++)
      if (r < rows) {   /* lo: columns 0-3 | 8-11, hi: 4-7 | 12-15 */
        __m256 lo = _mm256_unpacklo_ps(even[r], odd[r]), hi = _mm256_unpackhi_ps(even[r], odd[r]);
        float* at = o + r * dv + c;
        _mm256_storeu_ps(at, _mm256_add_ps(_mm256_loadu_ps(at),
                                           _mm256_permute2f128_ps(lo, hi, 0x20)));
        _mm256_storeu_ps(at + 8, _mm256_add_ps(_mm256_loadu_ps(at + 8),
                                               _mm256_permute2f128_ps(lo, hi, 0x31)));
      }
  }
}

/* Whether a v3 decode's bfloat16 keys and values take the *_bf16_v3 functions. */
static int bf16_pairs(const tilec_attention_problem* p) {
  return p->k_dtype == TILEC_ATTENTION_BF16 && p->d % 16 == 0 && p->dv % 16 == 0;
}

INLINE V3 void few_block_v3(const tilec_attention_problem* p, Scratch* x, const Span* w,
                            int64_t j0, int64_t cols, int dtype) {
  const char* k = at(p->k, dtype, w->k_base + j0 * p->d);
  const char* v = at(p->v, dtype, w->v_base + j0 * p->dv);
  int pairs = dtype == TILEC_ATTENTION_BF16 && bf16_pairs(p);   /* constant but for bf16 */
  for (int64_t r0 = 0; r0 < w->rows; r0 += 4) {
    if (pairs) {
#define SCORES(n) few_scores_bf16_v3(x->q + r0 * p->d, (const uint16_t*)k, (const uint16_t*)v, \
                                     x->st + r0 * BN, n, cols, p->d, p->dv)
      FEW_ROWS(SCORES, w->rows - r0)
#undef SCORES
      continue;
    }
#define SCORES(n) \
  few_scores_v3(x->q + r0 * p->d, k, v, dtype, x->st + r0 * BN, n, cols, p->d, p->dv)
    FEW_ROWS(SCORES, w->rows - r0)
#undef SCORES
  }
  block_epilogue(p, x->st, x->scores, w->row0, w->rows, j0, cols);
  online_softmax(x->scores, BN, x->sb, x->m, x->l, x->o, w->rows, cols, p->dv);
  for (int64_t r0 = 0; r0 < w->rows; r0 += 4) {
    if (pairs) {
#define VALUES(n) \
  few_values_bf16_v3(x->sb + r0 * BN, (const uint16_t*)v, x->o + r0 * p->dv, n, cols, p->dv)
      FEW_ROWS(VALUES, w->rows - r0)
#undef VALUES
      continue;
    }
#define VALUES(n) few_values_v3(x->sb + r0 * BN, v, dtype, x->o + r0 * p->dv, n, cols, p->dv)
    FEW_ROWS(VALUES, w->rows - r0)
#undef VALUES
  }
}

static V3 void keys_few_v3(const tilec_attention_problem* p, Scratch* x, const Span* w) {
  widen(x->q, at(p->q, p->q_dtype, w->row0 * p->d), p->q_dtype, w->rows * p->d);
  if (bf16_pairs(p)) bf16_pairs_order(x->q, w->rows, p->d);
  for (int64_t j0 = w->first; j0 < w->last; j0 += BN) {
    int64_t cols = w->last - j0 < BN ? w->last - j0 : BN;
    if (p->k_dtype == TILEC_ATTENTION_F32)
      few_block_v3(p, x, w, j0, cols, TILEC_ATTENTION_F32);
    else if (p->k_dtype == TILEC_ATTENTION_BF16)
      few_block_v3(p, x, w, j0, cols, TILEC_ATTENTION_BF16);
    else
      few_block_v3(p, x, w, j0, cols, TILEC_ATTENTION_F16);
  }
}

/* Whether a task of ``rows`` rows streams its keys and values (keys_few). */
static int few_rows(const tilec_attention_problem* p, int64_t rows) {
  int level = tilec_cpu_level();
  return rows <= FEW && p->k_dtype == p->v_dtype
         && (level >= 4 || (level == 3 && p->d % 8 == 0 && p->dv % 8 == 0));
}

/* -- a task --------------------------------------------------------------------------------- */

/* The grid rows [row0, row0 + rows) of row block ``block``, and the last query index (within
 * s) among them. */
static void locate(const Attention* a, int64_t block, int64_t* row0, int64_t* rows,
                   int64_t* last_row) {
  int64_t s = a->p->s, first = block % a->row_blocks * BM;
  *rows = a->unit_rows - first < BM ? a->unit_rows - first : BM;
  *row0 = block / a->row_blocks * a->unit_rows + first;
  *last_row = first % s + *rows <= s ? first % s + *rows - 1 : s - 1;
}

/* out[i * ldo + j] = in[j * ldi + i] for i, j < 16: 16 loads, 64 shuffles, 16 stores. */
static V4 void transpose16(const float* in, int64_t ldi, float* out, int64_t ldo) {
  __m512 r[16], t[16];
#pragma GCC unroll 16
  for (int i = 0; i < 16; i++) r[i] = _mm512_loadu_ps(in + i * ldi);
#pragma GCC unroll 8
  for (int i = 0; i < 16; i += 2) {     /* rows i, i + 1 interleaved a float at a time */
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
#pragma GCC unroll 4
  for (int i = 0; i < 16; i += 4)       /* then two floats: lane L of r[i + k] holds column */
#pragma GCC unroll 2                     /* 4L + k of rows i .. i + 3 */
    for (int h = 0; h < 2; h++) {
      __m512d a = _mm512_castps_pd(t[i + h]), b = _mm512_castps_pd(t[i + h + 2]);
      r[i + 2 * h] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, b));
      r[i + 2 * h + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, b));
    }
#pragma GCC unroll 4
  for (int k = 0; k < 4; k++) {         /* then 128-bit lanes: column 4L + k of all the rows */
    __m512 u0 = _mm512_shuffle_f32x4(r[k], r[4 + k], 0x44);
    __m512 u1 = _mm512_shuffle_f32x4(r[k], r[4 + k], 0xee);
    __m512 u2 = _mm512_shuffle_f32x4(r[8 + k], r[12 + k], 0x44);
    __m512 u3 = _mm512_shuffle_f32x4(r[8 + k], r[12 + k], 0xee);
    _mm512_storeu_ps(out + k * ldo, _mm512_shuffle_f32x4(u0, u2, 0x88));
    _mm512_storeu_ps(out + (4 + k) * ldo, _mm512_shuffle_f32x4(u0, u2, 0xdd));
    _mm512_storeu_ps(out + (8 + k) * ldo, _mm512_shuffle_f32x4(u1, u3, 0x88));
    _mm512_storeu_ps(out + (12 + k) * ldo, _mm512_shuffle_f32x4(u1, u3, 0xdd));
  }
}

/* out[i * ldo + j] = in[j * ldi + i] for i, j < 8 (x86-64-v3): 8 loads, 24 shuffles, 8
 * stores. */
static V3 void transpose8(const float* in, int64_t ldi, float* out, int64_t ldo) {
  __m256 r[8], t[8];
#pragma GCC unroll 8
  for (int i = 0; i < 8; i++) r[i] = _mm256_loadu_ps(in + i * ldi);
#pragma GCC unroll 4
  for (int i = 0; i < 8; i += 2) {      /* rows i, i + 1 interleaved a float at a time */
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
#pragma GCC unroll 2
  for (int i = 0; i < 8; i += 4) {      /* then two floats */
    r[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
    r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xee);
    r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
    r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xee);
  }
#pragma GCC unroll 4
  for (int k = 0; k < 4; k++) {         /* then 128-bit halves */
    _mm256_storeu_ps(out + k * ldo, _mm256_permute2f128_ps(r[k], r[k + 4], 0x20));
    _mm256_storeu_ps(out + (k + 4) * ldo, _mm256_permute2f128_ps(r[k], r[k + 4], 0x31));
  }
}

/* x86-64-v4: the block's raw scores st (keys x queries, from block_scores_v4) to weights in
 * sb (queries x keys), 16 rows at a time: transposed, through the kernel's scores function
 * and softmax_row while they are in L1. */
static V4 void block_weights_v4(const tilec_attention_problem* p, Scratch* x, int64_t row0,
                                int64_t rows, int64_t j0, int64_t cols) {
  for (int64_t r0 = 0; r0 < rows; r0 += 16) {
    for (int64_t j = 0; j < cols; j += 16)      /* st's rows past cols: stale, never read */
      transpose16(x->st + j * BM + r0, BM, x->sb + r0 * BN + j, BN);
    int64_t n = rows - r0 < 16 ? rows - r0 : 16;
    p->scores(p->ctx, x->sb + r0 * BN, x->scores, BN, row0 + r0, row0 + r0 + n, j0, j0 + cols);
    for (int64_t r = r0; r < r0 + n; r++)
      softmax_row(x->scores + (r - r0) * BN, cols, x->m + r, x->l + r, x->o + r * p->dv, p->dv,
                  x->sb + r * BN, BN, store_f32, 0);
  }
}

/* Into L2, ``bytes`` from ``from``: the next block's keys or values. */
static void prefetch_l2(const char* from, int64_t bytes) {
  for (int64_t line = 0; line < bytes; line += 64) _mm_prefetch(from + line, _MM_HINT_T1);
}

/* Keys and values a task walks beyond which keys_fma copies float32 blocks into its scratch
 * before their tiles read them, as it widens the half types: a sequential copy of each
 * block, then tiles on lines in L1 and L2.  Read in place, a key head's 16 MiB (s = 16384,
 * d = 128) ran the same tiles 1.2-1.35x slower per FLOP than its 4 MiB at s = 4096; the
 * copy made it 1.12-1.13x faster there and 0.93-0.97x slower at 4096. */
#define COPY_BYTES ((int64_t)8 << 20)

/* The key blocks [first, last) of the task's rows on float32 FMA tiles; o is rows of dv. */
static void keys_fma(const tilec_attention_problem* p, Scratch* x, const Span* w) {
  int64_t row0 = w->row0, rows = w->rows, k_base = w->k_base, v_base = w->v_base;
  int64_t first = w->first, last = w->last;
  int v4 = tilec_cpu_level() >= 4;
  int64_t key_bytes = p->d * element_bytes(p->k_dtype) + p->dv * element_bytes(p->v_dtype);
  int copies = (last - first) * key_bytes > COPY_BYTES;
  widen(x->q, at(p->q, p->q_dtype, row0 * p->d), p->q_dtype, rows * p->d);
  if (v4 && p->d % 16 == 0) {
    memset(x->q + rows * p->d, 0, (size_t)((BM - rows) * p->d) * sizeof(float));
    for (int64_t i = 0; i < BM; i += 16)
      for (int64_t c = 0; c < p->d; c += 16)
        transpose16(x->q + i * p->d + c, p->d, x->qt + c * BM + i, BM);
  } else {
    for (int64_t c = 0; c < p->d; c++)
      for (int64_t i = 0; i < BM; i++) x->qt[c * BM + i] = i < rows ? x->q[i * p->d + c] : 0.0f;
  }
  for (int64_t j0 = first; j0 < last; j0 += BN) {
    int64_t cols = last - j0 < BN ? last - j0 : BN;
    const float* kb = (const float*)at(p->k, p->k_dtype, k_base + j0 * p->d);
    const float* vb = (const float*)at(p->v, p->v_dtype, v_base + j0 * p->dv);
    int64_t next = last - j0 - BN < BN ? last - j0 - BN : BN;   /* the next block's keys */
    if (next > 0)
      prefetch_l2(at(p->k, p->k_dtype, k_base + (j0 + BN) * p->d),
                  next * p->d * element_bytes(p->k_dtype));
    if (p->k_dtype != TILEC_ATTENTION_F32 || copies)
      widen(x->kb, kb, p->k_dtype, cols * p->d), kb = x->kb;
    if (p->v_dtype != TILEC_ATTENTION_F32 || copies)
      widen(x->vb, vb, p->v_dtype, cols * p->dv), vb = x->vb;
    if (v4) {
      block_scores_v4(x->qt, kb, x->st, cols, p->d, (rows + 31) / 32 * 32);
      block_weights_v4(p, x, row0, rows, j0, cols);
    } else {
      block_scores(x->qt, kb, x->st, cols, p->d, (rows + 15) / 16 * 16);
      for (int64_t j = 0; j < cols; j += 8)   /* st's rows past cols: stale, never read */
        for (int64_t r = 0; r < rows; r += 8)
          transpose8(x->st + j * BM + r, BM, x->sb + r * BN + j, BN);
      block_epilogue(p, x->sb, x->scores, row0, rows, j0, cols);
      online_softmax(x->scores, BN, x->sb, x->m, x->l, x->o, rows, cols, p->dv);
    }
    if (next > 0)
      prefetch_l2(at(p->v, p->v_dtype, v_base + (j0 + BN) * p->dv),
                  next * p->dv * element_bytes(p->v_dtype));
    block_values(x->sb, vb, x->o, rows, cols, p->dv,
                 v4 ? block_values_v4(x->sb, vb, x->o, rows, cols, p->dv) : 0);
  }
}

/* o[r] /= l[r] for rows of dv (0 keys: 0 * inf = NaN, as 0 / 0). */
static V4 void normalise_v4(float* o, const float* l, int64_t rows, int64_t dv) {
  for (int64_t r = 0; r < rows; r++) {
    __m512 inverse = _mm512_set1_ps(1.0f / l[r]);
    for (int64_t c = 0; c < dv; c += 16)
      _mm512_mask_storeu_ps(o + r * dv + c, lanes(dv - c),
                            _mm512_mul_ps(_mm512_maskz_loadu_ps(lanes(dv - c), o + r * dv + c),
                                          inverse));
  }
}

/* The row block of a unit's i-th task.  Causal: heaviest first (the last blocks of every
 * query head's s rows, then the ones before), so that threads taking chunks of tasks in order
 * finish together instead of one of them left with the last head's heavy half; in order
 * where s is not a multiple of BM. */
static int64_t ordered(const Attention* a, int64_t block) {
  const tilec_attention_problem* p = a->p;
  if (!p->causal || p->s % BM != 0) return block;
  int64_t per_head = p->s / BM, i = block % a->row_blocks;
  return block - i + i % a->share * per_head + per_head - 1 - i / a->share;
}

static void run_task(const Attention* a, int64_t task, Scratch* x) {
  const tilec_attention_problem* p = a->p;
  int64_t split = task % a->splits, block = ordered(a, task / a->splits), last_row, dv = p->dv;
  Span w;
  locate(a, block, &w.row0, &w.rows, &last_row);
  int64_t row0 = w.row0, rows = w.rows;
  kv_offsets(p, row0 / p->s, &w.k_base, &w.v_base);
  for (int64_t r = 0; r < rows; r++) x->m[r] = -INFINITY, x->l[r] = 0.0f;
  memset(x->o, 0, (size_t)(BM * up32(dv)) * sizeof(float));
  w.first = split * a->keys_per_split;
  w.end = w.last = w.first + a->keys_per_split < p->t ? w.first + a->keys_per_split : p->t;
  if (p->causal && w.last > last_row + p->diagonal + 1)
    w.last = last_row + p->diagonal + 1;   /* later keys are above every row's diagonal */
  if (few_rows(p, rows)) {
    if (tilec_cpu_level() >= 4)
      keys_few(p, x, &w);
    else
      keys_few_v3(p, x, &w);
  } else if (a->pairs) {
    if (a->packed != NULL) {
      x->shared_k = a->packed + (block / a->row_blocks - a->unit0) * unit_words(p);
      x->shared_v = x->shared_k + unit_values(p);
    }
    keys_pairs(p, x, &w, a->tiles);
    for (int64_t r = 1; r < rows; r++)     /* rows of dvp to rows of dv */
      memmove(x->o + r * dv, x->o + r * up32(dv), (size_t)dv * sizeof(float));
  } else {
    keys_fma(p, x, &w);
  }
  if (a->splits > 1) {
    float* out = a->partial + (block * a->splits + split) * BM * (dv + 2);
    memcpy(out, x->o, (size_t)(rows * dv) * sizeof(float));
    memcpy(out + BM * dv, x->m, (size_t)rows * sizeof(float));
    memcpy(out + BM * dv + BM, x->l, (size_t)rows * sizeof(float));
    return;
  }
  if (tilec_cpu_level() >= 4)
    normalise_v4(x->o, x->l, rows, dv);
  else
    for (int64_t r = 0; r < rows; r++) {
      float inverse = 1.0f / x->l[r];    /* 0 keys: 0 * inf = NaN, as 0 / 0 */
      for (int64_t c = 0; c < dv; c++) x->o[r * dv + c] *= inverse;
    }
  narrow((char*)p->out + row0 * dv * element_bytes(p->out_dtype), x->o, p->out_dtype,
         rows * dv);
}

/* Combine the splits of row block ``block`` in split order. */
static void combine(const Attention* a, int64_t block, float* o) {
  const tilec_attention_problem* p = a->p;
  int64_t row0, rows, last_row, dv = p->dv;
  locate(a, block, &row0, &rows, &last_row);
  for (int64_t r = 0; r < rows; r++) {
    float top = -INFINITY, sum = 0.0f;
    for (int64_t k = 0; k < a->splits; k++) {
      float mk = a->partial[(block * a->splits + k) * BM * (dv + 2) + BM * dv + r];
      top = mk > top ? mk : top;
    }
    memset(o + r * dv, 0, (size_t)dv * sizeof(float));
    for (int64_t k = 0; k < a->splits; k++) {
      const float* part = a->partial + (block * a->splits + k) * BM * (dv + 2);
      float mk = part[BM * dv + r];
      if (mk == -INFINITY) continue;
      float w = exp1(mk - top);
      sum += w * part[BM * dv + BM + r];
      for (int64_t c = 0; c < dv; c++) o[r * dv + c] += w * part[r * dv + c];
    }
    for (int64_t c = 0; c < dv; c++) o[r * dv + c] /= sum;
  }
  narrow((char*)p->out + row0 * dv * element_bytes(p->out_dtype), o, p->out_dtype, rows * dv);
}

/* The bytes of one unit's packed keys and values: every block of t. */
static int64_t unit_bytes(const tilec_attention_problem* p) { return unit_words(p) * 4; }

/* Whether the threads share each unit's packed keys and values: on AMX, where every thread
 * has row blocks of the unit to compute (else each packs a block at a time). */
static int shares_units(const Attention* a) {
  return a->pairs && a->splits == 1 && a->p->t > 0 && a->row_blocks >= 2 * tilec_num_threads()
         && unit_bytes(a->p) <= SHARED_BYTES;
}

static int64_t scratch_floats(const Attention* a) {
  const tilec_attention_problem* p = a->p;
  int64_t dp = up32(p->d), dvp = up32(p->dv), slot = a->pairs ? dp / 2 * BNA + BNA / 2 * dvp : 0;
  return 2 * BM * p->d + BN * p->d + BN * p->dv + BM * BNA + 2 * BM * BN + BM * dvp + 2 * BM
         + BM * dp / 2 + BM * BNA / 2 + slot;
}

static Scratch carve(const Attention* a, float* f) {
  const tilec_attention_problem* p = a->p;
  Scratch x;
  x.q = f, f += BM * p->d;
  x.qt = f, f += BM * p->d;
  x.kb = f, f += BN * p->d;
  x.vb = f, f += BN * p->dv;
  x.st = f, f += BM * BNA;   /* BM * BN for keys_fma */
  x.sb = f, f += BM * BN;
  x.scores = f, f += BM * BN;
  x.o = f, f += BM * up32(p->dv);
  x.m = f, f += BM;
  x.l = f, f += BM;
  x.qa = (uint16_t*)f, f += BM * up32(p->d) / 2;
  x.pa = (uint16_t*)f, f += BM * BNA / 2;
  int64_t slots = a->pairs ? 1 : 0;
  x.kc = (uint32_t*)f, f += slots * up32(p->d) / 2 * BNA;
  x.vc = (uint32_t*)f;
  x.shared_k = x.shared_v = NULL;    /* run_task points them at the task's unit */
  return x;
}

/* Out of memory in a pool thread: recorded for tilec_attention to report. */
static void failed(const Attention* a) {
  __atomic_store_n(&((Attention*)a)->failed, 1, __ATOMIC_RELAXED);
}

static void tasks(void* ctx, int64_t first, int64_t last) {
  const Attention* a = (const Attention*)ctx;
  float* f = (float*)tilec_alloc(scratch_floats(a) * (int64_t)sizeof(float));
  if (f == NULL) {
    failed(a);
    return;
  }
  Scratch x = carve(a, f);
  memset(x.st, 0, BM * BNA * sizeof(float));   /* transpose16 reads it whole */
  if (a->tiles) amx_begin();
  for (int64_t task = first; task < last; task++) run_task(a, a->task0 + task, &x);
  if (a->tiles) amx_end();
  tilec_free(f);
}

/* Chunks [first, last) of a->chunk tasks each (of a->count).  The threads take chunks in
 * order, a few to a unit's row blocks, so that they work on one unit at once and share its
 * keys and values in the cache: chunks of whole units (as tilec_parallel_for cuts them)
 * put each thread on a unit of its own, and at s = 16384 in float32 two units' keys and
 * values fill the 32 MiB of a last-level cache. */
static void task_chunks(void* ctx, int64_t first, int64_t last) {
  const Attention* a = (const Attention*)ctx;
  int64_t end = last * a->chunk < a->count ? last * a->chunk : a->count;
  tasks(ctx, first * a->chunk, end);
}

static void combines(void* ctx, int64_t first, int64_t last) {
  const Attention* a = (const Attention*)ctx;
  float* o = (float*)tilec_alloc(BM * a->p->dv * (int64_t)sizeof(float));
  if (o == NULL) {
    failed(a);
    return;
  }
  for (int64_t block = first; block < last; block++) combine(a, block, o);
  tilec_free(o);
}

/* The unit, row blocks and decode splits of problem p. */
static Attention plan(const tilec_attention_problem* p) {
  Attention a = {p, 1, 0, 0, 1, p->t > 0 ? p->t : 1, NULL, 0, 0, NULL, 0, 0};
  int bf16 = p->q_dtype == TILEC_ATTENTION_BF16 && p->k_dtype == TILEC_ATTENTION_BF16
             && p->v_dtype == TILEC_ATTENTION_BF16;
  a.tiles = bf16 && tilec_cpu_amx();
  /* vdpbf16ps where there is no AMX: at half the float32 FMA rate on Sapphire Rapids, twice
   * it on Zen 4 */
  a.pairs = bf16 && (a.tiles || tilec_cpu_bf16());
  for (int axis = p->rank - 1; axis >= 0 && p->k_stride[axis] == 0 && p->v_stride[axis] == 0;
       axis--)
    a.share *= p->extents[axis];
  a.unit_rows = a.share * p->s;
  a.row_blocks = (a.unit_rows + BM - 1) / BM;
  int64_t blocks = p->batch / a.share * a.row_blocks, threads = tilec_num_threads();
  if (blocks < 2 * threads && p->t >= 2 * MIN_SPLIT_KEYS) {
    int64_t want = (2 * threads + blocks - 1) / blocks, most = p->t / MIN_SPLIT_KEYS;
    a.splits = want < most ? want : most;
    a.keys_per_split = (p->t / a.splits + BN - 1) / BN * BN;
    a.splits = (p->t + a.keys_per_split - 1) / a.keys_per_split;
  }
  return a;
}

/* The tasks a few units at a time (as many as BATCH_BYTES hold, at least one), their keys
 * and values packed first by all the threads for all the threads. */
static int by_units(Attention* a, int64_t flops) {
  const tilec_attention_problem* p = a->p;
  int64_t units = p->batch / a->share, bytes = unit_bytes(p), batch = BATCH_BYTES / bytes;
  batch = batch < 1 ? 1 : batch > units ? units : batch;
  a->packed = (uint32_t*)tilec_alloc(batch * bytes);
  if (a->packed == NULL)
    return tilec_fail(TILEC_ERR_NO_MEMORY, "attention: out of memory for the packed keys and "
                      "values of %lld key heads (%lld bytes): the output is not written",
                      (long long)batch, (long long)(batch * bytes));
  for (a->unit0 = 0; a->unit0 < units && !a->failed; a->unit0 += batch) {
    int64_t n = units - a->unit0 < batch ? units - a->unit0 : batch;
    tilec_parallel_for(n * key_blocks(p), n * bytes, pack_items, a);
    a->task0 = a->unit0 * a->row_blocks;
    tilec_parallel_for(n * a->row_blocks, flops / units * n, tasks, a);
  }
  tilec_free(a->packed);
  a->packed = NULL;
  return TILEC_OK;
}

int tilec_attention(const tilec_attention_problem* p) {
  if (p->batch == 0 || p->s == 0 || p->dv == 0) return TILEC_OK;
  Attention a = plan(p);
  int64_t blocks = p->batch / a.share * a.row_blocks;
  if (a.splits > 1) {
    a.partial = (float*)tilec_alloc(blocks * a.splits * BM * (p->dv + 2) * (int64_t)sizeof(float));
    if (a.partial == NULL)
      return tilec_fail(TILEC_ERR_NO_MEMORY, "attention: out of memory for its split results");
  }
  int64_t flops = 4 * p->s * (p->t > 0 ? p->t : 1) * (p->d + p->dv);
  if (shares_units(&a)) {
    if (by_units(&a, flops) != TILEC_OK) return TILEC_ERR_NO_MEMORY;
  } else {
    a.count = blocks * a.splits;
    a.chunk = a.row_blocks * a.splits / (4 * tilec_num_threads());
    a.chunk = a.chunk > 1 ? a.chunk : 1;
    if (a.count < 2 || flops < ((int64_t)128 << 10))   /* as tilec_parallel_for decides */
      tasks(&a, 0, a.count);
    else
      tilec_parallel_items((a.count + a.chunk - 1) / a.chunk, task_chunks, &a);
  }
  if (a.splits > 1 && !a.failed) tilec_parallel_for(blocks, flops, combines, &a);
  tilec_free(a.partial);
  if (a.failed)
    return tilec_fail(TILEC_ERR_NO_MEMORY, "attention: out of memory for a thread's scratch "
                      "(%lld bytes): the output is not written",
                      (long long)(scratch_floats(&a) * (int64_t)sizeof(float)));
  return TILEC_OK;
}
