// Data and OpenCL helpers of the ops' self-validation checks (extend/self_check.cpp,
// decode/self_check.cpp): values exact in every dtype, NaN fill, decoding of the outputs, and
// the check's own buffers and queue.
#pragma once
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "clattn/metadata.hpp"
#include "clattn/paged_kv.hpp"
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
    case DType::I8: out.push_back(uint8_t(int8_t((neg ? -1 : 1) * (4 + m) << (-e % 3)))); return;  // |x| <= 28
    case DType::I4: out.push_back(uint8_t((neg ? 8 : 0) | m | (-e) << 4)); return;  // two nibbles: a pair of elements
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
    case DType::I8: out.push_back(0x7f); return;  // no NaN: the largest value, which moves any result it enters
    case DType::I4: out.push_back(0xff); return;  // the same for both nibbles
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

// The check's own queue: the caller's queue, buffers and outputs stay untouched.
inline void make(Queue& q, const detail::ContextImpl& c) {
  cl_int err = CL_SUCCESS;
  q.q = clCreateCommandQueueWithProperties(c.ctx, c.device, nullptr, &err);
  rt::check_cl(err, "clCreateCommandQueueWithProperties", "the self-check's queue");
}

// Requests of `lens` keys in pages of `page_size`, each request's pages in reverse order of the
// pool behind page 0 (never listed): the CSR's kv_indptr / kv_indices / kv_last_page_len, and
// per pool page its request (-1: unused) and the keys it holds.
struct PagePool {
  PagedCsr csr;
  int pages = 0;  // pool size (page 0 included)
  std::vector<int> owner, fill;
};
inline PagePool reversed_pages(const std::vector<int>& lens, int page_size) {
  const int P = page_size;
  PagePool pp;
  pp.csr.page_size = P, pp.csr.kv_indptr = {0};
  int used = 0;
  for (int L : lens) used += (L + P - 1) / P;
  pp.pages = used + 1;
  pp.owner.assign(size_t(pp.pages), -1), pp.fill.assign(size_t(pp.pages), 0);
  int next = used;
  for (size_t i = 0; i < lens.size(); ++i) {
    const int L = lens[i], np = (L + P - 1) / P;
    for (int p = 0; p < np; ++p) {
      pp.csr.kv_indices.push_back(next);
      pp.owner[size_t(next)] = int(i), pp.fill[size_t(next)] = std::min(P, L - p * P);
      --next;
    }
    pp.csr.kv_indptr.push_back(int32_t(pp.csr.kv_indices.size()));
    pp.csr.kv_last_page_len.push_back(L - (np - 1) * P);
  }
  return pp;
}

// K and V buffers of `cache` (its layout and strides, num_pages = the pool's): values in every
// slot the pool's requests cover (K then V per slot, from `rng`), NaN elsewhere. int4: a byte
// of random_values is a pair of elements.
inline void fill_kv(const PagedKV& cache, const PagePool& pp, std::mt19937& rng, std::vector<uint8_t>& kbuf,
                    std::vector<uint8_t>& vbuf) {
  const size_t es = dtype_size(cache.dtype), bytes = size_t(cache.required_bytes());
  std::vector<uint8_t> nan1;
  put_nan(nan1, cache.dtype);
  kbuf.assign(bytes, 0), vbuf.assign(bytes, 0);
  for (size_t off = 0; off + es <= bytes; off += es)
    for (auto* buf : {&kbuf, &vbuf}) std::memcpy(buf->data() + off, nan1.data(), es);
  for (int page = 0; page < pp.pages; ++page)
    for (int t = 0; t < pp.fill[size_t(page)]; ++t)
      for (int h = 0; h < cache.num_kv_heads; ++h) {
        const bool i4 = cache.dtype == DType::I4;
        const size_t el = size_t(page * cache.page_stride() + t * cache.token_stride() + h * cache.head_stride());
        const size_t at = i4 ? el / 2 : el * es;
        for (auto* buf : {&kbuf, &vbuf}) {
          const auto vals = random_values(rng, size_t(cache.head_dim) / (i4 ? 2 : 1), cache.dtype);
          std::memcpy(buf->data() + at, vals.data(), vals.size());
        }
      }
}

// The rows x D output (in `od`) and the rows' lse, read back blocking on `q`, as floats.
inline std::vector<float> read_outputs(cl_command_queue q, const Mem& o, const Mem& lse, size_t rows, int D,
                                       DType od) {
  const size_t es = dtype_size(od);
  std::vector<uint8_t> out(rows * size_t(D) * es);
  std::vector<float> l(rows), got;
  rt::check_cl(clEnqueueReadBuffer(q, o.m, CL_TRUE, 0, out.size(), out.data(), 0, nullptr, nullptr),
               "clEnqueueReadBuffer", "the self-check's output");
  rt::check_cl(clEnqueueReadBuffer(q, lse.m, CL_TRUE, 0, rows * 4, l.data(), 0, nullptr, nullptr),
               "clEnqueueReadBuffer", "the self-check's lse");
  got.reserve(rows * size_t(D) + rows);
  for (size_t j = 0; j < rows * size_t(D); ++j) got.push_back(to_float(out.data() + j * es, od));
  got.insert(got.end(), l.begin(), l.end());
  return got;
}

// One rounding of an output |o| <= 1 in its dtype.
inline double o_rounding(DType od) { return od == DType::BF16 ? 1.0 / 256 : od == DType::F16 ? 1.0 / 2048 : 0.0; }


}  // namespace clattn::ops::selfcheck
