// Self-check: every dtype's store/load path on the device against host bit patterns.
#include <cmath>
#include <cstring>
#include <vector>

#include "clattn/diagnostics.hpp"
#include "runtime/context_impl.hpp"
#include "runtime/error.hpp"

namespace clattn {
namespace {

// What a correct device returns after storing `x` as dtype `dt` and loading it back.
float expected_roundtrip(float x, DType dt) {
  switch (dt) {
    case DType::F32: return x;
    case DType::BF16: {  // round-to-nearest-even to 8 mantissa bits
      uint32_t u;
      std::memcpy(&u, &x, 4);
      u += 0x7fffu + ((u >> 16) & 1u);
      u &= 0xffff0000u;
      float r;
      std::memcpy(&r, &u, 4);
      return r;
    }
    default: {
      // Formats with m mantissa bits, min normal exponent emin, max finite: round to
      // nearest even on the grid, saturate.
      int mbits = dt == DType::F16 ? 10 : dt == DType::FP8_E4M3 ? 3 : 2;
      int emin = dt == DType::F16 ? -14 : dt == DType::FP8_E4M3 ? -6 : -14;
      double maxv = dt == DType::F16 ? 65504.0 : dt == DType::FP8_E4M3 ? 448.0 : 57344.0;
      double a = std::fabs(x);
      if (dt == DType::F16 && a >= 65520.0) return std::copysign(INFINITY, x);  // f16 overflows to inf
      if (a > maxv) a = maxv;
      int e = a > 0 ? std::max(int(std::floor(std::log2(a))), emin) : emin;
      double step = std::ldexp(1.0, e - mbits);
      double r = std::nearbyint(a / step) * step;  // default rounding mode: to nearest even
      if (r > maxv) r = maxv;
      return float(std::copysign(r, x));
    }
  }
}

}  // namespace

std::string self_check(const Context& ctx) {
  auto& c = rt::impl(ctx);
  auto prog = c.programs.get("selfcheck.cl", rt::make_options({}));
  auto& k = prog->kernel("dtype_roundtrip");
  std::vector<float> in = {0.f, 1.f, -2.5f, 0.1f, 3.14159f, 448.f, 500.f, -1e6f, 65504.f, 1e-3f, 0.0078125f,
                           1.0f / 512, 1.0f / 1024, 3.0f / 1024, 6e-5f, 7.5f, 57344.f, -0.3333f, 1.0625f, 1.1875f};
  int n = int(in.size());
  DeviceBuffer din(ctx, n * 4), dout(ctx, n * 4), scratch(ctx, n * 4);
  din.write(ctx, in.data(), n * 4);
  std::vector<float> out(n);
  const DType types[] = {DType::F32, DType::F16, DType::BF16, DType::FP8_E4M3, DType::FP8_E5M2};
  for (DType dt : types) {
    size_t gws = size_t(n);
    int code = int(dt);
    cl_mem a = din.get(), b = dout.get(), s = scratch.get();
    k.launch(c.queue, 1, &gws, nullptr, 0, nullptr, nullptr, a, b, s, n, code);
    dout.read(ctx, out.data(), n * 4);
    for (int i = 0; i < n; ++i) {
      float want = expected_roundtrip(in[i], dt);
      if (!(out[i] == want))
        throw Error(Status::Internal, std::string("self-check: ") + dtype_name(dt) + " round trip of " +
                                          std::to_string(in[i]) + " gave " + std::to_string(out[i]) + ", expected " +
                                          std::to_string(want) + " on " + c.profile.device_name);
    }
  }
  return "self-check passed on " + c.profile.device_name + ": f32/f16/bf16/fp8_e4m3/fp8_e5m2 load/store paths exact";
}

}  // namespace clattn
