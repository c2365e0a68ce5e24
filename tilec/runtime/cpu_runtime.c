/* The tilec CPU runtime (see cpu_runtime.h): a persistent pthread pool over a kernel's grid
 * rows, the CPU's x86-64 level, the thread-local error message, allocation and scalar
 * conversions.
 *
 * The pool starts on the first launch big enough to share: one thread per CPU less the
 * caller, which works too.  A launch cuts its rows into contiguous chunks (at most
 * CHUNKS_PER_THREAD per thread, each at least CHUNK_BYTES of traffic) that threads take in
 * order from an atomic counter, so a slow core delays the launch by one chunk, not by a
 * fixed share; tilec_parallel_items makes each row a chunk.  A fork()ed child starts a fresh pool; unloading the library joins the
 * threads.
 */
#define _GNU_SOURCE
#include "cpu_runtime.h"

#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <malloc.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <cpuid.h>
#include <sys/syscall.h>
#endif

enum { CHUNKS_PER_THREAD = 4 };
#define INLINE_BYTES ((int64_t)256 << 10) /* a smaller launch runs on the caller alone */
#define CHUNK_BYTES ((int64_t)64 << 10)   /* the least traffic worth a chunk of its own */
#define WORKER_STACK_BYTES ((size_t)8 << 20)

typedef struct {
  tilec_rows_fn fn;
  void* ctx;
  int64_t rows;
  int64_t chunks;
} Launch;

typedef struct {
  pthread_mutex_t lock; /* guards every field but next */
  pthread_cond_t wake;  /* a new launch, or stopping */
  pthread_cond_t done;  /* the last worker left the launch */
  pthread_t* workers;
  int nworkers;
  int started;
  int stopping;
  uint64_t generation; /* counts launches, so a worker sees each one once */
  int busy;            /* workers not yet out of the current launch */
  Launch launch;
  int64_t next; /* the next chunk to take, atomically */
} Pool;

static Pool pool = {.lock = PTHREAD_MUTEX_INITIALIZER,
                    .wake = PTHREAD_COND_INITIALIZER,
                    .done = PTHREAD_COND_INITIALIZER};
static pthread_mutex_t launch_lock = PTHREAD_MUTEX_INITIALIZER; /* one launch at a time */
static pthread_once_t threads_once = PTHREAD_ONCE_INIT;
static int threads_wanted = 1;
static __thread int inside_launch;
static __thread char error_message[1024];

static void count_threads(void) {
  const char* env = getenv("TILEC_NUM_THREADS");
  if (env != NULL && *env != '\0') {
    char* end;
    long n = strtol(env, &end, 10);
    if (*end == '\0' && n >= 1) {
      threads_wanted = n > 1024 ? 1024 : (int)n;
      return;
    }
  }
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) {
    threads_wanted = CPU_COUNT(&set);
    return;
  }
  long online = sysconf(_SC_NPROCESSORS_ONLN);
  threads_wanted = online >= 1 ? (int)online : 1;
}

int tilec_num_threads(void) {
  pthread_once(&threads_once, count_threads);
  return threads_wanted;
}

static pthread_once_t level_once = PTHREAD_ONCE_INIT;
static int cpu_level = 2;
static int cpu_level_lowered; /* by TILEC_CPU */

static void find_cpu_level(void) {
  __builtin_cpu_init();
  /* the compilers' checks include the OS saving the AVX and AVX-512 registers (XCR0); every
   * CPU with AVX2 and FMA has F16C */
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
      __builtin_cpu_supports("bmi") && __builtin_cpu_supports("bmi2"))
    cpu_level = 3;
  if (cpu_level == 3 && __builtin_cpu_supports("avx512f") &&
      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512cd") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
    cpu_level = 4;
  const char* env = getenv("TILEC_CPU");
  int cap = 4; /* any other value: ignored */
  if (env != NULL && strcmp(env, "x86-64-v3") == 0) cap = 3;
  if (env != NULL && strcmp(env, "x86-64-v2") == 0) cap = 2;
  if (cpu_level > cap) {
    cpu_level = cap;
    cpu_level_lowered = 1;
  }
}

int tilec_cpu_level(void) {
  pthread_once(&level_once, find_cpu_level);
  return cpu_level;
}

int tilec_cpu_level_lowered(void) {
  pthread_once(&level_once, find_cpu_level);
  return cpu_level_lowered;
}

static pthread_once_t amx_once = PTHREAD_ONCE_INIT;
static int cpu_amx;

/* AMX's tile data is a state Linux gives a process only when it asks for it once
 * (arch_prctl ARCH_REQ_XCOMP_PERM); any TILEC_CPU turns it off. */
static void find_amx(void) {
#if defined(__x86_64__)
  unsigned a, b, c, d;
  if (tilec_cpu_level() < 4 || getenv("TILEC_CPU") != NULL) return;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return;
  if (!(d & (1u << 22)) || !(d & (1u << 24))) return; /* AMX-BF16, AMX-TILE */
  unsigned low, high;
  __asm__("xgetbv" : "=a"(low), "=d"(high) : "c"(0));
  if ((low & (3u << 17)) != (3u << 17)) return; /* the OS saves TILECFG and TILEDATA */
  cpu_amx = syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XTILEDATA */) == 0;
#endif
}

int tilec_cpu_amx(void) {
  pthread_once(&amx_once, find_amx);
  return cpu_amx;
}

static pthread_once_t bf16_once = PTHREAD_ONCE_INIT;
static int cpu_bf16;

static void find_bf16(void) {
#if defined(__x86_64__)
  unsigned a, b, c, d;
  const char* env = getenv("TILEC_CPU");
  if (tilec_cpu_level() < 4 || (env != NULL && strcmp(env, "x86-64-v4+bf16") != 0)) return;
  if (!__get_cpuid_count(7, 1, &a, &b, &c, &d)) return;
  cpu_bf16 = (a >> 5) & 1; /* AVX512_BF16 */
#endif
}

int tilec_cpu_bf16(void) {
  pthread_once(&bf16_once, find_bf16);
  return cpu_bf16;
}

static void run_chunks(const Launch* launch) {
  int64_t c;
  while ((c = __atomic_fetch_add(&pool.next, 1, __ATOMIC_RELAXED)) < launch->chunks) {
    int64_t begin = launch->rows * c / launch->chunks;
    int64_t end = launch->rows * (c + 1) / launch->chunks;
    launch->fn(launch->ctx, begin, end);
  }
}

static void* worker(void* first_generation) {
  uint64_t seen = (uint64_t)(uintptr_t)first_generation;
  inside_launch = 1;
  pthread_mutex_lock(&pool.lock);
  for (;;) {
    while (!pool.stopping && pool.generation == seen) pthread_cond_wait(&pool.wake, &pool.lock);
    if (pool.stopping) break;
    seen = pool.generation;
    Launch launch = pool.launch;
    pthread_mutex_unlock(&pool.lock);
    run_chunks(&launch);
    pthread_mutex_lock(&pool.lock);
    if (--pool.busy == 0) pthread_cond_signal(&pool.done);
  }
  pthread_mutex_unlock(&pool.lock);
  return NULL;
}

/* In a fork()ed child only the forking thread exists: forget the parent's pool. */
static void forget_pool_in_child(void) {
  pthread_mutex_init(&pool.lock, NULL);
  pthread_cond_init(&pool.wake, NULL);
  pthread_cond_init(&pool.done, NULL);
  pthread_mutex_init(&launch_lock, NULL);
  free(pool.workers);
  pool.workers = NULL;
  pool.nworkers = 0;
  pool.started = 0;
  pool.busy = 0;
  inside_launch = 0;
}

/* Called with launch_lock held. */
static void start_pool(void) {
  static int fork_handler_registered;
  if (!fork_handler_registered) {
    pthread_atfork(NULL, NULL, forget_pool_in_child);
    fork_handler_registered = 1;
  }
  pool.started = 1;
  int wanted = tilec_num_threads() - 1;
  pool.workers = calloc((size_t)(wanted > 0 ? wanted : 1), sizeof(pthread_t));
  if (pool.workers == NULL) return;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, WORKER_STACK_BYTES);
  void* generation = (void*)(uintptr_t)pool.generation;
  while (pool.nworkers < wanted &&
         pthread_create(&pool.workers[pool.nworkers], &attr, worker, generation) == 0)
    pool.nworkers++;
  pthread_attr_destroy(&attr);
}

__attribute__((destructor)) static void stop_pool(void) {
  if (!pool.started || pool.nworkers == 0) return;
  pthread_mutex_lock(&pool.lock);
  pool.stopping = 1;
  pthread_cond_broadcast(&pool.wake);
  pthread_mutex_unlock(&pool.lock);
  for (int i = 0; i < pool.nworkers; i++) pthread_join(pool.workers[i], NULL);
  free(pool.workers);
  pool.workers = NULL;
  pool.nworkers = 0;
}

static int64_t chunk_count(int64_t rows, int64_t bytes) {
  int threads = tilec_num_threads();
  if (threads == 1 || rows == 1 || bytes < INLINE_BYTES) return 1;
  int64_t chunks = (int64_t)threads * CHUNKS_PER_THREAD;
  if (chunks > bytes / CHUNK_BYTES) chunks = bytes / CHUNK_BYTES;
  return chunks < rows ? chunks : rows;
}

/* rows in `chunks` contiguous chunks, taken by the threads in order */
static void launch(int64_t rows, int64_t chunks, tilec_rows_fn fn, void* ctx) {
  if (rows <= 0) return;
  if (chunks <= 1 || inside_launch) {
    fn(ctx, 0, rows);
    return;
  }
  pthread_mutex_lock(&launch_lock);
  if (!pool.started) start_pool();
  Launch work = {fn, ctx, rows, chunks};
  pthread_mutex_lock(&pool.lock);
  pool.launch = work;
  __atomic_store_n(&pool.next, 0, __ATOMIC_RELAXED);
  pool.busy = pool.nworkers;
  pool.generation++;
  pthread_cond_broadcast(&pool.wake);
  pthread_mutex_unlock(&pool.lock);
  inside_launch = 1;
  run_chunks(&work);
  inside_launch = 0;
  pthread_mutex_lock(&pool.lock);
  while (pool.busy > 0) pthread_cond_wait(&pool.done, &pool.lock);
  pthread_mutex_unlock(&pool.lock);
  pthread_mutex_unlock(&launch_lock);
}

void tilec_parallel_for(int64_t rows, int64_t bytes, tilec_rows_fn fn, void* ctx) {
  launch(rows, rows > 0 ? chunk_count(rows, bytes) : 0, fn, ctx);
}

void tilec_parallel_items(int64_t items, tilec_rows_fn fn, void* ctx) {
  launch(items, tilec_num_threads() > 1 ? items : 1, fn, ctx);
}

void tilec_alone(tilec_rows_fn fn, void* ctx) {
  int outer = inside_launch;
  inside_launch = 1;
  fn(ctx, 0, 1);
  inside_launch = outer;
}

/* tilec_record_error and tilec_last_error are exported, and the library calls them through
 * the PLT (the runtime compiles with -fsemantic-interposition): in a program linking several
 * tilec libraries the dynamic linker binds every library's calls to the first definition, so
 * they share one message per thread and tilec_last_error() names the call that failed last,
 * whichever library made it. */
void tilec_record_error(const char* message) {
  snprintf(error_message, sizeof error_message, "%s", message);
}

const char* tilec_last_error(void) { return error_message; }

int tilec_fail(int code, const char* format, ...) {
  char message[sizeof error_message];
  va_list args;
  va_start(args, format);
  vsnprintf(message, sizeof message, format, args);
  va_end(args);
  tilec_record_error(message);
  return code;
}

void tilec_clear_error(void) { tilec_record_error(""); }

/* Scratch of at least this many bytes is asked for on huge pages (Linux's transparent huge
 * pages, where it grants them on request), as NumPy does for its big arrays: the GEMM's
 * packed operands and accumulators walk megabytes in strides of a page or more. */
#define HUGE_PAGE_BYTES ((size_t)2 << 20)

/* Bytes tilec_alloc's blocks hold now, and the most they held since the last reset. */
static int64_t allocated_now, allocated_peak;

void* tilec_alloc(int64_t bytes) {
  void* p = NULL;
  size_t size = (size_t)(bytes > 0 ? bytes : 1);
  size_t align = size >= HUGE_PAGE_BYTES ? HUGE_PAGE_BYTES : 64;
  if (posix_memalign(&p, align, size) != 0) return NULL;
#if defined(MADV_HUGEPAGE)
  if (align == HUGE_PAGE_BYTES) madvise(p, size, MADV_HUGEPAGE);
#endif
  int64_t now = __atomic_add_fetch(&allocated_now, (int64_t)malloc_usable_size(p),
                                   __ATOMIC_RELAXED);
  int64_t peak = __atomic_load_n(&allocated_peak, __ATOMIC_RELAXED);
  while (now > peak && !__atomic_compare_exchange_n(&allocated_peak, &peak, now, 1,
                                                     __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
  }
  return p;
}

void tilec_free(void* p) {
  if (p != NULL)
    __atomic_sub_fetch(&allocated_now, (int64_t)malloc_usable_size(p), __ATOMIC_RELAXED);
  free(p);
}

int64_t tilec_alloc_peak(int reset) {
  int64_t peak = __atomic_load_n(&allocated_peak, __ATOMIC_RELAXED);
  if (reset) __atomic_store_n(&allocated_peak, __atomic_load_n(&allocated_now, __ATOMIC_RELAXED),
                              __ATOMIC_RELAXED);
  return peak;
}

void tilec_copy(void* dst, const void* src, int64_t bytes) {
  if (bytes > 0) memcpy(dst, src, (size_t)bytes);
}

static uint32_t bits_of(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  return u;
}

static float float_of(uint32_t u) {
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
}

uint16_t tilec_f32_to_f16(float x) {
  uint32_t u = bits_of(x);
  uint32_t sign = (u >> 16) & 0x8000u;
  u &= 0x7fffffffu;
  if (u >= 0x47800000u) /* >= 2^16 (rounds to infinity), infinity, NaN */
    return (uint16_t)(sign | (u > 0x7f800000u ? 0x7e00u : 0x7c00u));
  if (u < 0x38800000u) { /* below 2^-14: subnormal; adding 0.5 rounds at 2^-24 */
    float magic = float_of(0x3f000000u);
    return (uint16_t)(sign | (bits_of(float_of(u) + magic) - 0x3f000000u));
  }
  uint32_t odd = (u >> 13) & 1u;
  u += 0xc8000fffu + odd; /* rebias the exponent (-112 << 23) and round to nearest even */
  return (uint16_t)(sign | (u >> 13));
}

float tilec_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0x1f) return float_of(sign | 0x7f800000u | (mantissa << 13));
  if (exponent == 0) {
    float magnitude = (float)mantissa * 0x1p-24f;
    return float_of(sign | bits_of(magnitude));
  }
  return float_of(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

uint16_t tilec_f32_to_bf16(float x) {
  uint32_t u = bits_of(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u); /* quiet NaN */
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

float tilec_bf16_to_f32(uint16_t h) { return float_of((uint32_t)h << 16); }
