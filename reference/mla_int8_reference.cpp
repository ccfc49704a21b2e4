// See mla_int8_reference.hpp.
#include "mla_int8_reference.hpp"

#include "kv_formats_reference.hpp"

namespace clattn::ref {

namespace {
constexpr int kCkv = 512, kKpe = 64;
}

void int8_quantize_latent(const float* ckv, const float* kpe, bool f16_scale, int8_t* q_ckv, int8_t* q_kpe,
                          float scales[2]) {
  int8_quantize_row(ckv, kCkv, f16_scale, q_ckv, &scales[0]);
  int8_quantize_row(kpe, kKpe, f16_scale, q_kpe, &scales[1]);
}

void int8_dequantize_latent(const int8_t* q_ckv, const int8_t* q_kpe, const float scales[2], double* ckv,
                            double* kpe) {
  int8_dequantize_row(q_ckv, kCkv, scales[0], ckv);
  int8_dequantize_row(q_kpe, kKpe, scales[1], kpe);
}

}  // namespace clattn::ref
