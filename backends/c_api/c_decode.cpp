// C ABI: paged decode plans (CSR / page table) and runs; flat structs converted to the C++
// API's, plans as handles.
#include <vector>

#include "backends/c_api/c_api_common.hpp"
#include "clattn/decode.hpp"

struct clattn_decode_plan_s {
  clattn::DecodePlan plan;
};

namespace {

using clattn::capi::need;
using clattn::capi::to_cpp;

clattn::DecodeOptions to_cpp(const clattn_decode_options& o) {
  clattn::DecodeOptions d;
  d.num_qo_heads = o.num_qo_heads;
  d.q_dtype = static_cast<clattn::DType>(o.q_dtype);
  d.o_dtype = static_cast<clattn::DType>(o.o_dtype);
  d.sm_scale = o.sm_scale;
  d.logits_soft_cap = o.logits_soft_cap;
  d.window_left = o.window_left;
  d.deterministic = o.deterministic != 0;
  d.split_tokens = o.split_tokens;
  d.max_splits = o.max_splits;
  d.validate = o.validate != 0;
  d.params = clattn::capi::parse_params(o.params, "opt.params");
  return d;
}

}  // namespace

using clattn::capi::guard;

extern "C" {

void clattn_decode_options_init(clattn_decode_options* o) {
  if (!o) return;
  *o = clattn_decode_options{};
  o->q_dtype = o->o_dtype = int(clattn::DType::BF16);
  o->window_left = -1;
  o->validate = 1;
}

clattn_status clattn_decode_plan_csr(clattn_context ctx, const clattn_csr* csr, const clattn_paged_kv* cache,
                                     const clattn_decode_options* opt, clattn_decode_plan* out) {
  return guard([&] {
    need(out, "out");
    *out = nullptr;
    need(ctx, "ctx");
    clattn::PagedCsr c = to_cpp(csr, "csr", false);
    auto plan = clattn::decode_plan(ctx->ctx, c, to_cpp(*need(cache, "cache")), to_cpp(*need(opt, "opt")));
    *out = new clattn_decode_plan_s{std::move(plan)};
  });
}

clattn_status clattn_decode_plan_page_table(clattn_context ctx, const clattn_page_table* t,
                                            const clattn_paged_kv* cache, const clattn_decode_options* opt,
                                            clattn_decode_plan* out) {
  return guard([&] {
    need(out, "out");
    *out = nullptr;
    need(ctx, "ctx");
    clattn::PageTable pt = to_cpp(t, "table", false);
    auto plan = clattn::decode_plan(ctx->ctx, pt, to_cpp(*need(cache, "cache")), to_cpp(*need(opt, "opt")));
    *out = new clattn_decode_plan_s{std::move(plan)};
  });
}

clattn_status clattn_decode_plan_workspace_bytes(clattn_decode_plan plan, int64_t* out) {
  return guard([&] { *need(out, "out") = need(plan, "plan")->plan.workspace_bytes; });
}

void clattn_decode_plan_release(clattn_decode_plan plan) { delete plan; }

clattn_status clattn_decode_run(clattn_context ctx, clattn_decode_plan plan, const clattn_decode_buffers* b,
                                const clattn_enqueue* e) {
  return guard([&] {
    need(b, "buffers");
    clattn::DecodeBuffers d;
    d.q = b->q;
    d.k_cache = b->k_cache;
    d.v_cache = b->v_cache;
    d.page_ids = b->page_ids;
    d.o = b->o;
    d.lse = b->lse;
    d.workspace = b->workspace;
    d.sinks = b->sinks;
    d.k_scale = b->k_scale;
    d.v_scale = b->v_scale;
    d.k_scale_cache = b->k_scale_cache;
    d.v_scale_cache = b->v_scale_cache;
    d.k_head_scales = b->k_head_scales;
    d.v_head_scales = b->v_head_scales;
    clattn::decode_run(need(ctx, "ctx")->ctx, need(plan, "plan")->plan, d, to_cpp(e));
  });
}

}  // extern "C"
