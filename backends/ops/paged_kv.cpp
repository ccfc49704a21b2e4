// The paged K/V cache descriptor (clattn/paged_kv.hpp): its resolved strides and byte
// size, and the check every op runs on a descriptor before anything is enqueued.
#include "backends/ops/op_util.hpp"

namespace clattn {

// ---- PagedKV: resolved strides (elements) ----
int64_t PagedKV::head_stride() const {
  if (stride_head) return stride_head;
  return layout == KVLayout::NHD ? int64_t(head_dim) : rt::checked::mul(page_size, head_dim, "cache head stride");
}
int64_t PagedKV::token_stride() const {
  if (stride_token) return stride_token;
  return layout == KVLayout::NHD ? rt::checked::mul(num_kv_heads, head_dim, "cache token stride") : int64_t(head_dim);
}
int64_t PagedKV::page_stride() const {
  if (stride_page) return stride_page;
  return rt::checked::product({page_size, num_kv_heads, head_dim}, "cache page stride");
}
int64_t PagedKV::required_bytes() const {
  if (num_pages <= 0 || page_size <= 0 || num_kv_heads <= 0 || head_dim <= 0) return 0;
  // Checked: a stride near 2^63 must not wrap into a small size that a real buffer passes.
  namespace ck = rt::checked;
  const char* what = "paged cache size ((num_pages-1)*stride_page + (page_size-1)*stride_token + "
                     "(num_kv_heads-1)*stride_head + head_dim elements)";
  int64_t last = ck::mul(int64_t(num_pages) - 1, page_stride(), what);
  last = ck::add(last, ck::mul(int64_t(page_size) - 1, token_stride(), what), what);
  last = ck::add(last, ck::mul(int64_t(num_kv_heads) - 1, head_stride(), what), what);
  last = ck::add(last, head_dim, what);
  if (dtype == DType::I4) return last / 2 + last % 2;  // two elements a byte
  return ck::mul(last, int64_t(dtype_size(dtype)), what);
}

namespace {
bool quantised(DType t) { return t == DType::I8 || t == DType::I4; }
// Scale-cache elements one (token, head) owns: int8 one scale, int4 a [scale, zero] pair per
// group (a group size that does not divide head_dim is rejected by check_paged_kv).
int64_t scale_row(const PagedKV& c) {
  if (c.dtype != DType::I4) return 1;
  return c.quant_group > 0 ? 2 * int64_t(c.head_dim / c.quant_group) : 2;
}
}  // namespace

// ---- int8 / int4 scale caches ----
int64_t PagedKV::scale_head_stride() const {
  if (scale_stride_head) return scale_stride_head;
  return layout == KVLayout::NHD ? scale_row(*this) : rt::checked::mul(page_size, scale_row(*this), "scale cache head stride");
}
int64_t PagedKV::scale_token_stride() const {
  if (scale_stride_token) return scale_stride_token;
  return layout == KVLayout::NHD ? rt::checked::mul(num_kv_heads, scale_row(*this), "scale cache token stride")
                                 : scale_row(*this);
}
int64_t PagedKV::scale_page_stride() const {
  if (scale_stride_page) return scale_stride_page;
  return rt::checked::product({page_size, num_kv_heads, scale_row(*this)}, "scale cache page stride");
}
int64_t PagedKV::scale_required_bytes() const {
  if (!quantised(dtype) || num_pages <= 0 || page_size <= 0 || num_kv_heads <= 0) return 0;
  namespace ck = rt::checked;
  const char* what = "scale cache size";
  int64_t last = ck::mul(int64_t(num_pages) - 1, scale_page_stride(), what);
  last = ck::add(last, ck::mul(int64_t(page_size) - 1, scale_token_stride(), what), what);
  last = ck::add(last, ck::mul(int64_t(num_kv_heads) - 1, scale_head_stride(), what), what);
  return ck::mul(ck::add(last, scale_row(*this), what), int64_t(dtype_size(scale_dtype)), what);
}

namespace ops {

void check_kv_scales(const PagedKV& c, float k_scale, float v_scale, cl_mem k_head_scales, cl_mem v_head_scales,
                     const std::string& fn) {
  const std::string dt = dtype_name(c.dtype);
  if (quantised(c.dtype) && (k_scale != 1.0f || v_scale != 1.0f))
    rt::invalid(fn + ": k_scale/v_scale must be 1 for an " + dt + " cache (each row carries its own scales; got " +
                std::to_string(k_scale) + ", " + std::to_string(v_scale) + ")");
  if (!k_head_scales != !v_head_scales)
    rt::invalid(fn + ": k_head_scales and v_head_scales go together (one is null)");
  if (!k_head_scales) return;
  if (quantised(c.dtype))
    rt::invalid(fn + ": k_head_scales/v_head_scales with an " + dt + " cache (its rows carry their own scales)");
  const Shape hs{{c.num_kv_heads}, "f32"};
  require_buffer(k_head_scales, int64_t(c.num_kv_heads) * 4, "k_head_scales", hs);
  require_buffer(v_head_scales, int64_t(c.num_kv_heads) * 4, "v_head_scales", hs);
}

void require_scale_caches(const PagedKV& c, int64_t bytes, cl_mem k_scale_cache, cl_mem v_scale_cache) {
  if (!quantised(c.dtype)) return;
  const Shape sc = c.dtype == DType::I4
                       ? Shape{{c.num_pages, c.page_size, c.num_kv_heads, scale_row(c)}, dtype_name(c.scale_dtype),
                               "scale cache ([scale, zero] per group) "}
                       : Shape{{c.num_pages, c.page_size, c.num_kv_heads}, dtype_name(c.scale_dtype), "scale cache "};
  require_buffer(k_scale_cache, bytes, "k_scale_cache", sc);
  require_buffer(v_scale_cache, bytes, "v_scale_cache", sc);
}

void check_paged_kv(const PagedKV& c, const std::string& what, bool allow_int8, bool allow_int4) {
  if (c.num_pages < 0) rt::invalid(what + ".num_pages = " + std::to_string(c.num_pages) + ", must be >= 0");
  if (c.page_size < 1) rt::invalid(what + ".page_size = " + std::to_string(c.page_size) + ", must be >= 1");
  if (c.num_kv_heads < 1) rt::invalid(what + ".num_kv_heads = " + std::to_string(c.num_kv_heads) + ", must be >= 1");
  if (c.head_dim < 1) rt::invalid(what + ".head_dim = " + std::to_string(c.head_dim) + ", must be >= 1");
  const std::string dt = dtype_name(c.dtype);
  if ((c.dtype == DType::I8 && !allow_int8) || (c.dtype == DType::I4 && !allow_int4))
    throw Error(Status::Unsupported, what + ".dtype " + dt + ": this op does not read " + dt +
                                         " caches yet (append_kv, decode, extend and cascade do; "
                                         "docs/kv_formats.md)");
  if (!is_kv_dtype(c.dtype) && !quantised(c.dtype))
    throw Error(Status::Unsupported, what + ".dtype " + dt + " unsupported (f32, f16, bf16, fp8_e4m3, fp8_e5m2, int8, int4)");
  if (c.dtype == DType::I4) {
    const int g = c.quant_group;
    if ((g != 32 && g != 64 && g != 128) || c.head_dim % g)
      rt::invalid(what + ".quant_group = " + std::to_string(g) + ": int4 takes 32, 64 or 128, dividing head_dim " +
                  std::to_string(c.head_dim));
    // Rows start on a byte: the nibble strides are even.
    for (auto [s, name] : {std::pair<int64_t, const char*>{c.stride_page, "stride_page"},
                           {c.stride_token, "stride_token"}, {c.stride_head, "stride_head"}})
      if (s % 2)
        rt::invalid(what + "." + name + " = " + std::to_string(s) + ": int4 strides (elements) must be even");
  }
  if (quantised(c.dtype)) {
    if (c.scale_dtype != DType::F32 && c.scale_dtype != DType::F16)
      throw Error(Status::Unsupported, what + ".scale_dtype " + std::string(dtype_name(c.scale_dtype)) +
                                           " unsupported (f32, f16)");
    if (c.scale_stride_page < 0 || c.scale_stride_token < 0 || c.scale_stride_head < 0)
      rt::invalid(what + ": negative scale stride");
    try {
      (void)c.scale_required_bytes();
    } catch (const Error& e) {
      rt::invalid(what + ": " + e.what());
    }
    if (c.scale_head_stride() < scale_row(c) && c.num_kv_heads > 1)
      rt::invalid(what + ".scale_stride_head must be >= " + std::to_string(scale_row(c)) +
                  (c.dtype == DType::I4 ? " (a [scale, zero] pair per group)" : ""));
  }
  if (c.stride_page < 0 || c.stride_token < 0 || c.stride_head < 0)
    rt::invalid(what + ": negative stride");
  try {
    // The geometry's byte size, and each stride in bytes (kernels and alignment checks
    // use them even where a single page never steps over one), must fit int64.
    (void)c.required_bytes();
    const int64_t es = int64_t(dtype_size(c.dtype));
    for (int64_t s : {c.page_stride(), c.token_stride(), c.head_stride()}) (void)rt::checked::mul(s, es, "stride bytes");
  } catch (const Error& e) {
    rt::invalid(what + ": " + e.what());
  }
  // Rows of different (token, head) must not overlap: each stride covers what it steps over.
  if (c.head_stride() < c.head_dim && c.num_kv_heads > 1)
    rt::invalid(what + ".stride_head = " + std::to_string(c.head_stride()) + " < head_dim " + std::to_string(c.head_dim));
}

}  // namespace ops
}  // namespace clattn
