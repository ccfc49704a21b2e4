// See kv_formats_reference.hpp.
#include "kv_formats_reference.hpp"

#include <algorithm>
#include <cfenv>
#include <cmath>

namespace clattn::ref {

float round_to_f16(float x) {
  if (x == 0.0f || !std::isfinite(x)) return x;
  int e;
  std::frexp(x, &e);                       // |x| in [2^(e-1), 2^e)
  const int q = std::max(e - 1, -14) - 10;  // f16 ulp exponent (subnormals below 2^-14)
  const double step = std::ldexp(1.0, q);
  const double r = std::nearbyint(double(x) / step) * step;  // ties to even (default rounding)
  return float(std::min(r, 65504.0));
}

void int8_quantize_row(const float* x, int D, bool f16_scale, int8_t* q, float* scale) {
  float amax = 0.0f;
  for (int d = 0; d < D; ++d) amax = std::max(amax, std::fabs(x[d]));
  float s = amax * (1.0f / 127.0f);
  if (f16_scale) s = round_to_f16(s);
  *scale = s;
  for (int d = 0; d < D; ++d) {
    // The exact quotient of two f32 is never within 2^-40 of a half-integer unless it is one,
    // so the double quotient rounds as the exact one does.
    const double r = s > 0.0f ? std::nearbyint(double(x[d]) / double(s)) : 0.0;
    q[d] = int8_t(std::clamp(r, -127.0, 127.0));
  }
}

void int8_dequantize_row(const int8_t* q, int D, float scale, double* out) {
  for (int d = 0; d < D; ++d) out[d] = double(q[d]) * double(scale);
}

}  // namespace clattn::ref
