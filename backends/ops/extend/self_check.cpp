// The extend op's self-validation check (dispatch/self_validation.hpp): a small paged case of the
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

#include "backends/ops/extend/check.hpp"
#include "backends/dispatch/self_check_data.hpp"
#include "backends/dispatch/variant.hpp"
#include "runtime/error.hpp"

namespace clattn::ops {

using namespace selfcheck;


Comparison extend_self_check(const Context& ctx, const ExtendCheckCase& k, const Variant& v) {
  auto& c = rt::impl(ctx);
  const int Hkv = 2, G = 2, Hq = Hkv * G, D = k.head_dim, P = k.page_size;
  const std::vector<int> qo = {5, 3}, prefix = {6, 13};
  const DType od = k.o_dtype == DType::F16 || k.o_dtype == DType::BF16 ? k.o_dtype : DType::F32;

  // Metadata: each request's pages, in reverse order of the pool behind page 0 (unused).
  std::vector<int> lens;
  for (size_t i = 0; i < qo.size(); ++i) lens.push_back(qo[i] + prefix[i]);
  const PagePool pp = reversed_pages(lens, P);
  PagedCsr csr = pp.csr;
  csr.qo_indptr = {0};
  for (int n : qo) csr.qo_indptr.push_back(csr.qo_indptr.back() + n);
  const int T = csr.qo_indptr.back();
  PagedKV cache;
  cache.num_pages = pp.pages, cache.page_size = P, cache.num_kv_heads = Hkv, cache.head_dim = D;
  cache.layout = KVLayout::NHD, cache.dtype = k.kv_dtype;

  // Data: values for every covered slot, NaN elsewhere.
  std::mt19937 rng(0x5e1f7e57u);
  std::vector<uint8_t> kbuf, vbuf;
  fill_kv(cache, pp, rng, kbuf, vbuf);
  const std::vector<uint8_t> q = random_values(rng, size_t(T) * Hq * D, k.q_dtype);

  Queue queue;
  make(queue, c);
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
  std::vector<float> got[2];
  for (int i = 0; i < 2; ++i) {
    ExtendPlan plan;
    if (i == 0) {
      CheckScope pin("extend", v);
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
    got[i] = read_outputs(queue.q, o[i], lse[i], rows, D, od);
  }
  // Matrix units round q and P to the 16-bit KV type (tests/extend: bf16 3e-2, f16 6e-3), plus
  // one rounding of o in its dtype (|o| <= 1) on either side.
  const bool bf16 = k.kv_dtype == DType::BF16 || k.q_dtype == DType::BF16;
  Comparison cmp;
  cmp.tolerance = (bf16 ? 3e-2 : 6e-3) + o_rounding(od);
  cmp.max_error = max_abs_diff(got[0], got[1]);
  return cmp;
}

}  // namespace clattn::ops
