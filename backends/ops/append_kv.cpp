// append_kv: host checks (shapes, dtypes, buffer sizes, optional host slot validation),
// then one launch of cl_kernels/append_kv.cl over (element, token).
#include "backends/dispatch/catalog.hpp"
#include "backends/dispatch/variant.hpp"
#include "backends/ops/op_util.hpp"
#include "backends/params/database.hpp"
#include "clattn/append_kv.hpp"
#include "clattn/metadata.hpp"
#include "runtime/log.hpp"

namespace clattn {

namespace {

struct AppendProgram {
  ops::Variant v;
  int items = 1;
  std::string source;
};

// WG work-items per group, each storing APPEND_ITEMS elements: the row's parameter lowered to
// a divisor of D, so a work-item's run stays inside one head row.
// `kernel`: the entry point the call launches (each is checked against its own limit).
AppendProgram append_program(const DeviceProfile& prof, int D, const std::string& kernel = "append_kv") {
  params::Entry pe = params::lookup(prof, "append_kv");
  AppendProgram a;
  a.source = pe.source;
  const size_t wg = std::max<size_t>(1, std::min<size_t>(size_t(pe.get("APPEND_WG")), prof.max_work_group_size));
  a.items = std::max(1, std::min(int(pe.get("APPEND_ITEMS")), D));
  while (D % a.items) --a.items;
  const int items = a.items;
  a.v = ops::wg_variant("generic", "append_kv.cl", kernel, "APPEND_WG", int(wg), 1, [items](int w) {
    return rt::make_options({{"APPEND_WG", std::to_string(w)}, {"APPEND_ITEMS", std::to_string(items)}});
  });
  return a;
}

}  // namespace

namespace ops {
void catalog_append_kv(const CatalogTarget& t, std::vector<CatalogEntry>& out) {
  for (int d : {64, 80, 96, 128, 192, 256})
    catalog_add(out, "append_kv", "d" + std::to_string(d), [&] { return std::vector<Variant>{append_program(t.profile, d).v}; });
}
}  // namespace ops

namespace ops {
AppendChecked check_append_kv(const AppendKVArgs& a) {
  ops::check_paged_kv(a.cache, "cache", true, true);
  ops::require_io_dtype(a.src_dtype, "append_kv src_dtype");
  if (a.slot_dtype != DType::I32 && a.slot_dtype != DType::I64)
    rt::invalid("slot_mapping: dtype " + std::string(dtype_name(a.slot_dtype)) + ", must be i32 or i64");
  if (a.num_tokens < 0) rt::invalid("append_kv: num_tokens = " + std::to_string(a.num_tokens) + ", must be >= 0");
  if (!(a.k_scale > 0.0f) || !(a.v_scale > 0.0f))
    rt::invalid("append_kv: k_scale/v_scale must be > 0 (got " + std::to_string(a.k_scale) + ", " +
                std::to_string(a.v_scale) + ")");
  ops::check_kv_scales(a.cache, a.k_scale, a.v_scale, a.k_head_scales, a.v_head_scales, "append_kv");
  const int Hkv = a.cache.num_kv_heads, D = a.cache.head_dim;
  AppendChecked r;
  r.st = a.src_stride_token ? a.src_stride_token : int64_t(Hkv) * D;
  r.sh = a.src_stride_head ? a.src_stride_head : int64_t(D);
  if (r.st < 0 || r.sh < 0) rt::invalid("append_kv: negative source stride");
  r.empty = a.num_tokens == 0 || a.cache.num_pages == 0;
  if (r.empty) return r;
  const int64_t N = a.num_tokens;
  namespace ck = rt::checked;
  const char* what = "append_kv source rows ((num_tokens-1)*stride_token + (Hkv-1)*stride_head + D)";
  const size_t src_bytes = size_t(ck::mul(
      ck::add(ck::add(ck::mul(N - 1, r.st, what), ck::mul(int64_t(Hkv) - 1, r.sh, what), what), D, what),
      int64_t(dtype_size(a.src_dtype)), what));
  const ops::Shape src{{N, Hkv, D}, dtype_name(a.src_dtype)};
  ops::require_buffer(a.k, int64_t(src_bytes), "k", src);
  ops::require_buffer(a.v, int64_t(src_bytes), "v", src);
  ops::require_buffer(a.slot_mapping, ck::mul(N, int64_t(dtype_size(a.slot_dtype)), "slot_mapping bytes"),
                      "slot_mapping", {{N}, dtype_name(a.slot_dtype)});
  const ops::Shape cache{{a.cache.num_pages, a.cache.page_size, Hkv, D}, dtype_name(a.cache.dtype), "paged cache "};
  ops::require_buffer(a.k_cache, a.cache.required_bytes(), "k_cache", cache);
  ops::require_buffer(a.v_cache, a.cache.required_bytes(), "v_cache", cache);
  ops::require_scale_caches(a.cache, a.cache.scale_required_bytes(), a.k_scale_cache, a.v_scale_cache);
  if (a.slot_mapping_host) {
    CacheShape cs{a.cache.num_pages, a.cache.page_size};
    if (a.slot_dtype == DType::I32) validate_slot_mapping(static_cast<const int32_t*>(a.slot_mapping_host), N, cs);
    else validate_slot_mapping(static_cast<const int64_t*>(a.slot_mapping_host), N, cs);
  }
  return r;
}
}  // namespace ops

void append_kv(const Context& ctx, const AppendKVArgs& a, const Enqueue& e) {
  const ops::AppendChecked ch = ops::check_append_kv(a);
  const int Hkv = a.cache.num_kv_heads, D = a.cache.head_dim;
  const int64_t st = ch.st, sh = ch.sh, N = a.num_tokens;
  cl_command_queue q = ops::queue_of(ctx, e);
  if (ch.empty) {
    ops::marker_if_needed(q, e);
    return;
  }

  auto& c = rt::impl(ctx);
  const char* entry = a.cache.dtype == DType::I8 ? "append_kv_i8" : a.cache.dtype == DType::I4 ? "append_kv_i4" : "append_kv";
  const AppendProgram ap = append_program(c.profile, D, entry);
  const ops::BuiltVariant built = ops::select_and_build(c, "append_kv", {ap.v});
  const size_t wg = built.variant.wg;
  const int items = ap.items;
  auto prog = built.program;
  if (a.cache.dtype == DType::I8) {  // one work-item per (token, head) row: the row's max sets its scale
    rt::Kernel& k8 = prog->kernel("append_kv_i8");
    size_t g8[2] = {(size_t(Hkv) + wg - 1) / wg * wg, size_t(N)}, l8[2] = {wg, 1};
    k8.launch(q, 2, g8, l8, e.num_wait, e.wait, e.event, a.k, a.v, cl_int(a.src_dtype), cl_long(st), cl_long(sh),
              a.slot_mapping, cl_int(a.slot_dtype == DType::I64), cl_long(int64_t(a.cache.num_pages) * a.cache.page_size),
              a.k_cache, a.v_cache, cl_long(a.cache.page_stride()), cl_long(a.cache.token_stride()),
              cl_long(a.cache.head_stride()), cl_int(a.cache.page_size), cl_int(Hkv), cl_int(D), a.k_scale_cache,
              a.v_scale_cache, cl_long(a.cache.scale_page_stride()), cl_long(a.cache.scale_token_stride()),
              cl_long(a.cache.scale_head_stride()), cl_int(a.cache.scale_dtype == DType::F16), c.faults);
    return;
  }
  if (a.cache.dtype == DType::I4) {  // one work-item per (token, head) row, group by group
    rt::Kernel& k4 = prog->kernel("append_kv_i4");
    size_t g4[2] = {(size_t(Hkv) + wg - 1) / wg * wg, size_t(N)}, l4[2] = {wg, 1};
    k4.launch(q, 2, g4, l4, e.num_wait, e.wait, e.event, a.k, a.v, cl_int(a.src_dtype), cl_long(st), cl_long(sh),
              a.slot_mapping, cl_int(a.slot_dtype == DType::I64), cl_long(int64_t(a.cache.num_pages) * a.cache.page_size),
              a.k_cache, a.v_cache, cl_long(a.cache.page_stride()), cl_long(a.cache.token_stride()),
              cl_long(a.cache.head_stride()), cl_int(a.cache.page_size), cl_int(Hkv), cl_int(D),
              cl_int(a.cache.quant_group), a.k_scale_cache, a.v_scale_cache, cl_long(a.cache.scale_page_stride()),
              cl_long(a.cache.scale_token_stride()), cl_long(a.cache.scale_head_stride()),
              cl_int(a.cache.scale_dtype == DType::F16), c.faults);
    return;
  }
  rt::Kernel& k = prog->kernel("append_kv");
  const size_t items_per_token = size_t(Hkv) * D / size_t(items);
  size_t gws[2] = {(items_per_token + wg - 1) / wg * wg, size_t(N)}, lws[2] = {wg, 1};
  rt::log().debug("append_kv: {} tokens, {} -> {} cache, WG {} x {} elements ({})", N, dtype_name(a.src_dtype),
                  dtype_name(a.cache.dtype), wg, items, ap.source);
  k.launch(q, 2, gws, lws, e.num_wait, e.wait, e.event, a.k, a.v, cl_int(a.src_dtype), cl_long(st), cl_long(sh),
           a.slot_mapping, cl_int(a.slot_dtype == DType::I64), cl_long(int64_t(a.cache.num_pages) * a.cache.page_size),
           a.k_cache, a.v_cache, cl_int(a.cache.dtype), cl_long(a.cache.page_stride()), cl_long(a.cache.token_stride()),
           cl_long(a.cache.head_stride()), cl_int(a.cache.page_size), cl_int(Hkv), cl_int(D), a.k_scale, a.v_scale,
           a.k_head_scales ? a.k_head_scales : a.slot_mapping, a.v_head_scales ? a.v_head_scales : a.slot_mapping,
           cl_int(a.k_head_scales != nullptr), c.faults);
}

}  // namespace clattn
