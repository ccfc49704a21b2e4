// The decode op's self-validation check (dispatch/self_validation.hpp): a small paged case of the
// plan's own kind (KV dtype, layout and strides, head dim, page size, GQA group, q / o dtypes,
// parameters, split or not) run with exactly the build under test and with the generic
// kernel, both through the op on this check's own queue and buffers, outputs and lse compared.
//
// Case: 2 requests (37 and 21 keys; split plans: 300 and 200 keys in 64-token parts), 2 KV
// heads, pages in reverse order behind an unused one, NaN in every slot no request covers.
// Values are +-(1 + m/4) * 2^e, exact in every dtype, from a fixed seed.
#include "backends/ops/decode/check.hpp"

#include "backends/dispatch/self_check_data.hpp"
#include "backends/dispatch/variant.hpp"

namespace clattn::ops {

using namespace selfcheck;

Comparison decode_self_check(const Context& ctx, const DecodeCheckCase& k, const Variant& v) {
  auto& c = rt::impl(ctx);
  const int Hkv = 2, Hq = Hkv * k.group, D = k.cache.head_dim, P = k.cache.page_size;
  const std::vector<int> lens = k.split ? std::vector<int>{300, 200} : std::vector<int>{37, 21};
  const DType od = k.o_dtype == DType::F16 || k.o_dtype == DType::BF16 ? k.o_dtype : DType::F32;

  const PagePool pp = reversed_pages(lens, P);
  const PagedCsr& csr = pp.csr;
  // The caller's layout over this case's pages. (Custom strides are for the caller's head
  // count: this case's 2 heads are laid out contiguously, which loads as wide or wider; a build
  // that then differs fails the check.)
  PagedKV cache = k.cache;
  cache.num_pages = pp.pages, cache.num_kv_heads = Hkv;
  cache.stride_page = cache.stride_token = cache.stride_head = 0;
  cache.scale_stride_page = cache.scale_stride_token = cache.scale_stride_head = 0;
  std::mt19937 rng(0xdec0de57u);
  std::vector<uint8_t> kbuf, vbuf;
  fill_kv(cache, pp, rng, kbuf, vbuf);
  const int B = int(lens.size());
  const std::vector<uint8_t> q = random_values(rng, size_t(B) * Hq * D, k.q_dtype);

  Queue queue;
  make(queue, c);
  Mem qb, kb, vb, ids, o[2], lse[2], ws[2], ksc, vsc;
  if (cache.dtype == DType::I8 || cache.dtype == DType::I4) {
    // int8: row scales 1/8 and 1/4 (f32) or their f16 bits; int4: [scale, zero] pairs
    // [1/8, 8] and [1/4, 2] (the pairs' scale sits at even elements).
    const bool i4 = cache.dtype == DType::I4;
    const size_t n = size_t(cache.scale_required_bytes()) / dtype_size(cache.scale_dtype);
    std::vector<uint8_t> a, bv;
    for (size_t i = 0; i < n; ++i) {
      const bool zero = i4 && i % 2;
      put(a, cache.scale_dtype, false, zero ? 3 : -3, 0), put(bv, cache.scale_dtype, false, zero ? 1 : -2, 0);
    }
    make(ksc, c.ctx, a.size(), a.data());
    make(vsc, c.ctx, bv.size(), bv.data());
  }
  make(qb, c.ctx, q.size(), q.data());
  make(kb, c.ctx, kbuf.size(), kbuf.data());
  make(vb, c.ctx, vbuf.size(), vbuf.data());
  make(ids, c.ctx, csr.kv_indices.size() * 4, csr.kv_indices.data());
  const size_t rows = size_t(B) * Hq, o_bytes = rows * D * dtype_size(od);

  DecodeOptions opt;
  opt.num_qo_heads = Hq, opt.q_dtype = k.q_dtype, opt.o_dtype = od, opt.params = k.params;
  if (k.split) opt.deterministic = true, opt.split_tokens = 64, opt.max_splits = 8;
  else opt.max_splits = 1;
  std::vector<float> got[2];
  for (int i = 0; i < 2; ++i) {
    DecodePlan plan;
    if (i == 0) {
      CheckScope pin("decode", v);
      plan = decode_plan(ctx, csr, cache, opt, queue.q);
    } else {
      CheckScope pin("decode", "generic");
      plan = decode_plan(ctx, csr, cache, opt, queue.q);
    }
    make(o[i], c.ctx, o_bytes), make(lse[i], c.ctx, rows * 4);
    if (plan.workspace_bytes > 0) make(ws[i], c.ctx, size_t(plan.workspace_bytes));
    DecodeBuffers b;
    b.q = qb.m, b.k_cache = kb.m, b.v_cache = vb.m, b.page_ids = ids.m, b.o = o[i].m, b.lse = lse[i].m;
    b.workspace = ws[i].m, b.k_scale_cache = ksc.m, b.v_scale_cache = vsc.m;
    decode_run(ctx, plan, b, Enqueue{queue.q});
    got[i] = read_outputs(queue.q, o[i], lse[i], rows, D, od);
  }
  // The decode variants differ in how lanes exchange partial sums, not in the arithmetic: f32
  // reassociation, plus one rounding of o in its dtype (|o| <= 1) on either side.
  Comparison cmp;
  cmp.tolerance = 1e-4 + o_rounding(od);
  cmp.max_error = max_abs_diff(got[0], got[1]);
  return cmp;
}

}  // namespace clattn::ops
