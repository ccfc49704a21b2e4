// C ABI: MLA decode/extend plans and run, append_latent, absorption GEMMs.
#include "backends/c_api/c_mla.hpp"

namespace {

using clattn::capi::need;
using clattn::capi::to_cpp;
using clattn::capi::to_cpp_cache;
using clattn::capi::to_cpp_opt;

// One plan entry point for the four (decode/extend x CSR/page table) C functions.
template <class Meta, class CMeta>
clattn_status plan(clattn_context ctx, const CMeta* meta, const char* meta_name, bool extend,
                   const clattn_mla_cache* cache, const clattn_mla_options* opt, clattn_mla_plan* out) {
  return clattn::capi::guard([&] {
    need(out, "out");
    *out = nullptr;
    need(ctx, "ctx");
    // Decode accepts qo_indptr / cu_seqlens_q of all ones, so pass them through when given.
    Meta m = to_cpp(meta, meta_name, true, !extend);
    auto c = to_cpp_cache(*need(cache, "cache"));
    auto o = to_cpp_opt(opt);
    clattn::MlaPlan p = extend ? clattn::mla_extend_plan(ctx->ctx, m, c, o) : clattn::mla_decode_plan(ctx->ctx, m, c, o);
    *out = new clattn_mla_plan_s{std::move(p)};
  });
}

}  // namespace

using clattn::capi::guard;

extern "C" {

clattn_status clattn_mla_cache_bytes(const clattn_mla_cache* cache, int64_t* ckv_bytes, int64_t* kpe_bytes) {
  return guard([&] {
    auto c = to_cpp_cache(*need(cache, "cache"));
    if (ckv_bytes) *ckv_bytes = c.ckv_required_bytes();
    if (kpe_bytes) *kpe_bytes = c.kpe_required_bytes();
  });
}

clattn_status clattn_mla_scale_cache_bytes(const clattn_mla_cache* cache, int64_t* out) {
  return guard([&] { *need(out, "out") = to_cpp_cache(*need(cache, "cache")).scale_required_bytes(); });
}

void clattn_mla_options_init(clattn_mla_options* o) {
  if (!o) return;
  *o = clattn_mla_options{};
  o->q_dtype = o->o_dtype = int(clattn::DType::BF16);
  o->causal = 1;
  o->validate = 1;
}

clattn_status clattn_mla_decode_plan_csr(clattn_context ctx, const clattn_csr* csr, const clattn_mla_cache* cache,
                                         const clattn_mla_options* opt, clattn_mla_plan* out) {
  return plan<clattn::PagedCsr>(ctx, csr, "csr", false, cache, opt, out);
}
clattn_status clattn_mla_decode_plan_page_table(clattn_context ctx, const clattn_page_table* table,
                                                const clattn_mla_cache* cache, const clattn_mla_options* opt,
                                                clattn_mla_plan* out) {
  return plan<clattn::PageTable>(ctx, table, "table", false, cache, opt, out);
}
clattn_status clattn_mla_extend_plan_csr(clattn_context ctx, const clattn_csr* csr, const clattn_mla_cache* cache,
                                         const clattn_mla_options* opt, clattn_mla_plan* out) {
  return plan<clattn::PagedCsr>(ctx, csr, "csr", true, cache, opt, out);
}
clattn_status clattn_mla_extend_plan_page_table(clattn_context ctx, const clattn_page_table* table,
                                                const clattn_mla_cache* cache, const clattn_mla_options* opt,
                                                clattn_mla_plan* out) {
  return plan<clattn::PageTable>(ctx, table, "table", true, cache, opt, out);
}

clattn_status clattn_mla_plan_workspace_bytes(clattn_mla_plan plan, int64_t* out) {
  return guard([&] { *need(out, "out") = need(plan, "plan")->plan.workspace_bytes; });
}

void clattn_mla_plan_release(clattn_mla_plan plan) { delete plan; }

clattn_status clattn_mla_run(clattn_context ctx, clattn_mla_plan plan, const clattn_mla_buffers* b,
                             const clattn_enqueue* e) {
  return guard([&] {
    const clattn::MlaBuffers x = to_cpp(b);
    clattn::mla_run(need(ctx, "ctx")->ctx, need(plan, "plan")->plan, x, to_cpp(e));
  });
}

clattn_status clattn_append_latent(clattn_context ctx, const clattn_append_latent_args* a, const clattn_enqueue* e) {
  return guard([&] {
    need(a, "args");
    clattn::AppendLatentArgs x;
    x.ckv = a->ckv;
    x.kpe = a->kpe;
    x.src_dtype = static_cast<clattn::DType>(a->src_dtype);
    x.src_stride_ckv = a->src_stride_ckv;
    x.src_stride_kpe = a->src_stride_kpe;
    x.slot_mapping = a->slot_mapping;
    x.slot_dtype = static_cast<clattn::DType>(a->slot_dtype);
    x.num_tokens = a->num_tokens;
    x.slot_mapping_host = a->slot_mapping_host;
    x.ckv_cache = a->ckv_cache;
    x.kpe_cache = a->kpe_cache;
    x.cache = to_cpp_cache(a->cache);
    x.scale = a->scale;
    x.scale_cache = a->scale_cache;
    clattn::append_latent(need(ctx, "ctx")->ctx, x, to_cpp(e));
  });
}

void clattn_absorb_args_init(clattn_absorb_args* a) {
  if (!a) return;
  *a = clattn_absorb_args{};
  a->dtype = int(clattn::DType::F32);
  a->alpha = 1.0f;
}

clattn_status clattn_mla_absorb(clattn_context ctx, const clattn_absorb_args* a, const clattn_enqueue* e) {
  return guard([&] {
    need(a, "args");
    clattn::AbsorbArgs x;
    x.num_tokens = a->num_tokens;
    x.num_heads = a->num_heads;
    x.in_dim = a->in_dim;
    x.out_dim = a->out_dim;
    x.dtype = static_cast<clattn::DType>(a->dtype);
    x.x = a->x;
    x.w = a->w;
    x.y = a->y;
    x.x_row_stride = a->x_row_stride;
    x.y_row_stride = a->y_row_stride;
    x.w_transposed = a->w_transposed != 0;
    x.alpha = a->alpha;
    clattn::mla_absorb(need(ctx, "ctx")->ctx, x, to_cpp(e));
  });
}

clattn_status clattn_mla_absorb_warmup(clattn_context ctx, int f32, int f16, int* available) {
  return guard([&] {
    bool ok = clattn::mla_absorb_warmup(need(ctx, "ctx")->ctx, f32 != 0, f16 != 0);
    if (available) *available = ok;
  });
}

}  // extern "C"
