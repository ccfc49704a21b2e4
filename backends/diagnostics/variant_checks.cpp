// check_variants: the self-validation verdict of every listed variant of every op on the
// context's device (clattn-probe --self-check).
#include <functional>

#include "backends/dispatch/self_validation.hpp"
#include "backends/params/variants.hpp"
#include "clattn/diagnostics.hpp"
#include "clattn/decode.hpp"
#include "clattn/extend.hpp"
#include "runtime/error.hpp"

namespace clattn {
namespace {

// The op's usual call planned with `variant` forced (its check runs inside the plan).
void plan_extend(const Context& ctx, const std::string& variant) {
  PagedCsr csr;
  csr.page_size = 16, csr.kv_indptr = {0, 2}, csr.kv_indices = {0, 1}, csr.kv_last_page_len = {16};
  csr.qo_indptr = {0, 16};
  PagedKV cache;
  cache.num_pages = 2, cache.page_size = 16, cache.num_kv_heads = 8, cache.head_dim = 128, cache.dtype = DType::BF16;
  ExtendOptions opt;
  opt.num_qo_heads = 32, opt.variant = variant;
  extend_plan(ctx, csr, cache, opt);
  ctx.finish();  // (the plan's table upload)
}

void plan_decode(const Context& ctx, const std::string& variant) {
  // (decode has no per-call variant switch: its usual call, bf16 KV at GQA 4; a variant its
  // parameters do not ask for here is reported not applicable.)
  (void)variant;
  PagedCsr csr;
  csr.page_size = 16, csr.kv_indptr = {0, 2}, csr.kv_indices = {0, 1}, csr.kv_last_page_len = {16};
  PagedKV cache;
  cache.num_pages = 2, cache.page_size = 16, cache.num_kv_heads = 8, cache.head_dim = 128, cache.dtype = DType::BF16;
  DecodeOptions opt;
  opt.num_qo_heads = 32, opt.max_splits = 1;
  decode_plan(ctx, csr, cache, opt);
  ctx.finish();
}

// Per op, its variants that need self-validation and how to plan it with one forced.
struct OpVariants {
  const char* op;
  std::vector<std::string> variants;
  std::function<void(const Context&, const std::string&)> plan;
};
const std::vector<OpVariants>& table() {
  static const std::vector<OpVariants> t = {
      {"decode", {"intel_subgroups", "khr_subgroups"}, plan_decode},
      {"extend", {"intel_dpas", "amd_wmma", "amd_mfma"}, plan_extend},
  };
  return t;
}

}  // namespace

std::vector<VariantCheck> check_variants(const Context& ctx) {
  std::vector<VariantCheck> out;
  for (const OpVariants& o : table())
    for (const std::string& v : o.variants) {
      if (!params::needs_self_validation(v)) continue;  // (has run on its hardware: no check)
      VariantCheck r;
      r.op = o.op, r.variant = v, r.status = "not applicable";
      r.detail = params::why_unavailable(ctx.profile(), v);
      if (!r.detail.empty()) {
        out.push_back(r);
        continue;
      }
      ops::VerdictLog log;
      try {
        o.plan(ctx, v);
      } catch (const Error& e) {
        r.detail = std::string("planning failed: ") + e.what();
      }
      for (const ops::VerdictRecord& rec : log.records())
        if (rec.op == o.op && rec.variant == v) {
          r.status = rec.verdict.pass ? "pass" : "fail";
          r.cached = rec.verdict.origin != "ran";
          r.max_error = rec.verdict.max_error, r.tolerance = rec.verdict.tolerance;
          r.detail = ops::describe(rec.verdict);
        }
      if (r.status == "not applicable" && r.detail.empty())
        r.detail = "the op's plan did not build it for its usual call (CLATTN_LOG_LEVEL=info says why)";
      out.push_back(r);
    }
  return out;
}

}  // namespace clattn
