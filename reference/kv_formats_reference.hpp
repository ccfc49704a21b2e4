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

// int4, one group of G values (G = quant_group): lo = min(min x, 0), hi = max(max x, 0);
// scale = (hi - lo) * fl(1/15) (an f32 subtraction and one f32 multiplication), rounded to
// f16 when f16_scale; zero = nearest(-lo / scale) and u[i] = nearest(x[i] / scale) + zero,
// each clamped to [0, 15] (exact quotients by the stored scale, ties to even). A group whose
// stored scale is 0 has scale 0, zero 0 and u = 0. u: one value 0..15 per element.
void int4_quantize_group(const float* x, int G, bool f16_scale, uint8_t* u, float* scale, float* zero);

// The values a kernel computes with: (u - zero) * scale, in double.
void int4_dequantize_group(const uint8_t* u, int G, float scale, float zero, double* out);

// Nibbles -> bytes as an int4 cache row holds them: u[2i] in the low nibble of byte i, u[2i+1]
// in the high one (n even); and back.
void int4_pack(const uint8_t* u, int n, uint8_t* bytes);
void int4_unpack(const uint8_t* bytes, int n, uint8_t* u);

// f32 -> nearest f16 (ties to even) -> f32.
float round_to_f16(float x);

}  // namespace clattn::ref
