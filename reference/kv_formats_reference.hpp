// clattn reference for the quantised KV cache formats (include/clattn/paged_kv.hpp,
// docs/kv_formats.md): what append_kv stores and what a kernel must read back. Written from
// the contract, independently of any kernel.
#pragma once
#include <cstdint>

namespace clattn::ref {

// int8, one (token, head) row of D values: scale = max |x| * fl(1/127) (one f32
// multiplication), rounded to f16 when f16_scale; q = the integer nearest to x / scale (the
// exact quotient by the stored scale, ties to even) saturated to [-127, 127]; an all-zero row
// has scale 0 and q = 0.
void int8_quantize_row(const float* x, int D, bool f16_scale, int8_t* q, float* scale);

// The values a kernel computes with: q * scale, in double.
void int8_dequantize_row(const int8_t* q, int D, float scale, double* out);

// f32 -> nearest f16 (ties to even) -> f32.
float round_to_f16(float x);

}  // namespace clattn::ref
