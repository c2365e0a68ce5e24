/* Calls k (ops/swiglu.tile built for --target ascend) on two shapes and checks every element
 * against SwiGLU computed here; prints "ok" and exits 0 when all agree.  Buffers are plain host
 * memory, which is device memory for the fake CANN runtime only. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "k.h"

/* float16 bits of f, which must be zero or a normal float16 (every input here is). */
static uint16_t half_bits(float f) {
  uint32_t b;
  memcpy(&b, &f, sizeof b);
  if ((b & 0x7fffffffu) == 0) return (uint16_t)(b >> 16);
  return (uint16_t)(((b >> 16) & 0x8000u) | ((((b >> 23) & 0xffu) - 112u) << 10) |
                    ((b >> 13) & 0x3ffu));
}

static float half_value(uint16_t h) {
  const int exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
  const float sign = (h & 0x8000) ? -1.0f : 1.0f;
  if (exponent == 0) return sign * ldexpf((float)mantissa, -24);
  if (exponent == 31) return mantissa ? NAN : sign * INFINITY;
  return sign * ldexpf((float)(mantissa | 0x400), exponent - 25);
}

static int check(int64_t batch, int64_t seq, int64_t hidden) {
  const int64_t rows = batch * seq;
  uint16_t* input = malloc(sizeof(uint16_t) * rows * 2 * hidden);
  uint16_t* out = malloc(sizeof(uint16_t) * rows * hidden);
  for (int64_t i = 0; i < rows * 2 * hidden; ++i)
    input[i] = half_bits((float)((i * 7) % 33 - 16) / 8.0f);  /* multiples of 1/8 in [-2, 2] */
  int failed = 0;
  if (swiglu(input, out, batch, seq, hidden, NULL) != TILEC_OK) {
    fprintf(stderr, "swiglu(%lld, %lld, %lld): %s\n", (long long)batch, (long long)seq,
            (long long)hidden, tilec_last_error());
    failed = 1;
  }
  for (int64_t r = 0; r < rows && !failed; ++r) {
    for (int64_t c = 0; c < hidden && !failed; ++c) {
      const float x = half_value(input[r * 2 * hidden + c]);
      const float gate = half_value(input[r * 2 * hidden + hidden + c]);
      const float want = x * gate / (1.0f + expf(-gate));
      const float got = half_value(out[r * hidden + c]);
      if (!(fabsf(got - want) <= 2e-3f + 4e-3f * fabsf(want))) {
        fprintf(stderr, "swiglu[%lld][%lld] = %g, expected %g\n", (long long)r, (long long)c,
                got, want);
        failed = 1;
      }
    }
  }
  free(input);
  free(out);
  return failed;
}

int main(void) {
  if (check(2, 3, 64) || check(1, 5, 40)) return 1;
  puts("ok");
  return 0;
}
