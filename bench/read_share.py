"""How fast a plain loop reads memory on this machine, against the copy that ``tilec bench
--ops gemm`` and ``--ops attention`` compare a decode with.

A decode (one row of A against a weight, one query row against the keys and values) only
reads; the copy it is a share of reads and writes, and counts both (STREAM's convention).
This script times, in turns with that copy (``best_each``), C loops that do nothing but read
the same number of bytes: on 1 thread and on every CPU, one stream a thread or 8 side by
side (as the decodes read 8 weight rows), without software prefetch and with prefetches
1 KiB and 4 KiB ahead.  Where the best read loop moves fewer bytes per second than 70% of
the copy's count, no reader can meet a "70% of copy" target in that run.  Run:

    .venv/bin/python bench/read_share.py [--mib 64] [--repeat 7]

The loop is C built with ``CC`` (else ``cc``), as ``tilec/bench/peak.py`` builds its FMA loop.
"""
from __future__ import annotations

import argparse
import ctypes
import os
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from tilec.bench.gemm import best_each, copying, last_level_cache

CODE = r"""
#include <immintrin.h>
#include <pthread.h>

typedef struct { const char* from; long bytes, ahead; int streams; float sum; } Part;

/* Sum a part's bytes as floats, its streams side by side, 128 bytes of each a step. */
__attribute__((target("avx2"))) static void* read_part(void* arg) {
  Part* p = arg;
  long each = p->bytes / p->streams / 128 * 128;
  __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
  for (long i = 0; i < each; i += 128)
    for (int s = 0; s < p->streams; s++) {
      const char* at = p->from + s * each + i;
      if (p->ahead) {
        _mm_prefetch(at + p->ahead, _MM_HINT_T0);
        _mm_prefetch(at + p->ahead + 64, _MM_HINT_T0);
      }
      s0 = _mm256_add_ps(s0, _mm256_loadu_ps((const float*)at));
      s1 = _mm256_add_ps(s1, _mm256_loadu_ps((const float*)(at + 32)));
      s2 = _mm256_add_ps(s2, _mm256_loadu_ps((const float*)(at + 64)));
      s3 = _mm256_add_ps(s3, _mm256_loadu_ps((const float*)(at + 96)));
    }
  float lanes[8];
  _mm256_storeu_ps(lanes, _mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
  p->sum = lanes[0];
  return NULL;
}

/* Read ``bytes`` from ``from`` on ``threads`` threads (at most 64), each its own part. */
float tilec_read(const char* from, long bytes, int threads, long ahead, int streams) {
  pthread_t ids[64];
  Part parts[64];
  if (threads > 64) threads = 64;
  for (int t = 0; t < threads; t++) {
    parts[t] = (Part){from + t * (bytes / threads), bytes / threads, ahead, streams, 0.0f};
    pthread_create(&ids[t], NULL, read_part, &parts[t]);
  }
  float sum = 0.0f;
  for (int t = 0; t < threads; t++) {
    pthread_join(ids[t], NULL);
    sum += parts[t].sum;
  }
  return sum;
}
"""


def build(tmp: Path) -> ctypes.CDLL:
    source, library = tmp / "read.c", tmp / "read.so"
    source.write_text(CODE)
    subprocess.run([os.environ.get("CC", "cc"), "-O2", "-shared", "-fPIC", "-pthread",
                    str(source), "-o", str(library)], check=True)
    lib = ctypes.CDLL(str(library))
    lib.tilec_read.restype = ctypes.c_float
    lib.tilec_read.argtypes = (ctypes.c_void_p, ctypes.c_long, ctypes.c_int, ctypes.c_long,
                               ctypes.c_int)
    return lib


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=0,
                        help="bytes read and copied (default: twice the last-level cache, "
                             "at least 64 MiB)")
    parser.add_argument("--repeat", type=int, default=7, help="rounds (default 7)")
    args = parser.parse_args()
    nbytes = (args.mib << 20) or max(64 << 20, 2 * last_level_cache())
    cpus = len(os.sched_getaffinity(0))
    data = np.ones(nbytes // 4, np.float32)
    loops = [(threads, streams, ahead) for threads in sorted({1, cpus})
             for streams in (1, 8) for ahead in (0, 1024, 4096)]
    with tempfile.TemporaryDirectory(prefix="tilec-read-") as tmp:
        lib = build(Path(tmp))
        runs = [lambda t=t, s=s, a=a: lib.tilec_read(data.ctypes.data, nbytes, t, a, s)
                for t, s, a in loops]
        with copying(nbytes, cpus) as (copy, moved):
            times = best_each(runs + [copy], args.repeat)
    copy_gbps = moved / times[-1] / 1e9
    print(f"{nbytes >> 20} MiB; the copy on {cpus} threads: {copy_gbps:.1f} GB/s read and "
          f"written ({copy_gbps / 2:.1f} of them read); best of {args.repeat} rounds in turns\n")
    print("| threads | streams a thread | prefetch ahead | read GB/s | % of the copy's count |")
    print("| ---: | ---: | ---: | ---: | ---: |")
    for (threads, streams, ahead), seconds in zip(loops, times):
        gbps = nbytes / seconds / 1e9
        print(f"| {threads} | {streams} | {ahead or '-'} | {gbps:.1f} | "
              f"{100 * gbps / copy_gbps:.0f}% |")


if __name__ == "__main__":
    main()
