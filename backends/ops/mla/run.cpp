// mla_run / mla_sparse_run (buffer-size checks, then enqueue only: the attention kernel, then
// the merge pass where the plan merges apart) and append_latent.
#include <cmath>

#include "backends/ops/merge_state.hpp"
#include "backends/ops/mla/mla_impl.hpp"
#include "clattn/sparse.hpp"

namespace clattn {

namespace {
using namespace ops::mla;
using detail::MlaPlanState;
using std::to_string;

// mla_run (sparse false) and mla_sparse_run (sparse true, with the plan's indices).
void run_plan(const Context& ctx, const MlaPlan& plan, const MlaBuffers& b, cl_mem indices, const Enqueue& e,
              bool sparse) {
  const MlaPlanState* st = plan.state_.get();
  const char* fn = sparse ? "mla_sparse_run" : "mla_run";  // (messages are built only on failure)
  if (!st)
    rt::invalid(std::string(fn) + ": empty plan (make one with " +
                (sparse ? "mla_sparse_decode_plan)" : "mla_decode_plan / mla_extend_plan)"));
  if (st->topk > 0 && !sparse)
    rt::invalid(std::string(fn) + ": the plan is a sparse decode plan (mla_sparse_decode_plan); run it with "
                                  "mla_sparse_run and its indices");
  if (st->topk == 0 && sparse)
    rt::invalid(std::string(fn) + ": the plan is not a sparse decode plan (make one with mla_sparse_decode_plan)");
  if (!(b.kv_scale > 0.0f) || !std::isfinite(b.kv_scale))
    rt::invalid(std::string(fn) + ": kv_scale = " + to_string(b.kv_scale) + ", must be finite and > 0");
  const bool i8 = st->cache.dtype == DType::I8;
  if (i8 && b.kv_scale != 1.0f)
    rt::invalid(std::string(fn) + ": kv_scale must be 1 for an int8 latent cache (each token carries its own "
                                  "scales; got " + to_string(b.kv_scale) + ")");
  const int T = st->T, H = st->H;
  cl_command_queue q = ops::queue_of(ctx, e);
  if (T > 0) {
    ops::require_buffer(b.q_nope, st->q_nope_bytes, "q_nope", {{T, H, kMlaCkvDim}, dtype_name(st->q_dtype)});
    ops::require_buffer(b.q_pe, st->q_pe_bytes, "q_pe", {{T, H, kMlaKpeDim}, dtype_name(st->q_dtype)});
    ops::require_buffer(b.o, st->o_bytes, "o", {{T, H, kMlaCkvDim}, dtype_name(st->o_dtype)});
    if (b.lse) ops::require_buffer(b.lse, st->lse_bytes, "lse", {{T, H}, "f32"});
    if (st->topk > 0) ops::require_buffer(indices, st->index_bytes, "indices", {{T, st->topk}, "i32"});
  }
  if (st->num_work > 0) {
    if (st->cache.num_pages > 0) {
      ops::require_buffer(b.ckv, st->ckv_bytes, "ckv",
                          {{st->cache.num_pages, st->cache.page_size}, dtype_name(st->cache.dtype), "latent cache "});
      if (!st->cache.single_buffer)
        ops::require_buffer(b.kpe, st->kpe_bytes, "kpe",
                            {{st->cache.num_pages, st->cache.page_size}, dtype_name(st->cache.dtype), "kpe cache "});
      if (i8) require_latent_scales(st->cache, b.scale_cache);
    }
    if (st->page_id_bytes > 0)
      ops::require_buffer(b.page_ids, st->page_id_bytes, "page_ids",
                          {{st->page_id_bytes / 4}, "i32", st->page_table ? "page_table " : "kv_indices "});
    if (st->workspace_bytes > 0)
      ops::require_buffer(b.workspace, st->workspace_bytes, "workspace",
                          {{st->num_partials, H, kMlaCkvDim}, "f32 partial states and their lse"});
  }
  ops::WaitList wl(e, st->upload);
  if (st->num_work == 0) {
    ops::enqueue_marker(q, wl.size(), wl.data(), e.event);
    return;
  }
  auto& c = rt::impl(ctx);
  cl_mem dummy = st->table;  // bound for unused optional buffers (never read or written)
  cl_mem ckv = b.ckv ? b.ckv : dummy;
  cl_mem kpe = st->cache.single_buffer ? ckv : (b.kpe ? b.kpe : dummy);
  cl_mem page_ids = b.page_ids ? b.page_ids : dummy;
  cl_mem lse = b.lse ? b.lse : dummy;
  cl_mem ws = st->workspace_bytes > 0 ? b.workspace : dummy;
  const bool merge = st->num_merges > 0 && !st->fuse;
  const size_t gws[1] = {size_t(st->num_work) * st->wg}, lws[1] = {st->wg};
  cl_event ev1 = nullptr;
  // The arguments every variant takes, then `tail`: the fused merge's (nv_mma_sync with
  // FUSE_MERGE), then the index list's (sparse builds), then the scale cache's (int8 latents).
  auto launch_with = [&](cl_uint nwait, const cl_event* wait, cl_event* ev, auto... tail) {
    st->attn_k->launch(q, 1, gws, lws, nwait, wait, ev, b.q_nope, b.q_pe, cl_int(st->q_dtype), ckv, kpe, page_ids,
                       st->table, cl_int(st->work_off), b.o, cl_int(st->o_dtype), lse, cl_int(b.lse != nullptr), ws,
                       cl_ulong(st->lse_off_floats), cl_int(H), cl_long(st->ckv_sp), cl_long(st->ckv_st),
                       cl_long(st->kpe_sp), cl_long(st->kpe_st), cl_long(st->kpe_base), cl_int(st->log2_page),
                       cl_float(st->q_scale * b.kv_scale), cl_float(b.kv_scale), cl_int(st->cache.num_pages),
                       c.faults, tail...);
  };
  auto launch_i8 = [&](cl_uint nwait, const cl_event* wait, cl_event* ev, auto... tail) {
    if (i8)
      launch_with(nwait, wait, ev, tail..., b.scale_cache, cl_long(st->cache.scale_page_stride()),
                  cl_long(st->cache.scale_token_stride()), cl_int(st->cache.scale_dtype == DType::F16));
    else
      launch_with(nwait, wait, ev, tail...);
  };
  auto launch_sparse = [&](cl_uint nwait, const cl_event* wait, cl_event* ev, auto... fused) {
    if (st->topk > 0) launch_i8(nwait, wait, ev, fused..., indices, cl_int(st->topk));
    else launch_i8(nwait, wait, ev, fused...);
  };
  if (st->fuse_kernel) {  // the counter arguments are passed even when this plan merges separately
    auto launch = [&](int counter_off, cl_uint nwait, const cl_event* wait, cl_event* ev) {
      launch_sparse(nwait, wait, ev, st->table, cl_int(st->merge_off), cl_int(st->pmap_off), cl_int(counter_off),
                    cl_int(st->n_hblk));
    };
    if (st->sets.per_set > 0) {
      st->sets.run(q, wl, e.event, launch);
      return;
    }
    launch(0, wl.size(), wl.data(), (merge || e.event) ? &ev1 : nullptr);
  } else {
    launch_sparse(wl.size(), wl.data(), (merge || e.event) ? &ev1 : nullptr);
  }
  if (!merge) {
    if (e.event) *e.event = ev1;
    return;
  }
  const int cb = ops::merge_col_blocks(c.profile, st->num_merges, H, kMlaCkvDim);
  ops::enqueue_merge(q, {st->merge_k, st->merge_wg, st->num_merges, cb, H, kMlaCkvDim, st->table, ws, st->merge_off,
                         uint64_t(st->lse_off_floats)},
                     ev1, e.event, b.o, st->o_dtype, lse, b.lse != nullptr, dummy, false);
}
}  // namespace

void mla_run(const Context& ctx, const MlaPlan& plan, const MlaBuffers& b, const Enqueue& e) {
  run_plan(ctx, plan, b, nullptr, e, false);
}

void mla_sparse_run(const Context& ctx, const MlaPlan& plan, const MlaBuffers& b, cl_mem indices, const Enqueue& e) {
  run_plan(ctx, plan, b, indices, e, true);
}

// ------------------------------------------------------------------------ append_latent
void append_latent(const Context& ctx, const AppendLatentArgs& a, const Enqueue& e) {
  auto& c = rt::impl(ctx);
  check_cache(a.cache, "cache");
  ops::require_io_dtype(a.src_dtype, "src_dtype");
  if (a.slot_dtype != DType::I32 && a.slot_dtype != DType::I64)
    rt::invalid("slot_dtype " + std::string(dtype_name(a.slot_dtype)) + " must be i32 or i64");
  if (a.num_tokens < 0) rt::invalid("num_tokens = " + to_string(a.num_tokens) + ", must be >= 0");
  if (!(a.scale > 0.0f) || !std::isfinite(a.scale)) rt::invalid("scale = " + to_string(a.scale) + ", must be > 0");
  const bool i8 = a.cache.dtype == DType::I8;
  if (i8 && a.scale != 1.0f)
    rt::invalid("append_latent: scale must be 1 for an int8 latent cache (each token gets its own scales; got " +
                to_string(a.scale) + ")");
  const int64_t s_ckv = a.src_stride_ckv ? a.src_stride_ckv : kMlaCkvDim;
  const int64_t s_kpe = a.src_stride_kpe ? a.src_stride_kpe : kMlaKpeDim;
  if (s_ckv < kMlaCkvDim || s_kpe < kMlaKpeDim)
    rt::invalid("src strides (" + to_string(s_ckv) + ", " + to_string(s_kpe) + ") must be >= 512 and >= 64");
  const CacheShape shape{a.cache.num_pages, a.cache.page_size};
  if (a.slot_mapping_host) {
    if (a.slot_dtype == DType::I32)
      validate_slot_mapping(static_cast<const int32_t*>(a.slot_mapping_host), a.num_tokens, shape);
    else
      validate_slot_mapping(static_cast<const int64_t*>(a.slot_mapping_host), a.num_tokens, shape);
  }
  cl_command_queue q = ops::queue_of(ctx, e);
  if (a.num_tokens > 0) {
    namespace ck = rt::checked;
    const int64_t ss = int64_t(dtype_size(a.src_dtype)), n = a.num_tokens;
    const int64_t ckv_bytes = ck::mul(ck::mul_add(n - 1, s_ckv, kMlaCkvDim, "ckv rows"), ss, "ckv bytes");
    const int64_t kpe_bytes = ck::mul(ck::mul_add(n - 1, s_kpe, kMlaKpeDim, "kpe rows"), ss, "kpe bytes");
    ops::require_buffer(a.ckv, ckv_bytes, "ckv", {{a.num_tokens, kMlaCkvDim}, dtype_name(a.src_dtype)});
    ops::require_buffer(a.kpe, kpe_bytes, "kpe", {{a.num_tokens, kMlaKpeDim}, dtype_name(a.src_dtype)});
    ops::require_buffer(a.slot_mapping, ck::mul(n, int64_t(dtype_size(a.slot_dtype)), "slot_mapping bytes"),
                        "slot_mapping", {{a.num_tokens}, dtype_name(a.slot_dtype)});
    if (a.cache.num_pages > 0) {
      const ops::Shape cache{{a.cache.num_pages, a.cache.page_size}, dtype_name(a.cache.dtype), "latent cache "};
      ops::require_buffer(a.ckv_cache, a.cache.ckv_required_bytes(), "ckv_cache", cache);
      if (!a.cache.single_buffer) ops::require_buffer(a.kpe_cache, a.cache.kpe_required_bytes(), "kpe_cache", cache);
      if (i8) require_latent_scales(a.cache, a.scale_cache);
    }
  }
  ops::WaitList wl(e, nullptr);
  if (a.num_tokens == 0 || a.cache.num_pages == 0) {
    ops::enqueue_marker(q, wl.size(), wl.data(), e.event);
    return;
  }
  const ops::BuiltVariant av = ops::select_and_build(c, "mla_append", {append_variant(c.profile, i8 ? "append_latent_i8" : "append_latent")});
  auto prog = av.program;
  const size_t wg = av.variant.wg;
  const size_t gws[1] = {size_t(rt::checked::mul(a.num_tokens, int64_t(wg), "append_latent work-items"))},
               lws[1] = {wg};
  cl_mem kc = a.cache.single_buffer ? a.ckv_cache : a.kpe_cache;
  if (i8) {
    prog->kernel("append_latent_i8")
        .launch(q, 1, gws, lws, wl.size(), wl.data(), e.event, a.ckv, a.kpe, cl_int(a.src_dtype), cl_long(s_ckv),
                cl_long(s_kpe), a.slot_mapping, cl_int(a.slot_dtype == DType::I64), cl_long(a.num_tokens),
                a.ckv_cache, kc, cl_long(a.cache.ckv_page_stride()), cl_long(a.cache.ckv_token_stride()),
                cl_long(a.cache.kpe_page_stride()), cl_long(a.cache.kpe_token_stride()), cl_long(a.cache.kpe_base()),
                cl_long(a.cache.page_size), cl_long(int64_t(a.cache.num_pages) * a.cache.page_size), a.scale_cache,
                cl_long(a.cache.scale_page_stride()), cl_long(a.cache.scale_token_stride()),
                cl_int(a.cache.scale_dtype == DType::F16), rt::impl(ctx).faults);
    return;
  }
  prog->kernel("append_latent")
      .launch(q, 1, gws, lws, wl.size(), wl.data(), e.event, a.ckv, a.kpe, cl_int(a.src_dtype), cl_long(s_ckv),
              cl_long(s_kpe), a.slot_mapping, cl_int(a.slot_dtype == DType::I64), cl_long(a.num_tokens), a.ckv_cache,
              kc, cl_int(a.cache.dtype), cl_long(a.cache.ckv_page_stride()), cl_long(a.cache.ckv_token_stride()),
              cl_long(a.cache.kpe_page_stride()), cl_long(a.cache.kpe_token_stride()), cl_long(a.cache.kpe_base()),
              cl_long(a.cache.page_size), cl_long(int64_t(a.cache.num_pages) * a.cache.page_size), cl_float(a.scale),
              rt::impl(ctx).faults);
}

}  // namespace clattn
