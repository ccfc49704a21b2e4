// C ABI for the attention ops: flat structs converted to the C++ API's, plans as handles.
#include <vector>

#include "backends/c_api/c_api_common.hpp"
#include "clattn/ops.hpp"

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
    clattn::decode_run(need(ctx, "ctx")->ctx, need(plan, "plan")->plan, d, to_cpp(e));
  });
}

clattn_status clattn_append_kv(clattn_context ctx, const clattn_append_kv_args* a, const clattn_enqueue* e) {
  return guard([&] {
    need(a, "args");
    clattn::AppendKVArgs x;
    x.k = a->k;
    x.v = a->v;
    x.src_dtype = static_cast<clattn::DType>(a->src_dtype);
    x.src_stride_token = a->src_stride_token;
    x.src_stride_head = a->src_stride_head;
    x.slot_mapping = a->slot_mapping;
    x.slot_dtype = static_cast<clattn::DType>(a->slot_dtype);
    x.num_tokens = a->num_tokens;
    x.slot_mapping_host = a->slot_mapping_host;
    x.k_cache = a->k_cache;
    x.v_cache = a->v_cache;
    x.cache = to_cpp(a->cache);
    x.k_scale = a->k_scale;
    x.v_scale = a->v_scale;
    clattn::append_kv(need(ctx, "ctx")->ctx, x, to_cpp(e));
  });
}

clattn_status clattn_merge_state(clattn_context ctx, cl_mem v_a, cl_mem s_a, cl_mem v_b, cl_mem s_b, cl_mem v_out,
                                 cl_mem s_out, int num_tokens, int num_heads, int head_dim, int dtype,
                                 const clattn_enqueue* e) {
  return guard([&] {
    clattn::MergeStateArgs m;
    m.v_a = v_a;
    m.s_a = s_a;
    m.v_b = v_b;
    m.s_b = s_b;
    m.v_out = v_out;
    m.s_out = s_out;
    m.num_tokens = num_tokens;
    m.num_heads = num_heads;
    m.head_dim = head_dim;
    m.dtype = static_cast<clattn::DType>(dtype);
    clattn::merge_state(need(ctx, "ctx")->ctx, m, to_cpp(e));
  });
}

clattn_status clattn_merge_states(clattn_context ctx, cl_mem v, cl_mem s, cl_mem v_out, cl_mem s_out, int num_tokens,
                                  int num_states, int num_heads, int head_dim, int dtype, const clattn_enqueue* e) {
  return guard([&] {
    clattn::MergeStatesArgs m;
    m.v = v;
    m.s = s;
    m.v_out = v_out;
    m.s_out = s_out;
    m.num_tokens = num_tokens;
    m.num_states = num_states;
    m.num_heads = num_heads;
    m.head_dim = head_dim;
    m.dtype = static_cast<clattn::DType>(dtype);
    clattn::merge_states(need(ctx, "ctx")->ctx, m, to_cpp(e));
  });
}

}  // extern "C"
