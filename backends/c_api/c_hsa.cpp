// C ABI: HSA (hierarchical sparse attention) plans from CSR / page table, plan info, and the
// select / decode / run entry points; flat structs converted to clattn/sparse.hpp's.
#include "backends/c_api/c_api_common.hpp"
#include "clattn/sparse.hpp"

struct clattn_hsa_plan_s {
  clattn::HsaPlan plan;
};

namespace {

using clattn::capi::invalid;
using clattn::capi::need;
using clattn::capi::to_cpp;

clattn::HsaOptions to_cpp_opt(const clattn_hsa_options* o) {
  need(o, "opt");
  clattn::HsaOptions h;
  h.num_qo_heads = o->num_qo_heads;
  h.topk = o->topk;
  // Checked here: an int outside the enum is not a value the C++ options can hold portably.
  if (o->strategy != CLATTN_HSA_GROUP && o->strategy != CLATTN_HSA_HEAD)
    invalid("opt.strategy = " + std::to_string(o->strategy) + ", must be CLATTN_HSA_GROUP (0) or CLATTN_HSA_HEAD (1)");
  h.strategy = static_cast<clattn::HsaStrategy>(o->strategy);
  h.window_size = o->window_size;
  h.num_candidates = o->num_candidates;
  h.fuse_window = o->fuse_window != 0;
  h.q_dtype = static_cast<clattn::DType>(o->q_dtype);
  h.o_dtype = static_cast<clattn::DType>(o->o_dtype);
  h.sm_scale = o->sm_scale;
  h.logits_soft_cap = o->logits_soft_cap;
  h.max_splits = o->max_splits;
  h.validate = o->validate != 0;
  h.params = clattn::capi::parse_params(o->params, "opt.params");
  return h;
}

clattn::HsaBuffers to_cpp(const clattn_hsa_buffers* b) {
  need(b, "buffers");
  clattn::HsaBuffers x;
  x.q = b->q;
  x.k_cache = b->k_cache;
  x.v_cache = b->v_cache;
  x.page_ids = b->page_ids;
  x.selected_page_ids = b->selected_page_ids;
  x.selected_scores = b->selected_scores;
  x.candidates = b->candidates;
  x.candidate_mask = b->candidate_mask;
  x.o = b->o;
  x.lse = b->lse;
  x.sinks = b->sinks;
  x.workspace = b->workspace;
  x.k_scale = b->k_scale;
  x.v_scale = b->v_scale;
  return x;
}

template <class Meta, class CMeta>
clattn_status plan(clattn_context ctx, const CMeta* meta, const char* meta_name, const clattn_paged_kv* cache,
                   const clattn_hsa_options* opt, clattn_hsa_plan* out) {
  return clattn::capi::guard([&] {
    need(out, "out");
    *out = nullptr;
    need(ctx, "ctx");
    Meta m = to_cpp(meta, meta_name, false);
    auto p = clattn::hsa_plan(ctx->ctx, m, to_cpp(*need(cache, "cache")), to_cpp_opt(opt));
    *out = new clattn_hsa_plan_s{std::move(p)};
  });
}

using Op = void (*)(const clattn::Context&, const clattn::HsaPlan&, const clattn::HsaBuffers&, const clattn::Enqueue&);

clattn_status run(Op op, clattn_context ctx, clattn_hsa_plan plan, const clattn_hsa_buffers* b,
                  const clattn_enqueue* e) {
  return clattn::capi::guard([&] {
    const clattn::HsaBuffers x = to_cpp(b);
    op(need(ctx, "ctx")->ctx, need(plan, "plan")->plan, x, to_cpp(e));
  });
}

}  // namespace

using clattn::capi::guard;

extern "C" {

void clattn_hsa_options_init(clattn_hsa_options* o) {
  if (!o) return;
  *o = clattn_hsa_options{};
  o->strategy = CLATTN_HSA_GROUP;
  o->fuse_window = 1;
  o->q_dtype = o->o_dtype = int(clattn::DType::BF16);
  o->validate = 1;
}

clattn_status clattn_hsa_plan_csr(clattn_context ctx, const clattn_csr* csr, const clattn_paged_kv* cache,
                                  const clattn_hsa_options* opt, clattn_hsa_plan* out) {
  return plan<clattn::PagedCsr>(ctx, csr, "csr", cache, opt, out);
}

clattn_status clattn_hsa_plan_page_table(clattn_context ctx, const clattn_page_table* table,
                                         const clattn_paged_kv* cache, const clattn_hsa_options* opt,
                                         clattn_hsa_plan* out) {
  return plan<clattn::PageTable>(ctx, table, "table", cache, opt, out);
}

clattn_status clattn_hsa_plan_info_get(clattn_hsa_plan plan, clattn_hsa_plan_info* out) {
  return guard([&] {
    need(out, "out");
    const auto& p = need(plan, "plan")->plan;
    clattn_hsa_plan_info i{};
    i.batch_size = p.batch_size;
    i.num_qo_heads = p.num_qo_heads;
    i.num_kv_heads = p.num_kv_heads;
    i.head_dim = p.head_dim;
    i.page_size = p.page_size;
    i.topk = p.topk;
    i.num_sel_heads = p.num_sel_heads;
    i.strategy = int(p.strategy);
    i.window_size = p.window_size;
    i.fuse_window = p.fuse_window;
    i.max_candidates = p.max_candidates;
    i.num_work = p.num_work;
    i.num_partials = p.num_partials;
    i.num_merges = p.num_merges;
    i.page_ids_needed = p.page_ids_needed;
    i.workspace_bytes = p.workspace_bytes;
    clattn::capi::copy_str(i.select_variant, p.select_variant);
    clattn::capi::copy_str(i.decode_variant, p.decode_variant);
    *out = i;
  });
}

clattn_status clattn_hsa_plan_workspace_bytes(clattn_hsa_plan plan, int64_t* out) {
  return guard([&] { *need(out, "out") = need(plan, "plan")->plan.workspace_bytes; });
}

clattn_status clattn_hsa_plan_num_candidates(clattn_hsa_plan plan, int32_t* out, int64_t capacity) {
  return guard([&] {
    const auto& n = need(plan, "plan")->plan.num_candidates;
    if (capacity < int64_t(n.size()))
      invalid("capacity = " + std::to_string(capacity) + ": the plan has " + std::to_string(n.size()) + " requests");
    if (!n.empty()) std::copy(n.begin(), n.end(), need(out, "out"));
  });
}

void clattn_hsa_plan_release(clattn_hsa_plan plan) { delete plan; }

clattn_status clattn_hsa_select(clattn_context ctx, clattn_hsa_plan plan, const clattn_hsa_buffers* b,
                                const clattn_enqueue* e) {
  return run(clattn::hsa_select, ctx, plan, b, e);
}

clattn_status clattn_hsa_decode(clattn_context ctx, clattn_hsa_plan plan, const clattn_hsa_buffers* b,
                                const clattn_enqueue* e) {
  return run(clattn::hsa_decode, ctx, plan, b, e);
}

clattn_status clattn_hsa_run(clattn_context ctx, clattn_hsa_plan plan, const clattn_hsa_buffers* b,
                             const clattn_enqueue* e) {
  return run(clattn::hsa_run, ctx, plan, b, e);
}

}  // extern "C"
