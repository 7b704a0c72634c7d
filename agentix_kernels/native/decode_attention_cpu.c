/* Paged decode attention on the CPU over a float32 or bfloat16 cache, computed in float32: the
 * native path of `agentix_kernels.paged_decode_attention` (contract in
 * agentix_kernels/decode_attention.py).
 *
 * One OpenMP task per batch row walks the row's blocks in order and, inside a block, its
 * slots in order with every query head at each slot, so the K and V it reads are contiguous
 * runs (a slot's kv heads lie side by side). Softmax is online (flash-style): a running max
 * and sum per query head, the accumulator rescaled when a block raises the max. Only the
 * context's slots are read (and, with a window, only the window's). While it works on a slot
 * of one block it asks for the same slot of the row's next block (`prefetch_slot`). Plain C,
 * left to the compiler to vectorize; built by agentix_kernels/native/build.py.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bf16.h"

/* Below every finite score; not -INFINITY, so the build may assume finite math. */
#define NO_SCORE_YET (-1e30f)

/* The position of a row's first key read: the window's first, with a window. */
static inline int64_t first_key(int64_t len, int64_t window) {
  return window > 0 && len > window ? len - window : 0;
}

/* The cache's element `at` as a float: the cache holds float32, or (bf16 != 0) bfloat16.
 * `bf16` is a constant wherever `attend_row` is inlined, so each cache dtype gets its own
 * loops. */
static inline __attribute__((always_inline)) float kv_at(const void* cache, int64_t at,
                                                         int bf16) {
  return bf16 ? bf16_to_float(((const uint16_t*)cache)[at]) : ((const float*)cache)[at];
}

/* Ask the CPU to bring `elements` elements of the cache from element `at` towards its L2
 * cache; a hint only (nothing is read, no address can fault). A cache block holds every
 * layer's K and V (kvcache/kv_tensor.py), so one layer's K or V of a block is a short run far
 * from the previous block's, which the hardware prefetcher cannot see coming; asked one block
 * ahead, the next block's slots arrive while this block's are computed on. */
static inline void prefetch_slot(const void* cache, int64_t at, int64_t elements, int bf16) {
  int64_t size = bf16 ? 2 : 4;
  const char* bytes = (const char*)cache + at * size;
  for (int64_t b = 0; b < elements * size; b += 64) /* a cache line */
    __builtin_prefetch(bytes + b, 0, 1);
}

/* Per-thread scratch: acc [heads][dim], scores [heads][block_size], max and sum [heads]. */
typedef struct {
  float* acc;
  float* scores;
  float* max;
  float* sum;
} scratch_t;

/* One row: `q` [heads][dim] over its cached context, into `out` [heads][dim]. Block, slot and
 * head offsets are in cache elements (float32, or bfloat16 when `bf16`). */
static inline __attribute__((always_inline)) void attend_row(
    const float* q, const void* k_cache, const void* v_cache, int64_t block_stride,
    int64_t slot_stride, int64_t head_stride, const int32_t* table, int64_t len,
    int64_t heads, int64_t group, const int64_t dim, int64_t block_size, float scale,
    int64_t window, int bf16, float* out, scratch_t s) {
  if (len <= 0) {
    memset(out, 0, sizeof(float) * heads * dim);
    return;
  }
  for (int64_t h = 0; h < heads; h++) {
    s.max[h] = NO_SCORE_YET;
    s.sum[h] = 0.f;
  }
  memset(s.acc, 0, sizeof(float) * heads * dim);
  int64_t first = first_key(len, window);
  int64_t slot_elements = (heads / group - 1) * head_stride + dim; /* a slot's kv heads */
  for (int64_t j = first / block_size; j * block_size < len; j++) {
    int64_t block = (int64_t)table[j] * block_stride;
    int64_t start = j * block_size;
    int64_t lo = first > start ? first - start : 0;
    int64_t hi = len - start < block_size ? len - start : block_size;
    int has_next = start + block_size < len;
    int64_t next_block = has_next ? (int64_t)table[j + 1] * block_stride : 0;
    for (int64_t t = lo; t < hi; t++) {
      if (has_next)
        prefetch_slot(k_cache, next_block + t * slot_stride, slot_elements, bf16);
      for (int64_t h = 0; h < heads; h++) {
        const float* qh = q + h * dim;
        int64_t key = block + t * slot_stride + (h / group) * head_stride;
        float dot = 0.f;
#pragma omp simd reduction(+ : dot)
        for (int64_t d = 0; d < dim; d++) dot += qh[d] * kv_at(k_cache, key + d, bf16);
        s.scores[h * block_size + t] = dot * scale;
      }
    }
    for (int64_t h = 0; h < heads; h++) {
      float* sc = s.scores + h * block_size;
      float peak = s.max[h];
      for (int64_t t = lo; t < hi; t++) peak = sc[t] > peak ? sc[t] : peak;
      float kept = expf(s.max[h] - peak);
      float total = 0.f;
#pragma omp simd reduction(+ : total)
      for (int64_t t = lo; t < hi; t++) {
        float p = expf(sc[t] - peak);
        sc[t] = p;
        total += p;
      }
      s.max[h] = peak;
      s.sum[h] = s.sum[h] * kept + total;
      if (kept != 1.f)
        for (int64_t d = 0; d < dim; d++) s.acc[h * dim + d] *= kept;
    }
    for (int64_t t = lo; t < hi; t++) {
      if (has_next)
        prefetch_slot(v_cache, next_block + t * slot_stride, slot_elements, bf16);
      for (int64_t h = 0; h < heads; h++) {
        int64_t value = block + t * slot_stride + (h / group) * head_stride;
        float* acc = s.acc + h * dim;
        float p = s.scores[h * block_size + t];
#pragma omp simd
        for (int64_t d = 0; d < dim; d++) acc[d] += p * kv_at(v_cache, value + d, bf16);
      }
    }
  }
  for (int64_t h = 0; h < heads; h++) {
    float inv = 1.f / s.sum[h];
    for (int64_t d = 0; d < dim; d++) out[h * dim + d] = s.acc[h * dim + d] * inv;
  }
}

/* Whether a row's context fits its table and every block it reads (from the window's first,
 * with a window) is one of num_blocks. */
static int row_is_valid(const int32_t* table, int64_t width, int64_t len, int64_t block_size,
                        int64_t window, int64_t num_blocks) {
  if (len < 0 || len > width * block_size) return 0;
  int64_t first = first_key(len, window);
  for (int64_t j = first / block_size; j * block_size < len; j++)
    if (table[j] < 0 || table[j] >= num_blocks) return 0;
  return 1;
}

/* One row with the common head sizes' loops of constant length. */
static inline __attribute__((always_inline)) void attend_row_sized(
    const float* q, const void* k_cache, const void* v_cache, int64_t block_stride,
    int64_t slot_stride, int64_t head_stride, const int32_t* table, int64_t len,
    int64_t heads, int64_t group, int64_t dim, int64_t block_size, float scale,
    int64_t window, int bf16, float* out, scratch_t s) {
  if (dim == 64)
    attend_row(q, k_cache, v_cache, block_stride, slot_stride, head_stride, table, len, heads,
               group, 64, block_size, scale, window, bf16, out, s);
  else if (dim == 128)
    attend_row(q, k_cache, v_cache, block_stride, slot_stride, head_stride, table, len, heads,
               group, 128, block_size, scale, window, bf16, out, s);
  else
    attend_row(q, k_cache, v_cache, block_stride, slot_stride, head_stride, table, len, heads,
               group, dim, block_size, scale, window, bf16, out, s);
}

/* query and out: contiguous float32 [batch, heads, dim]; caches: [num_blocks, block_size,
 * kv_heads, dim], float32, or bfloat16 when kv_bf16 != 0, with element strides block_stride,
 * slot_stride, head_stride (and 1 along dim), the same for K and V; tables: int32 [batch,
 * width] rows of table_stride; lens: int32 [batch].
 * Returns 0; KERNEL_NO_MEMORY when the scratch could not be allocated; KERNEL_BAD_TABLES when
 * a context is negative or longer than its table, or a block id it reads is out of range
 * (checked for every row before any is read). On an error, out is undefined. */
#define KERNEL_NO_MEMORY 1
#define KERNEL_BAD_TABLES 2
int paged_decode_attention_cpu(const float* query, const void* k_cache, const void* v_cache,
                               int kv_bf16, int64_t num_blocks, int64_t block_stride,
                               int64_t slot_stride, int64_t head_stride, const int32_t* tables,
                               int64_t width, int64_t table_stride, const int32_t* lens,
                               int64_t batch, int64_t heads, int64_t kv_heads, int64_t dim,
                               int64_t block_size, float scale, int64_t window, int threads,
                               float* out) {
  for (int64_t r = 0; r < batch; r++)
    if (!row_is_valid(tables + r * table_stride, width, lens[r], block_size, window,
                      num_blocks))
      return KERNEL_BAD_TABLES;
  int64_t group = heads / kv_heads;
  int failed = 0;
#pragma omp parallel num_threads(threads) reduction(| : failed)
  {
    size_t floats = (size_t)(heads * dim + heads * block_size + 2 * heads);
    float* buffer = malloc(floats * sizeof(float));
    scratch_t s = {buffer, buffer + heads * dim, buffer + heads * dim + heads * block_size,
                   buffer + heads * dim + heads * block_size + heads};
    failed = buffer == NULL;
#pragma omp for schedule(dynamic, 1)
    for (int64_t r = 0; r < batch; r++) {
      if (failed) continue;
      const float* q = query + r * heads * dim;
      const int32_t* table = tables + r * table_stride;
      float* o = out + r * heads * dim;
      if (kv_bf16)
        attend_row_sized(q, k_cache, v_cache, block_stride, slot_stride, head_stride, table,
                         lens[r], heads, group, dim, block_size, scale, window, 1, o, s);
      else
        attend_row_sized(q, k_cache, v_cache, block_stride, slot_stride, head_stride, table,
                         lens[r], heads, group, dim, block_size, scale, window, 0, o, s);
    }
    free(buffer);
  }
  return failed ? KERNEL_NO_MEMORY : 0;
}
