/* The tilec CPU runtime, compiled into every library built with --target cpu.
 *
 * In: calls from the generated host code (tilec/codegen/common/templates/host.c.j2).  Out:
 * the rows of a kernel's grid run on all cores by a persistent pthread pool; the CPU's x86-64
 * level, which picks the kernels' code; the per-thread error message behind
 * tilec_last_error(); checked dimension arithmetic; float16/bfloat16 scalar conversions.
 * Only tilec_last_error(), tilec_record_error(), tilec_num_threads() and tilec_alloc_peak()
 * are exported from the library; everything else here is internal to it.
 */
#ifndef TILEC_CPU_RUNTIME_H
#define TILEC_CPU_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

/* Return codes of every generated entry (also in each generated header). */
#define TILEC_OK 0
#define TILEC_ERR_ARGUMENT 1   /* a negative or inconsistent extent, a bad lead rank */
#define TILEC_ERR_CHECK 2      /* a run-time shape check of the program failed */
#define TILEC_ERR_NO_VARIANT 3 /* no template variant matches and there is no generic kernel */
#define TILEC_ERR_NO_MEMORY 4  /* an intermediate buffer could not be allocated */
#ifndef TILEC_ERR_DEVICE
#define TILEC_ERR_DEVICE 5     /* cpu: this CPU lacks instructions the library's code uses */
#endif

#define TILEC_MAX_LEAD_RANK 32 /* the most dimensions one `...` may stand for */

/* Rows [row_begin, row_end) of one kernel launch; ctx is the launch's argument block. */
typedef void (*tilec_rows_fn)(void* ctx, int64_t row_begin, int64_t row_end);

/* Run fn over rows [0, rows) on the pool: contiguous chunks handed out dynamically, the
 * calling thread taking part.  bytes (the launch's memory traffic) sets the grain: a launch
 * too small to pay for waking threads runs inline on the caller.  Calls from several threads
 * are serialised; a call from inside a running launch runs inline. */
void tilec_parallel_for(int64_t rows, int64_t bytes, tilec_rows_fn fn, void* ctx);

/* The same with every row a chunk of its own: for a launch of a few large items of equal
 * cost (the GEMM's), where chunks of several would leave a thread idle at the end. */
void tilec_parallel_items(int64_t items, tilec_rows_fn fn, void* ctx);
/* fn(ctx, 0, 1) on the caller, every launch it makes inline: for work that the pool's
 * wake-up would cost more than it saves (a matmul of a few MFLOP). */
void tilec_alone(tilec_rows_fn fn, void* ctx);

/* The pool's size counting the caller: TILEC_NUM_THREADS if set (>= 1), else the CPUs this
 * process may run on. */
int tilec_num_threads(void);

/* The most bytes the library's allocations (tilec_alloc: the kernels' scratch, packed
 * operands, buffers between kernels) held at once since the last reset; a nonzero reset
 * then starts the count again from what they hold now. */
int64_t tilec_alloc_peak(int reset);

/* The x86-64 level of this CPU as far as a library's kernels care, found once: 4 with
 * AVX-512 F, BW, CD, DQ and VL (x86-64-v4), else 3 with AVX2, FMA, BMI1 and BMI2
 * (x86-64-v3), else 2.  The environment variable TILEC_CPU lowers it: "x86-64-v3" to at most
 * 3, "x86-64-v2" to 2 (to try a library on a CPU without AVX2). */
int tilec_cpu_level(void);
int tilec_cpu_level_lowered(void); /* whether TILEC_CPU lowered it */
/* Whether the CPU's AMX runs bfloat16 tile products for this process (x86-64-v4 with
 * AMX-TILE and AMX-BF16, the OS granting the tile state); 0 whenever TILEC_CPU is set, so
 * that TILEC_CPU=x86-64-v4 runs the AVX-512 code alone. */
int tilec_cpu_amx(void);
/* Whether the CPU has AVX512-BF16's dot products of bfloat16 pairs (x86-64-v4 with
 * AVX512_BF16): 0 whenever TILEC_CPU is set, except TILEC_CPU=x86-64-v4+bf16, which runs the
 * AVX-512 code with them but without AMX. */
int tilec_cpu_bf16(void);

/* Set this thread's error message (printf-style) and return code. */
int tilec_fail(int code, const char* format, ...) __attribute__((format(printf, 2, 3)));
void tilec_clear_error(void);
void tilec_record_error(const char* message); /* set this thread's message */
const char* tilec_last_error(void);

void* tilec_alloc(int64_t bytes); /* NULL only when out of memory; never for 0 bytes */
void tilec_free(void* p);
void tilec_copy(void* dst, const void* src, int64_t bytes);

/* Scalars: float16 / bfloat16 bits <-> float32, rounding to nearest even. */
uint16_t tilec_f32_to_f16(float x);
float tilec_f16_to_f32(uint16_t h);
uint16_t tilec_f32_to_bf16(float x);
float tilec_bf16_to_f32(uint16_t h);

/* Checked dimension arithmetic: *overflow becomes 1 when a result does not fit int64_t. */
static inline int64_t tilec_add(int64_t a, int64_t b, int* overflow) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) *overflow = 1;
  return r;
}

static inline int64_t tilec_mul(int64_t a, int64_t b, int* overflow) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) *overflow = 1;
  return r;
}

/* *out = numerator / denominator when that is a non-negative integer and nothing overflowed;
 * returns 0 otherwise. */
static inline int tilec_dim(int64_t* out, int64_t numerator, int64_t denominator, int overflow) {
  if (overflow || numerator < 0 || numerator % denominator != 0) return 0;
  *out = numerator / denominator;
  return 1;
}

#endif
