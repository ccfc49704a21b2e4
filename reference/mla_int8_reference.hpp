// clattn reference for the int8 MLA latent cache (clattn/mla.hpp MlaCache, docs/kv_formats.md
// "int8 MLA latent"): what append_latent stores for one token and what the MLA kernels read
// back. Written from the contract, independently of any kernel; it is int8_quantize_row
// (kv_formats_reference.hpp) applied to the token's two parts.
#pragma once
#include <cstdint>

namespace clattn::ref {

// One token's latent row: ckv (512 values) and kpe (64 values), each quantised with its own
// scale (scales[0] = the ckv scale, scales[1] = the kpe scale; each max |part| * fl(1/127),
// rounded to f16 when f16_scale), q = the integer nearest to x / scale (ties to even)
// saturated to [-127, 127]; an all-zero part has scale 0 and q = 0.
void int8_quantize_latent(const float* ckv, const float* kpe, bool f16_scale, int8_t* q_ckv, int8_t* q_kpe,
                          float scales[2]);

// The values an MLA kernel computes with: q_ckv * scales[0] (512) and q_kpe * scales[1] (64).
void int8_dequantize_latent(const int8_t* q_ckv, const int8_t* q_kpe, const float scales[2], double* ckv,
                            double* kpe);

}  // namespace clattn::ref
