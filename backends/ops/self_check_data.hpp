// Data and OpenCL helpers of the ops' self-validation checks (extend_self_check.cpp,
// decode_self_check.cpp): values exact in every dtype, NaN fill, decoding of the outputs, and
// the check's own buffers and queue.
#pragma once
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "runtime/context_impl.hpp"
#include "runtime/error.hpp"

namespace clattn::ops::selfcheck {

// The stored bits of +-(1 + m/4) * 2^e in `dt` (e in -4..0, m in 0..3), little-endian.
inline void put(std::vector<uint8_t>& out, DType dt, bool neg, int e, int m) {
  const uint32_t s = neg ? 1u : 0u;
  switch (dt) {
    case DType::F32: {
      const uint32_t u = s << 31 | uint32_t(e + 127) << 23 | uint32_t(m) << 21;
      for (int i = 0; i < 4; ++i) out.push_back(uint8_t(u >> (8 * i)));
      return;
    }
    case DType::F16: case DType::BF16: {
      const uint32_t u = dt == DType::F16 ? s << 15 | uint32_t(e + 15) << 10 | uint32_t(m) << 8
                                          : s << 15 | uint32_t(e + 127) << 7 | uint32_t(m) << 5;
      out.push_back(uint8_t(u)), out.push_back(uint8_t(u >> 8));
      return;
    }
    case DType::FP8_E4M3: out.push_back(uint8_t(s << 7 | uint32_t(e + 7) << 3 | uint32_t(m) << 1)); return;
    case DType::FP8_E5M2: out.push_back(uint8_t(s << 7 | uint32_t(e + 15) << 2 | uint32_t(m))); return;
    default: rt::invalid("self-check: no values for dtype " + std::string(dtype_name(dt)));
  }
}

// A NaN of `dt`.
inline void put_nan(std::vector<uint8_t>& out, DType dt) {
  switch (dt) {
    case DType::F32: for (uint8_t b : {0x00, 0x00, 0xc0, 0x7f}) out.push_back(b); return;
    case DType::F16: out.push_back(0x00), out.push_back(0x7e); return;
    case DType::BF16: out.push_back(0xc0), out.push_back(0x7f); return;
    case DType::FP8_E4M3: out.push_back(0x7f); return;
    default: out.push_back(0x7e); return;  // e5m2
  }
}

inline std::vector<uint8_t> random_values(std::mt19937& rng, size_t n, DType dt) {
  std::vector<uint8_t> out;
  out.reserve(n * dtype_size(dt));
  for (size_t i = 0; i < n; ++i) {
    const uint32_t r = rng();
    put(out, dt, r & 1, -int((r >> 1) % 5), int((r >> 4) % 4));
  }
  return out;
}

inline float to_float(const uint8_t* p, DType dt) {
  if (dt == DType::F32) {
    float f;
    std::memcpy(&f, p, 4);
    return f;
  }
  const uint32_t h = uint32_t(p[0]) | uint32_t(p[1]) << 8;
  if (dt == DType::BF16) {
    const uint32_t u = h << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
  const int e = int(h >> 10 & 31), m = int(h & 1023);  // f16
  const float v = e == 0 ? std::ldexp(float(m), -24) : e == 31 ? (m ? NAN : INFINITY) : std::ldexp(float(m + 1024), e - 25);
  return h >> 15 ? -v : v;
}

// Owned OpenCL objects of the check.
struct Mem {
  cl_mem m = nullptr;
  ~Mem() { if (m) clReleaseMemObject(m); }
};
struct Queue {
  cl_command_queue q = nullptr;
  ~Queue() {
    if (q) clFinish(q), clReleaseCommandQueue(q);
  }
};

inline void make(Mem& b, cl_context ctx, size_t bytes, const void* host = nullptr) {
  cl_int err = CL_SUCCESS;
  b.m = rt::create_buffer(ctx, CL_MEM_READ_WRITE | (host ? CL_MEM_COPY_HOST_PTR : 0), bytes, &err,
                          const_cast<void*>(host));
  rt::check_cl(err, "clCreateBuffer", "self-check buffer of " + std::to_string(bytes) + " bytes");
}


}  // namespace clattn::ops::selfcheck
