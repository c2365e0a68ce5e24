/* Calls the two kernels of this example through their generated headers and checks every
 * result against the same formula computed here; prints "ok" and exits 0 when all agree. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include "rms_scale.h"
#include "scale_add.h"

enum { N = 1000, ROWS = 7, HIDDEN = 64 };  /* HIDDEN is fixed by DEFINES hidden=64 */

static int close_enough(float got, float want) {
  return fabsf(got - want) <= 1e-5f + 1e-4f * fabsf(want);
}

static int check_scale_add(void) {
  static float x[N], y[N], out[N];
  for (int i = 0; i < N; ++i) {
    x[i] = (float)i / N - 0.5f;
    y[i] = (float)(i % 13) - 6.0f;
  }
  const float a = 3.0f;
  if (scale_add(x, y, out, N, a, NULL) != TILEC_OK) {
    fprintf(stderr, "scale_add: %s\n", tilec_last_error());
    return 1;
  }
  for (int i = 0; i < N; ++i) {
    if (!close_enough(out[i], y[i] + a * x[i])) {
      fprintf(stderr, "scale_add[%d] = %g, expected %g\n", i, out[i], y[i] + a * x[i]);
      return 1;
    }
  }
  return 0;
}

static int check_rms_scale(void) {
  static float x[ROWS][HIDDEN], out[ROWS][HIDDEN];
  const float eps = 1e-6f;
  for (int r = 0; r < ROWS; ++r)
    for (int c = 0; c < HIDDEN; ++c) x[r][c] = (float)((r + 1) * (c - 20)) / 16.0f;
  if (rms_scale(x, out, ROWS, eps, NULL) != TILEC_OK) {
    fprintf(stderr, "rms_scale: %s\n", tilec_last_error());
    return 1;
  }
  for (int r = 0; r < ROWS; ++r) {
    double sum = 0.0;
    for (int c = 0; c < HIDDEN; ++c) sum += (double)x[r][c] * x[r][c];
    const float scale = (float)(1.0 / sqrt(sum / HIDDEN + eps));
    for (int c = 0; c < HIDDEN; ++c) {
      if (!close_enough(out[r][c], x[r][c] * scale)) {
        fprintf(stderr, "rms_scale[%d][%d] = %g, expected %g\n", r, c, out[r][c],
                x[r][c] * scale);
        return 1;
      }
    }
  }
  return 0;
}

int main(void) {
  if (check_scale_add() || check_rms_scale()) return 1;
  puts("ok");
  return 0;
}
