"""The machine's float32 FMA peak, measured: on each of ``threads`` threads, a loop of 12
independent chains of FMAs on ``lanes``-wide vectors (16: AVX-512, 8: AVX2, as the code
tilec runs), timed over all the threads together, the best of three runs.  Nominal formulas
(cores x FMA units x lanes x 2 x clock) go wrong both ways: AMD's Zen 4 runs a 512-bit FMA
on its two 256-bit units (half the formula's count), turbo clocks pass the nominal one, and
a virtual CPU shares its core with whatever its neighbours run.

The loop is C compiled with the C compiler tilec's CPU backend uses (``CC``, else ``cc``);
where it cannot be built, :func:`fma_peak` returns None."""
from __future__ import annotations

import ctypes
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Optional

CODE = r"""
#include <immintrin.h>
#include <pthread.h>
#include <time.h>

#if LANES == 16
#define TARGET "avx512f"
typedef __m512 vec;
#define SET1 _mm512_set1_ps
#define FMA _mm512_fmadd_ps
#else
#define TARGET "avx2,fma"
typedef __m256 vec;
#define SET1 _mm256_set1_ps
#define FMA _mm256_fmadd_ps
#endif
#define CHAINS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)

static long steps;

__attribute__((target(TARGET))) static void* chains(void* out) {
#define START(i) vec a##i = SET1((float)i);
  CHAINS(START)
  vec x = SET1(1e-7f), y = SET1(1.0f);
  for (long k = 0; k < steps; k++) {
#define STEP(i) a##i = FMA(x, y, a##i);
    CHAINS(STEP)
    __asm__ volatile("" : "+x"(x)); /* x unknown each step: the loop is not folded */
  }
  float sum = 0.0f, lanes[LANES];
#define ADD(i) *(vec*)lanes = a##i; for (int j = 0; j < LANES; j++) sum += lanes[j];
  CHAINS(ADD)
  *(float*)out = sum;
  return NULL;
}

/* FLOP/s of ``threads`` threads running ``n`` steps each. */
double tilec_fma_rate(int threads, long n) {
  pthread_t ids[256];
  float sums[256];
  struct timespec t0, t1;
  steps = n;
  if (threads > 256) threads = 256;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  int started = 0;
  for (; started < threads; started++)
    if (pthread_create(&ids[started], NULL, chains, &sums[started]) != 0) break;
  for (int i = 0; i < started; i++) pthread_join(ids[i], NULL);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double seconds = (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9;
  return started * (double)n * 12 * LANES * 2 / seconds;
}
"""


def fma_peak(lanes: int, threads: int) -> Optional[float]:
    """GFLOP/s of ``threads`` cores' float32 FMAs on ``lanes``-wide vectors (see above)."""
    with tempfile.TemporaryDirectory(prefix="tilec-peak-") as tmp:
        source, library = Path(tmp) / "peak.c", Path(tmp) / "peak.so"
        source.write_text(CODE)
        try:
            subprocess.run([os.environ.get("CC", "cc"), "-O2", "-shared", "-fPIC", "-pthread",
                            f"-DLANES={lanes}", "-o", str(library), str(source)],
                           check=True, capture_output=True, timeout=120)
            rate = ctypes.CDLL(str(library)).tilec_fma_rate
        except (OSError, subprocess.SubprocessError):
            return None
        rate.restype = ctypes.c_double
        rate.argtypes = (ctypes.c_int, ctypes.c_long)
        rate(threads, 10**6)                       # clocks up, pages in
        return max(rate(threads, 2 * 10**7) for _ in range(3)) / 1e9
