// C ABI: extend (paged CSR / page table), ragged prefill and cascade plans and runs.
#include <vector>

#include "backends/c_api/c_api_common.hpp"
#include "clattn/extend.hpp"

struct clattn_extend_plan_s {
  clattn::ExtendPlan plan;
};
struct clattn_cascade_plan_s {
  clattn::CascadePlan plan;
};

namespace {

using clattn::capi::copy;
using clattn::capi::invalid;
using clattn::capi::need;
using clattn::capi::to_cpp;

// batch_size: the plan's B, for the length of mask_indptr.
clattn::ExtendOptions to_cpp_opt(const clattn_extend_options* o, int batch_size) {
  need(o, "opt");
  clattn::ExtendOptions x;
  x.num_qo_heads = o->num_qo_heads;
  x.q_dtype = static_cast<clattn::DType>(o->q_dtype);
  x.o_dtype = static_cast<clattn::DType>(o->o_dtype);
  x.sm_scale = o->sm_scale;
  x.logits_soft_cap = o->logits_soft_cap;
  x.window_left = o->window_left;
  x.causal = o->causal != 0;
  if (o->mask_indptr) x.mask_indptr = copy(o->mask_indptr, int64_t(batch_size) + 1, "opt.mask_indptr");
  x.validate = o->validate != 0;
  if (o->variant) x.variant = o->variant;
  x.params = clattn::capi::parse_params(o->params, "opt.params");
  return x;
}

}  // namespace

using clattn::capi::guard;

extern "C" {

void clattn_extend_options_init(clattn_extend_options* o) {
  if (!o) return;
  *o = clattn_extend_options{};
  o->q_dtype = o->o_dtype = int(clattn::DType::BF16);
  o->window_left = -1;
  o->causal = 1;
  o->validate = 1;
}

clattn_status clattn_extend_plan_csr(clattn_context ctx, const clattn_csr* csr, const clattn_paged_kv* cache,
                                     const clattn_extend_options* opt, clattn_extend_plan* out) {
  return guard([&] {
    need(out, "out");
    *out = nullptr;
    need(ctx, "ctx");
    clattn::PagedCsr c = to_cpp(csr, "csr", true);
    auto o = to_cpp_opt(opt, csr->batch_size);
    auto plan = clattn::extend_plan(ctx->ctx, c, to_cpp(*need(cache, "cache")), o);
    *out = new clattn_extend_plan_s{std::move(plan)};
  });
}

clattn_status clattn_extend_plan_page_table(clattn_context ctx, const clattn_page_table* table,
                                            const clattn_paged_kv* cache, const clattn_extend_options* opt,
                                            clattn_extend_plan* out) {
  return guard([&] {
    need(out, "out");
    *out = nullptr;
    need(ctx, "ctx");
    clattn::PageTable t = to_cpp(table, "table", true);
    auto o = to_cpp_opt(opt, table->batch_size);
    auto plan = clattn::extend_plan(ctx->ctx, t, to_cpp(*need(cache, "cache")), o);
    *out = new clattn_extend_plan_s{std::move(plan)};
  });
}

clattn_status clattn_prefill_plan_ragged(clattn_context ctx, int batch_size, const int32_t* qo_indptr,
                                         const int32_t* kv_indptr, const clattn_ragged_kv* kv,
                                         const clattn_extend_options* opt, clattn_extend_plan* out) {
  return guard([&] {
    need(out, "out");
    *out = nullptr;
    need(ctx, "ctx");
    if (batch_size < 0) invalid("batch_size = " + std::to_string(batch_size) + " is negative");
    auto qo = copy(need(qo_indptr, "qo_indptr"), int64_t(batch_size) + 1, "qo_indptr");
    auto kvp = copy(need(kv_indptr, "kv_indptr"), int64_t(batch_size) + 1, "kv_indptr");
    need(kv, "kv");
    clattn::RaggedKV r;
    r.num_tokens = kv->num_tokens;
    r.num_kv_heads = kv->num_kv_heads;
    r.head_dim = kv->head_dim;
    r.dtype = static_cast<clattn::DType>(kv->dtype);
    r.stride_token = kv->stride_token;
    r.stride_head = kv->stride_head;
    auto plan = clattn::prefill_plan(ctx->ctx, qo, kvp, r, to_cpp_opt(opt, batch_size));
    *out = new clattn_extend_plan_s{std::move(plan)};
  });
}

clattn_status clattn_extend_plan_info_get(clattn_extend_plan plan, clattn_extend_plan_info* out) {
  return guard([&] {
    need(out, "out");
    const auto& p = need(plan, "plan")->plan;
    clattn_extend_plan_info i{};
    i.num_tokens = p.num_tokens;
    i.page_ids_needed = p.page_ids_needed;
    i.mask_bytes_needed = p.mask_bytes_needed;
    i.num_tiles = p.num_tiles;
    i.workspace_bytes = p.workspace_bytes;
    clattn::capi::copy_str(i.variant, p.variant);
    *out = i;
  });
}

void clattn_extend_plan_release(clattn_extend_plan plan) { delete plan; }

clattn_status clattn_extend_run(clattn_context ctx, clattn_extend_plan plan, const clattn_extend_buffers* b,
                                const clattn_enqueue* e) {
  return guard([&] {
    need(b, "buffers");
    clattn::ExtendBuffers x;
    x.q = b->q;
    x.k = b->k;
    x.v = b->v;
    x.page_ids = b->page_ids;
    x.o = b->o;
    x.lse = b->lse;
    x.sinks = b->sinks;
    x.custom_mask = b->custom_mask;
    x.k_scale = b->k_scale;
    x.v_scale = b->v_scale;
    x.workspace = b->workspace;
    x.k_scale_cache = b->k_scale_cache;
    x.v_scale_cache = b->v_scale_cache;
    x.k_head_scales = b->k_head_scales;
    x.v_head_scales = b->v_head_scales;
    clattn::extend_run(need(ctx, "ctx")->ctx, need(plan, "plan")->plan, x, to_cpp(e));
  });
}

clattn_status clattn_cascade_plan_create(clattn_context ctx, const clattn_csr* shared, const clattn_csr* unique,
                                         const clattn_paged_kv* cache, const clattn_extend_options* opt,
                                         clattn_cascade_plan* out) {
  return guard([&] {
    need(out, "out");
    *out = nullptr;
    need(ctx, "ctx");
    clattn::PagedCsr s = to_cpp(shared, "shared", true, true);
    clattn::PagedCsr u = to_cpp(unique, "unique", true);
    auto o = to_cpp_opt(opt, unique->batch_size);
    auto plan = clattn::cascade_plan(ctx->ctx, s, u, to_cpp(*need(cache, "cache")), o);
    *out = new clattn_cascade_plan_s{std::move(plan)};
  });
}

clattn_status clattn_cascade_tmp_bytes(clattn_cascade_plan plan, int64_t* tmp_o_bytes, int64_t* tmp_lse_bytes) {
  return guard([&] {
    const auto& p = need(plan, "plan")->plan;
    if (tmp_o_bytes) *tmp_o_bytes = p.tmp_o_bytes;
    if (tmp_lse_bytes) *tmp_lse_bytes = p.tmp_lse_bytes;
  });
}

clattn_status clattn_cascade_workspace_bytes(clattn_cascade_plan plan, int64_t* out) {
  return guard([&] { *need(out, "out") = need(plan, "plan")->plan.workspace_bytes; });
}

void clattn_cascade_plan_release(clattn_cascade_plan plan) { delete plan; }

clattn_status clattn_cascade_run(clattn_context ctx, clattn_cascade_plan plan, const clattn_cascade_buffers* b,
                                 const clattn_enqueue* e) {
  return guard([&] {
    need(b, "buffers");
    clattn::CascadeBuffers x;
    x.q = b->q;
    x.k_cache = b->k_cache;
    x.v_cache = b->v_cache;
    x.shared_page_ids = b->shared_page_ids;
    x.unique_page_ids = b->unique_page_ids;
    x.o = b->o;
    x.lse = b->lse;
    x.tmp_o = b->tmp_o;
    x.tmp_lse_shared = b->tmp_lse_shared;
    x.tmp_lse_unique = b->tmp_lse_unique;
    x.sinks = b->sinks;
    x.k_scale = b->k_scale;
    x.v_scale = b->v_scale;
    x.workspace = b->workspace;
    x.k_scale_cache = b->k_scale_cache;
    x.v_scale_cache = b->v_scale_cache;
    x.k_head_scales = b->k_head_scales;
    x.v_head_scales = b->v_head_scales;
    clattn::cascade_run(need(ctx, "ctx")->ctx, need(plan, "plan")->plan, x, to_cpp(e));
  });
}

}  // extern "C"
