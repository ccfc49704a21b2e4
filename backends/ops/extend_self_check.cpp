// The extend op's self-validation check (ops/self_validation.hpp): a small paged case of the
// plan's own kind (its KV, q and o dtypes, head dim, page size, parameters and variant
// request) run with exactly the build under test and with the generic kernel, both through
// the op on this check's own queue and buffers, outputs and lse compared.
//
// Case: 2 requests with cached prefixes (5 new tokens after 6 cached, 3 after 13), causal,
// 2 KV heads with a GQA group of 2, pages in reverse order behind an unused one, and NaN in
// every slot no request covers (a kernel must mask, not multiply by zero). Values are
// +-(1 + m/4) * 2^e (m 0..3, e -4..0), exact in every dtype, from a fixed seed.
#include <cmath>
#include <cstring>
#include <random>

#include "backends/ops/extend.hpp"
#include "backends/ops/variant.hpp"
#include "runtime/error.hpp"

namespace clattn::ops {

namespace {

// The stored bits of +-(1 + m/4) * 2^e in `dt` (e in -4..0, m in 0..3), little-endian.
void put(std::vector<uint8_t>& out, DType dt, bool neg, int e, int m) {
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
void put_nan(std::vector<uint8_t>& out, DType dt) {
  switch (dt) {
    case DType::F32: for (uint8_t b : {0x00, 0x00, 0xc0, 0x7f}) out.push_back(b); return;
    case DType::F16: out.push_back(0x00), out.push_back(0x7e); return;
    case DType::BF16: out.push_back(0xc0), out.push_back(0x7f); return;
    case DType::FP8_E4M3: out.push_back(0x7f); return;
    default: out.push_back(0x7e); return;  // e5m2
  }
}

std::vector<uint8_t> random_values(std::mt19937& rng, size_t n, DType dt) {
  std::vector<uint8_t> out;
  out.reserve(n * dtype_size(dt));
  for (size_t i = 0; i < n; ++i) {
    const uint32_t r = rng();
    put(out, dt, r & 1, -int((r >> 1) % 5), int((r >> 4) % 4));
  }
  return out;
}

float to_float(const uint8_t* p, DType dt) {
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

void make(Mem& b, cl_context ctx, size_t bytes, const void* host = nullptr) {
  cl_int err = CL_SUCCESS;
  b.m = rt::create_buffer(ctx, CL_MEM_READ_WRITE | (host ? CL_MEM_COPY_HOST_PTR : 0), bytes, &err,
                          const_cast<void*>(host));
  rt::check_cl(err, "clCreateBuffer", "self-check buffer of " + std::to_string(bytes) + " bytes");
}

}  // namespace

Comparison extend_self_check(const Context& ctx, const ExtendCheckCase& k, const Variant& v) {
  auto& c = rt::impl(ctx);
  const int Hkv = 2, G = 2, Hq = Hkv * G, D = k.head_dim, P = k.page_size;
  const std::vector<int> qo = {5, 3}, prefix = {6, 13};
  const DType od = k.o_dtype == DType::F16 || k.o_dtype == DType::BF16 ? k.o_dtype : DType::F32;

  // Metadata: each request's pages, in reverse order of the pool behind page 0 (unused).
  PagedCsr csr;
  csr.page_size = P, csr.qo_indptr = {0}, csr.kv_indptr = {0};
  int pages = 0;
  for (size_t i = 0; i < qo.size(); ++i) pages += (qo[i] + prefix[i] + P - 1) / P;
  int next = pages;
  std::vector<int> owner(size_t(pages) + 1, -1), fill(size_t(pages) + 1, 0);  // request, keys in page
  for (size_t i = 0; i < qo.size(); ++i) {
    const int L = qo[i] + prefix[i], np = (L + P - 1) / P;
    for (int p = 0; p < np; ++p) {
      csr.kv_indices.push_back(next);
      owner[size_t(next)] = int(i), fill[size_t(next)] = std::min(P, L - p * P);
      --next;
    }
    csr.qo_indptr.push_back(csr.qo_indptr.back() + qo[i]);
    csr.kv_indptr.push_back(int32_t(csr.kv_indices.size()));
    csr.kv_last_page_len.push_back(L - (np - 1) * P);
  }
  const int T = csr.qo_indptr.back();
  PagedKV cache;
  cache.num_pages = pages + 1, cache.page_size = P, cache.num_kv_heads = Hkv, cache.head_dim = D;
  cache.layout = KVLayout::NHD, cache.dtype = k.kv_dtype;

  // Data: values for every covered slot, NaN elsewhere.
  std::mt19937 rng(0x5e1f7e57u);
  std::vector<uint8_t> kbuf, vbuf;
  const size_t es = dtype_size(k.kv_dtype);
  for (int page = 0; page <= pages; ++page)
    for (int t = 0; t < P; ++t)
      for (int h = 0; h < Hkv; ++h) {
        const bool used = owner[size_t(page)] >= 0 && t < fill[size_t(page)];
        for (auto* buf : {&kbuf, &vbuf}) {
          if (used) {
            const auto vals = random_values(rng, size_t(D), k.kv_dtype);
            buf->insert(buf->end(), vals.begin(), vals.end());
          } else {
            for (int d = 0; d < D; ++d) put_nan(*buf, k.kv_dtype);
          }
        }
      }
  if (int64_t(kbuf.size()) != cache.required_bytes() || kbuf.size() % es != 0)
    throw Error(Status::Internal, "self-check: KV layout mismatch");
  const std::vector<uint8_t> q = random_values(rng, size_t(T) * Hq * D, k.q_dtype);

  // Its own queue and buffers: the caller's queue, buffers and outputs are untouched.
  Queue queue;
  cl_int err = CL_SUCCESS;
  queue.q = clCreateCommandQueueWithProperties(c.ctx, c.device, nullptr, &err);
  rt::check_cl(err, "clCreateCommandQueueWithProperties", "the self-check's queue");
  Mem qb, kb, vb, ids, o[2], lse[2];
  make(qb, c.ctx, q.size(), q.data());
  make(kb, c.ctx, kbuf.size(), kbuf.data());
  make(vb, c.ctx, vbuf.size(), vbuf.data());
  make(ids, c.ctx, csr.kv_indices.size() * 4, csr.kv_indices.data());
  const size_t rows = size_t(T) * Hq, o_bytes = rows * D * dtype_size(od);
  for (int i = 0; i < 2; ++i) make(o[i], c.ctx, o_bytes), make(lse[i], c.ctx, rows * 4);

  ExtendOptions opt;
  opt.num_qo_heads = Hq, opt.q_dtype = k.q_dtype, opt.o_dtype = od, opt.causal = true;
  opt.params = k.params;
  std::vector<uint8_t> out[2];
  std::vector<float> got[2];
  for (int i = 0; i < 2; ++i) {
    ExtendPlan plan;
    if (i == 0) {
      CheckScope pin("extend", v.name, v.options);
      opt.variant = k.variant;
      plan = extend_plan(ctx, csr, cache, opt, queue.q);
    } else {
      CheckScope pin("extend", "generic");
      opt.variant = "generic";
      plan = extend_plan(ctx, csr, cache, opt, queue.q);
    }
    ExtendBuffers b;
    b.q = qb.m, b.k = kb.m, b.v = vb.m, b.page_ids = ids.m, b.o = o[i].m, b.lse = lse[i].m;
    extend_run(ctx, plan, b, Enqueue{queue.q});
    out[i].resize(o_bytes);
    std::vector<float> l(rows);
    rt::check_cl(clEnqueueReadBuffer(queue.q, o[i].m, CL_TRUE, 0, o_bytes, out[i].data(), 0, nullptr, nullptr),
                 "clEnqueueReadBuffer", "the self-check's output");
    rt::check_cl(clEnqueueReadBuffer(queue.q, lse[i].m, CL_TRUE, 0, rows * 4, l.data(), 0, nullptr, nullptr),
                 "clEnqueueReadBuffer", "the self-check's lse");
    for (size_t j = 0; j < rows * D; ++j) got[i].push_back(to_float(out[i].data() + j * dtype_size(od), od));
    got[i].insert(got[i].end(), l.begin(), l.end());
  }
  // Matrix units round q and P to the 16-bit KV type (tests/extend: bf16 3e-2, f16 6e-3), plus
  // one rounding of o in its dtype (|o| <= 1) on either side.
  const bool bf16 = k.kv_dtype == DType::BF16 || k.q_dtype == DType::BF16;
  Comparison cmp;
  cmp.tolerance = (bf16 ? 3e-2 : 6e-3) + (od == DType::BF16 ? 1.0 / 256 : od == DType::F16 ? 1.0 / 2048 : 0.0);
  cmp.max_error = max_abs_diff(got[0], got[1]);
  return cmp;
}

}  // namespace clattn::ops
