/* bfloat16 in the native kernels: a bfloat16's bits are a float32's upper half. */
#ifndef AGENTIX_NATIVE_BF16_H
#define AGENTIX_NATIVE_BF16_H

#include <stdint.h>
#include <string.h>

/* The float32 a bfloat16 (its bits) stands for, exactly. */
static inline float bf16_to_float(uint16_t bits) {
  uint32_t word = (uint32_t)bits << 16;
  float value;
  memcpy(&value, &word, sizeof value);
  return value;
}

#endif
