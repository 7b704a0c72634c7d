/* Greedy tokens from a bf16 screen of the LM head: the native path of
 * `agentix_kernels.native.greedy_screen` (the bound and its proof: engine/models/greedy_screen.py).
 *
 * For each row r (one OpenMP task per row) of the bf16 logits `scores` [rows, vocab]:
 *   b_j  = scale * |h_r| * col_norms[j] + rel * |A_j| + tiny   (A_j: the screened logit)
 *   lo   = max_j (A_j - b_j)
 * and every j with A_j + b_j >= lo is a candidate, whose fp32 logit h_r . W_j is computed; the
 * largest wins, the lowest id on ties (as torch.argmax). The first pass also keeps, per run of
 * RUN ids, the largest A_j + b_j, so the second pass visits only the runs that hold a
 * candidate. Values the bound's arithmetic cannot take safely (a non-finite or huge screened
 * logit or row norm) make the call return SCREEN_OUT_OF_RANGE, and the caller computes the
 * full logits instead: the build assumes finite math, so those checks are on the bits.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bf16.h"

#define SCREEN_OK 0
#define SCREEN_OUT_OF_RANGE 1
#define SCREEN_NO_MEMORY 2
#define RUN 64
/* Biased exponents from 127 + 100 up (magnitudes of 2^100 and more, inf, nan) are out of range. */
#define MAX_EXPONENT 227u

static inline int float_in_range(float value) {
  uint32_t word;
  memcpy(&word, &value, sizeof word);
  return ((word >> 23) & 0xffu) < MAX_EXPONENT;
}

/* b_j: how far the screened logit x of an id whose head row has norm `col_norm` may be from
 * its fp32 logit, for a row of norm |h| (row_scale = scale * |h|). */
static inline float error_bound(float x, float row_scale, float col_norm, float rel,
                                float tiny) {
  return row_scale * col_norm + rel * fabsf(x) + tiny;
}

/* One past the last id of run `run`. */
static inline int64_t run_end(int64_t run, int64_t vocab) {
  return run * RUN + RUN < vocab ? run * RUN + RUN : vocab;
}

static inline float dot(const float* a, const float* b, int64_t n) {
  float sum = 0.f;
  for (int64_t i = 0; i < n; i++) sum += a[i] * b[i];
  return sum;
}

static int screen_row(const float* h, const uint16_t* a, const float* weight,
                      int64_t weight_stride, const float* col_norms, int64_t vocab, int64_t dim,
                      float scale, float rel, float tiny, int64_t* token) {
  float norm = sqrtf(dot(h, h, dim));
  if (!float_in_range(norm)) return SCREEN_OUT_OF_RANGE;
  float row_scale = scale * norm;
  int64_t runs = (vocab + RUN - 1) / RUN;
  float* run_high = malloc(sizeof(float) * runs);
  if (run_high == NULL) return SCREEN_NO_MEMORY;
  float lo = -3e38f;
  unsigned bad = 0;
  for (int64_t run = 0; run < runs; run++) {
    int64_t end = run_end(run, vocab);
    float run_lo = -3e38f, high = -3e38f;
    for (int64_t j = run * RUN; j < end; j++) {
      bad |= ((a[j] >> 7) & 0xffu) >= MAX_EXPONENT;
      float x = bf16_to_float(a[j]);
      float b = error_bound(x, row_scale, col_norms[j], rel, tiny);
      run_lo = fmaxf(run_lo, x - b);
      high = fmaxf(high, x + b);
    }
    lo = fmaxf(lo, run_lo);
    run_high[run] = high;
  }
  int64_t best = -1;
  float best_logit = 0.f;
  for (int64_t run = 0; run < runs && !bad; run++) {
    if (run_high[run] < lo) continue;
    int64_t end = run_end(run, vocab);
    for (int64_t j = run * RUN; j < end; j++) {
      float x = bf16_to_float(a[j]);
      if (x + error_bound(x, row_scale, col_norms[j], rel, tiny) < lo) continue;
      float logit = dot(h, weight + j * weight_stride, dim);
      if (best < 0 || logit > best_logit) {
        best = j;
        best_logit = logit;
      }
    }
  }
  free(run_high);
  /* No candidate cannot happen (the id that gives lo is one); were the bound's arithmetic
   * ever to lose it, the caller computes the full logits rather than use no token. */
  if (bad || best < 0) return SCREEN_OUT_OF_RANGE;
  *token = best;
  return SCREEN_OK;
}

/* hidden [rows, dim] and weight rows (stride `weight_stride`) float32, scores [rows, vocab]
 * bf16 bits, col_norms [vocab]; writes tokens [rows]. Returns the worst row status. */
int greedy_screen_bf16(const float* hidden, const uint16_t* scores, const float* weight,
                       int64_t weight_stride, const float* col_norms, int64_t rows,
                       int64_t vocab, int64_t dim, float scale, float rel, float tiny,
                       int threads, int64_t* tokens) {
  int status = SCREEN_OK;
#pragma omp parallel for num_threads(threads) schedule(static) reduction(max : status)
  for (int64_t r = 0; r < rows; r++) {
    int row_status = screen_row(hidden + r * dim, scores + r * vocab, weight, weight_stride,
                                col_norms, vocab, dim, scale, rel, tiny, tokens + r);
    if (row_status > status) status = row_status;
  }
  return status;
}
