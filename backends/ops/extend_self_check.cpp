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
#include "backends/ops/self_check_data.hpp"
#include "backends/ops/variant.hpp"
#include "runtime/error.hpp"

namespace clattn::ops {

using namespace selfcheck;


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
