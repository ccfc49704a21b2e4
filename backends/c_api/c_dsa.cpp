// C ABI: DSA (DeepSeek sparse attention) — the indexer's plans from CSR / page table, plan
// info and run; sparse MLA decode plans (clattn_mla_plan handles) and their run. Flat
// structs converted to clattn/sparse.hpp's.
#include "backends/c_api/c_mla.hpp"
#include "clattn/sparse.hpp"

static_assert(CLATTN_DSA_MAX_TOPK == clattn::kDsaMaxTopk, "clattn.h's CLATTN_DSA_MAX_TOPK is sparse.hpp's");

struct clattn_dsa_index_plan_s {
  clattn::DsaIndexPlan plan;
};

namespace {

using clattn::capi::need;
using clattn::capi::to_cpp;

clattn::DsaIndexOptions to_cpp_opt(const clattn_dsa_index_options* o) {
  need(o, "opt");
  clattn::DsaIndexOptions d;
  d.num_index_heads = o->num_index_heads;
  d.topk = o->topk;
  d.q_dtype = static_cast<clattn::DType>(o->q_dtype);
  d.validate = o->validate != 0;
  d.params = clattn::capi::parse_params(o->params, "opt.params");
  return d;
}

clattn::DsaIndexBuffers to_cpp(const clattn_dsa_index_buffers* b) {
  need(b, "buffers");
  clattn::DsaIndexBuffers x;
  x.q = b->q;
  x.weights = b->weights;
  x.k_cache = b->k_cache;
  x.page_ids = b->page_ids;
  x.indices = b->indices;
  x.scores = b->scores;
  x.workspace = b->workspace;
  x.k_scale = b->k_scale;
  return x;
}

template <class Meta, class CMeta>
clattn_status index_plan(clattn_context ctx, const CMeta* meta, const char* meta_name, const clattn_paged_kv* cache,
                         const clattn_dsa_index_options* opt, clattn_dsa_index_plan* out) {
  return clattn::capi::guard([&] {
    need(out, "out");
    *out = nullptr;
    need(ctx, "ctx");
    Meta m = to_cpp(meta, meta_name, false);
    auto p = clattn::dsa_index_plan(ctx->ctx, m, to_cpp(*need(cache, "index_cache")), to_cpp_opt(opt));
    *out = new clattn_dsa_index_plan_s{std::move(p)};
  });
}

// Decode metadata: qo_indptr / cu_seqlens_q passed through when given (all ones, checked by
// the planner), as for dense MLA decode.
template <class Meta, class CMeta>
clattn_status sparse_plan(clattn_context ctx, const CMeta* meta, const char* meta_name, const clattn_mla_cache* cache,
                          const clattn_mla_options* opt, int topk, clattn_mla_plan* out) {
  return clattn::capi::guard([&] {
    need(out, "out");
    *out = nullptr;
    need(ctx, "ctx");
    Meta m = to_cpp(meta, meta_name, true, true);
    auto c = clattn::capi::to_cpp_cache(*need(cache, "cache"));
    auto p = clattn::mla_sparse_decode_plan(ctx->ctx, m, c, clattn::capi::to_cpp_opt(opt), topk);
    *out = new clattn_mla_plan_s{std::move(p)};
  });
}

}  // namespace

using clattn::capi::guard;

extern "C" {

void clattn_dsa_index_options_init(clattn_dsa_index_options* o) {
  if (!o) return;
  *o = clattn_dsa_index_options{};
  o->q_dtype = int(clattn::DType::BF16);
  o->validate = 1;
}

clattn_status clattn_dsa_index_plan_csr(clattn_context ctx, const clattn_csr* csr, const clattn_paged_kv* index_cache,
                                        const clattn_dsa_index_options* opt, clattn_dsa_index_plan* out) {
  return index_plan<clattn::PagedCsr>(ctx, csr, "csr", index_cache, opt, out);
}

clattn_status clattn_dsa_index_plan_page_table(clattn_context ctx, const clattn_page_table* table,
                                               const clattn_paged_kv* index_cache,
                                               const clattn_dsa_index_options* opt, clattn_dsa_index_plan* out) {
  return index_plan<clattn::PageTable>(ctx, table, "table", index_cache, opt, out);
}

clattn_status clattn_dsa_index_plan_info_get(clattn_dsa_index_plan plan, clattn_dsa_index_plan_info* out) {
  return guard([&] {
    need(out, "out");
    const auto& p = need(plan, "plan")->plan;
    clattn_dsa_index_plan_info i{};
    i.batch_size = p.batch_size;
    i.num_index_heads = p.num_index_heads;
    i.index_dim = p.index_dim;
    i.page_size = p.page_size;
    i.topk = p.topk;
    i.page_table = p.page_table;
    i.max_kv_len = p.max_kv_len;
    i.page_ids_needed = p.page_ids_needed;
    i.workspace_bytes = p.workspace_bytes;
    clattn::capi::copy_str(i.variant, p.variant);
    *out = i;
  });
}

clattn_status clattn_dsa_index_plan_workspace_bytes(clattn_dsa_index_plan plan, int64_t* out) {
  return guard([&] { *need(out, "out") = need(plan, "plan")->plan.workspace_bytes; });
}

void clattn_dsa_index_plan_release(clattn_dsa_index_plan plan) { delete plan; }

clattn_status clattn_dsa_index_run(clattn_context ctx, clattn_dsa_index_plan plan, const clattn_dsa_index_buffers* b,
                                   const clattn_enqueue* e) {
  return guard([&] {
    const clattn::DsaIndexBuffers x = to_cpp(b);
    clattn::dsa_index_run(need(ctx, "ctx")->ctx, need(plan, "plan")->plan, x, to_cpp(e));
  });
}

clattn_status clattn_mla_sparse_decode_plan_csr(clattn_context ctx, const clattn_csr* csr,
                                                const clattn_mla_cache* cache, const clattn_mla_options* opt,
                                                int topk, clattn_mla_plan* out) {
  return sparse_plan<clattn::PagedCsr>(ctx, csr, "csr", cache, opt, topk, out);
}

clattn_status clattn_mla_sparse_decode_plan_page_table(clattn_context ctx, const clattn_page_table* table,
                                                       const clattn_mla_cache* cache, const clattn_mla_options* opt,
                                                       int topk, clattn_mla_plan* out) {
  return sparse_plan<clattn::PageTable>(ctx, table, "table", cache, opt, topk, out);
}

clattn_status clattn_mla_sparse_run(clattn_context ctx, clattn_mla_plan plan, const clattn_mla_buffers* b,
                                    cl_mem indices, const clattn_enqueue* e) {
  return guard([&] {
    const clattn::MlaBuffers x = to_cpp(b);
    clattn::mla_sparse_run(need(ctx, "ctx")->ctx, need(plan, "plan")->plan, x, indices, to_cpp(e));
  });
}

}  // extern "C"
