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

namespace {
// The integer nearest to the exact quotient a / b (b > 0), ties to even (int8_quantize_row's
// argument: the double quotient rounds as the exact one does).
double nearest(float a, float b) { return std::nearbyint(double(a) / double(b)); }
}  // namespace

void int4_quantize_group(const float* x, int G, bool f16_scale, uint8_t* u, float* scale, float* zero) {
  float lo = 0.0f, hi = 0.0f;
  for (int i = 0; i < G; ++i) lo = std::min(lo, x[i]), hi = std::max(hi, x[i]);
  const float range = hi - lo;  // f32, as the kernel rounds it
  float s = range * (1.0f / 15.0f);
  if (f16_scale) s = round_to_f16(s);
  *scale = s;
  *zero = s > 0.0f ? float(std::clamp(nearest(-lo, s), 0.0, 15.0)) : 0.0f;
  for (int i = 0; i < G; ++i)
    u[i] = s > 0.0f ? uint8_t(std::clamp(nearest(x[i], s) + double(*zero), 0.0, 15.0)) : uint8_t(0);
}

void int4_dequantize_group(const uint8_t* u, int G, float scale, float zero, double* out) {
  for (int i = 0; i < G; ++i) out[i] = (double(u[i]) - double(zero)) * double(scale);
}

void int4_pack(const uint8_t* u, int n, uint8_t* bytes) {
  for (int i = 0; i < n / 2; ++i) bytes[i] = uint8_t((u[2 * i] & 15) | (u[2 * i + 1] & 15) << 4);
}

void int4_unpack(const uint8_t* bytes, int n, uint8_t* u) {
  for (int i = 0; i < n / 2; ++i) u[2 * i] = bytes[i] & 15, u[2 * i + 1] = bytes[i] >> 4;
}

}  // namespace clattn::ref
