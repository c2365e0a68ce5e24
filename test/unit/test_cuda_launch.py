"""The CUDA launcher (tilec/runtime/tilec_cuda.c) against a stand-in driver: a small
``libcuda.so.1`` built here whose functions succeed and count launches, so that the
launcher's own arithmetic runs without a GPU.  A launch over no rows (a dimension of 0) is
no launch at all and succeeds; it used to divide by zero."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

RUNTIME = Path(__file__).resolve().parents[2] / "tilec" / "runtime"

DRIVER = r"""
#include <stddef.h>
typedef int CUresult;
int launches = 0;
CUresult cuInit(unsigned f) { return 0; }
CUresult cuGetErrorString(CUresult r, const char** s) { *s = "stand-in"; return 0; }
CUresult cuDeviceGet(int* d, int o) { *d = 0; return 0; }
CUresult cuDeviceGetAttribute(int* v, int a, int d) { *v = a == 16 ? 132 : 232448; return 0; }
CUresult cuDevicePrimaryCtxRetain(void** c, int d) { *c = (void*)&launches; return 0; }
CUresult cuCtxGetCurrent(void** c) { *c = (void*)&launches; return 0; }
CUresult cuCtxSetCurrent(void* c) { return 0; }
CUresult cuCtxGetDevice(int* d) { *d = 0; return 0; }
CUresult cuModuleLoadData(void** m, const void* image) { *m = (void*)&launches; return 0; }
CUresult cuModuleGetFunction(void** f, void* m, const char* n) { *f = (void*)n; return 0; }
CUresult cuFuncGetAttribute(int* v, int a, void* f) { *v = 0; return 0; }
CUresult cuFuncSetAttribute(void* f, int a, int v) { return 0; }
CUresult cuLaunchKernel(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                        unsigned by, unsigned bz, unsigned shared, void* stream, void** params,
                        void** extra) { launches++; return gx == 0 ? 1 : 0; }
CUresult cuMemAlloc_v2(unsigned long long* p, size_t n) { return 0; }
CUresult cuMemFree_v2(unsigned long long p) { return 0; }
CUresult cuMemAllocAsync(unsigned long long* p, size_t n, void* s) { return 0; }
CUresult cuMemFreeAsync(unsigned long long p, void* s) { return 0; }
CUresult cuMemcpyHtoD_v2(unsigned long long d, const void* s, size_t n) { return 0; }
CUresult cuMemcpyDtoH_v2(void* d, unsigned long long s, size_t n) { return 0; }
CUresult cuMemcpyHtoDAsync_v2(unsigned long long d, const void* s, size_t n, void* t) {
  return 0;
}
CUresult cuMemcpyDtoDAsync_v2(unsigned long long d, unsigned long long s, size_t n, void* t) {
  return 0;
}
CUresult cuStreamSynchronize(void* s) { return 0; }
int stand_in_launches(void) { return launches; }
"""

HARNESS = r"""
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include "tilec_cuda.h"
#include "cpu_runtime.h"

int main(int argc, char** argv) {
  static const unsigned char cubin[16];
  static const char* names[] = {"k"};
  tilec_cuda_code code = {cubin, sizeof cubin, "", names, 1};
  void* buffers[1] = {NULL};
  int64_t values[4] = {0, 0, 0, 0};
  int64_t rows = atoll(argv[1]);
  int status = tilec_cuda_launch(&code, 0, buffers, 1, values, 4, rows, 1024, 0, NULL);
  int (*launches)(void) = (int (*)(void))dlsym(dlopen("libcuda.so.1", RTLD_NOW),
                                               "stand_in_launches");
  printf("status %d launches %d per_block %lld %s\n", status, launches(),
         (long long)values[3], status ? tilec_last_error() : "");
  return 0;
}
"""


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cc = shutil.which(os.environ.get("CC", "cc"))
    if cc is None:
        pytest.fail("no C compiler (cc) to build the stand-in driver")
    out = tmp_path_factory.mktemp("cuda_launch")
    (out / "driver.c").write_text(DRIVER)
    (out / "harness.c").write_text(HARNESS)
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(out / "libcuda.so.1"),
                    str(out / "driver.c")], check=True)
    subprocess.run([cc, "-O1", "-I", str(RUNTIME), "-o", str(out / "harness"),
                    str(out / "harness.c"), str(RUNTIME / "tilec_cuda.c"),
                    str(RUNTIME / "cpu_runtime.c"), "-ldl", "-lpthread", "-lm"], check=True)
    return out


def launch(harness: Path, rows: int) -> subprocess.CompletedProcess:
    return subprocess.run([str(harness / "harness"), str(rows)], capture_output=True,
                          text=True, timeout=60,
                          env={**os.environ, "LD_LIBRARY_PATH": str(harness)})


def test_a_launch_over_rows_reaches_the_driver(harness: Path) -> None:
    done = launch(harness, 1000)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[:6] == ["status", "0", "launches", "1", "per_block", "1"]


def test_a_launch_over_no_rows_launches_nothing(harness: Path) -> None:
    done = launch(harness, 0)
    assert done.returncode == 0, f"the launcher crashed (signal {-done.returncode})"
    assert done.stdout.split()[:4] == ["status", "0", "launches", "0"], done.stdout
