// Runs every test kernel (correct and broken) once, for the build under
// -fsanitize=address,undefined: the twin itself must be clean on its success and error paths.
// Exit status 0 when every result and return code is as expected.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "twin_state.h"
#include "twin_types.h"

extern "C" {
int run_silu(const void* x, void* y, int64_t n, int32_t blocks, int32_t tile);
int run_row_reduce(const float* x, float* sum, float* max, int32_t rows, int32_t cols,
                   int32_t blocks);
int run_ops(int half_precision, const void* a, const void* b, void* out, uint8_t* mask);
int run_casts(const float* x, uint16_t* h, int32_t* i, uint16_t* b, float* f, int32_t* hi);
int run_reduce_half(const uint16_t* x, uint16_t* out, int32_t n);
int run_bad(const char* name, int32_t blocks);
int bad_count(void);
const char* bad_name(int i);
}

static int failures = 0;

static void expect(bool ok, const char* what) {
  if (ok) return;
  std::printf("FAILED: %s (%s)\n", what, tilec_twin_last_error());
  ++failures;
}

int main() {
  tilec_twin_set_strict(1);
  {
    const int64_t n = 1000;
    std::vector<uint16_t> x(n), y(n);
    for (int64_t k = 0; k < n; ++k) x[k] = tilec_twin::f32_to_f16(float(k % 17) - 8.0f);
    expect(run_silu(x.data(), y.data(), n, 3, 256) == 0, "silu");
    const float got = tilec_twin::f16_to_f32(y[9]), want = 1.0f / (1.0f + std::exp(-1.0f));
    expect(std::fabs(got - want) < 1e-3f, "silu value");
  }
  {
    const int rows = 5, cols = 100;
    std::vector<float> x(rows * cols, 1.0f), sum(rows), max(rows);
    x[3 * cols + 7] = 9.0f;
    expect(run_row_reduce(x.data(), sum.data(), max.data(), rows, cols, 2) == 0, "row_reduce");
    expect(sum[0] == float(cols) && max[3] == 9.0f && max[4] == 1.0f, "row_reduce values");
  }
  for (int half_precision = 0; half_precision < 2; ++half_precision) {
    std::vector<uint8_t> a(256 * 4), b(256 * 4), out(20 * 256 * 4), mask(32);
    for (int k = 0; k < 256; ++k) {
      const float va = 0.5f + float(k % 13), vb = 3.0f;
      if (half_precision) {
        const uint16_t ha = tilec_twin::f32_to_f16(va), hb = tilec_twin::f32_to_f16(vb);
        std::memcpy(&a[k * 2], &ha, 2);
        std::memcpy(&b[k * 2], &hb, 2);
      } else {
        std::memcpy(&a[k * 4], &va, 4);
        std::memcpy(&b[k * 4], &vb, 4);
      }
    }
    expect(run_ops(half_precision, a.data(), b.data(), out.data(), mask.data()) == 0, "ops");
    expect(mask[0] == 0x07, "Compare mask of 0.5, 1.5, 2.5, 3.5, ... < 3");
  }
  {
    std::vector<float> x(256), f(6 * 256);
    std::vector<uint16_t> h(6 * 256), b(5 * 256);
    std::vector<int32_t> i(5 * 256), hi(256);
    for (int k = 0; k < 256; ++k) x[k] = float(k) * 0.37f - 40.0f;
    expect(run_casts(x.data(), h.data(), i.data(), b.data(), f.data(), hi.data()) == 0, "casts");
  }
  {
    std::vector<uint16_t> x(300), out(5);
    for (int k = 0; k < 300; ++k) x[k] = tilec_twin::f32_to_f16(float(k % 7));
    expect(run_reduce_half(x.data(), out.data(), 300) == 0, "reduce_half");
    expect(tilec_twin::f16_to_f32(out[1]) == 6.0f && out[2] == 6, "reduce_half max and index");
  }
  for (int k = 0; k < bad_count(); ++k) {
    const char* name = bad_name(k);
    const bool correct = !std::strcmp(name, "vv_no_barrier") ||
                         !std::strcmp(name, "vv_with_barrier") ||
                         !std::strcmp(name, "reset_and_reuse");
    const int blocks = std::strcmp(name, "cross_core_race") ? 1 : 2;
    expect(run_bad(name, blocks) == (correct ? 0 : 1), name);
  }
  std::printf("%d failure(s)\n", failures);
  return failures ? 1 : 0;
}
