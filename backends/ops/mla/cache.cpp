// The latent cache's geometry (MlaCache's strides and byte sizes) and the checks every MLA
// entry point runs on it and on the options.
#include <algorithm>
#include <cmath>

#include "backends/ops/mla/mla_impl.hpp"

namespace clattn {

// ---- MlaCache: resolved strides (elements) ----
int64_t MlaCache::ckv_token_stride() const {
  return stride_token ? stride_token : (single_buffer ? kMlaCkvDim + kMlaKpeDim : kMlaCkvDim);
}
int64_t MlaCache::ckv_page_stride() const {
  return stride_page ? stride_page : rt::checked::mul(page_size, ckv_token_stride(), "latent cache page stride");
}
int64_t MlaCache::kpe_token_stride() const {
  if (kpe_stride_token) return kpe_stride_token;
  return single_buffer ? ckv_token_stride() : kMlaKpeDim;
}
int64_t MlaCache::kpe_page_stride() const {
  if (kpe_stride_page) return kpe_stride_page;
  return single_buffer ? ckv_page_stride() : rt::checked::mul(page_size, kpe_token_stride(), "kpe cache page stride");
}
int64_t MlaCache::kpe_base() const { return kpe_offset ? kpe_offset : (single_buffer ? kMlaCkvDim : 0); }
namespace {
// Elements up to the end of the last row of a paged buffer (checked: hostile strides are
// rejected rather than wrapped into a small size).
int64_t paged_extent(int64_t base, int num_pages, int64_t page_stride, int page_size, int64_t token_stride,
                     int64_t row, const char* what) {
  namespace ck = rt::checked;
  int64_t last = ck::add(base, ck::mul(int64_t(num_pages) - 1, page_stride, what), what);
  last = ck::add(last, ck::mul(int64_t(page_size) - 1, token_stride, what), what);
  return ck::add(last, row, what);
}
}  // namespace

int64_t MlaCache::ckv_required_bytes() const {
  if (num_pages <= 0 || page_size <= 0) return 0;
  const char* what = "MLA latent cache size";
  int64_t last = paged_extent(0, num_pages, ckv_page_stride(), page_size, ckv_token_stride(), kMlaCkvDim, what);
  if (single_buffer)
    last = std::max(last, paged_extent(kpe_base(), num_pages, kpe_page_stride(), page_size, kpe_token_stride(),
                                       kMlaKpeDim, what));
  return rt::checked::mul(last, int64_t(dtype_size(dtype)), what);
}
int64_t MlaCache::scale_token_stride() const { return scale_stride_token ? scale_stride_token : 2; }
int64_t MlaCache::scale_page_stride() const {
  return scale_stride_page ? scale_stride_page
                           : rt::checked::mul(page_size, scale_token_stride(), "latent scale cache page stride");
}
int64_t MlaCache::scale_required_bytes() const {
  if (dtype != DType::I8 || num_pages <= 0 || page_size <= 0) return 0;
  const char* what = "MLA latent scale cache size";
  const int64_t last = paged_extent(0, num_pages, scale_page_stride(), page_size, scale_token_stride(), 2, what);
  return rt::checked::mul(last, int64_t(dtype_size(scale_dtype)), what);
}
int64_t MlaCache::kpe_required_bytes() const {
  if (single_buffer || num_pages <= 0 || page_size <= 0) return 0;
  const char* what = "MLA kpe cache size";
  const int64_t last =
      paged_extent(kpe_base(), num_pages, kpe_page_stride(), page_size, kpe_token_stride(), kMlaKpeDim, what);
  return rt::checked::mul(last, int64_t(dtype_size(dtype)), what);
}

namespace ops::mla {

using std::to_string;

namespace {
bool mla_kv_dtype(DType t) {
  return t == DType::F32 || t == DType::F16 || t == DType::BF16 || t == DType::FP8_E4M3 || t == DType::FP8_E5M2 ||
         t == DType::I8;
}

// int8 latent: the scale cache's dtype and geometry (a pair per token that does not overlap
// the next token's).
void check_scale_cache(const MlaCache& c, const std::string& what) {
  if (c.scale_dtype != DType::F32 && c.scale_dtype != DType::F16)
    throw Error(Status::Unsupported, what + ".scale_dtype " + std::string(dtype_name(c.scale_dtype)) +
                                         " unsupported (f32, f16)");
  if (c.scale_stride_page < 0 || c.scale_stride_token < 0) rt::invalid(what + ": negative scale stride");
  if (c.page_size > 1 && c.scale_token_stride() < 2)
    rt::invalid(what + ".scale_stride_token = " + to_string(c.scale_token_stride()) +
                " < 2 (a token's pair of scales: ckv, kpe)");
  try {
    (void)c.scale_required_bytes();
  } catch (const Error& e) {
    rt::invalid(what + ": " + e.what());
  }
}

meta::RequestOptions request_options(const MlaOptions& opt, bool extend) {
  meta::RequestOptions o;
  o.queries = extend ? meta::Queries::Extend : meta::Queries::Decode, o.validate = opt.validate;
  o.allow_window = false;
  return o;
}
}  // namespace

void check_cache(const MlaCache& c, const std::string& what) {
  if (c.num_pages < 0) rt::invalid(what + ".num_pages = " + to_string(c.num_pages) + ", must be >= 0");
  if (!is_pow2(c.page_size) || c.page_size > 256)
    throw Error(Status::Unsupported, what + ".page_size = " + to_string(c.page_size) +
                                         " unsupported (powers of two 1..256; 1, 16, 32, 64 tested)");
  if (!mla_kv_dtype(c.dtype))
    throw Error(Status::Unsupported, what + ".dtype " + std::string(dtype_name(c.dtype)) +
                                         " unsupported (f16, bf16, fp8_e4m3, fp8_e5m2, int8, f32)");
  if (c.dtype == DType::I8) check_scale_cache(c, what);
  if (c.stride_page < 0 || c.stride_token < 0 || c.kpe_stride_page < 0 || c.kpe_stride_token < 0 || c.kpe_offset < 0)
    rt::invalid(what + ": negative stride or offset");
  const int64_t ckv_w = c.single_buffer ? kMlaCkvDim + kMlaKpeDim : kMlaCkvDim;
  if (c.page_size > 1 && c.ckv_token_stride() < ckv_w)
    rt::invalid(what + ".stride_token = " + to_string(c.ckv_token_stride()) + " < row width " + to_string(ckv_w));
  if (!c.single_buffer && c.page_size > 1 && c.kpe_token_stride() < kMlaKpeDim)
    rt::invalid(what + ".kpe_stride_token = " + to_string(c.kpe_token_stride()) + " < 64");
  if (c.single_buffer && c.kpe_base() < kMlaCkvDim)
    rt::invalid(what + ".kpe_offset = " + to_string(c.kpe_base()) + ": kpe would overlap ckv (single buffer)");
  try {
    (void)c.ckv_required_bytes(), (void)c.kpe_required_bytes();  // geometry whose byte size overflows
    const int64_t es = int64_t(dtype_size(c.dtype));
    for (int64_t s : {c.ckv_page_stride(), c.ckv_token_stride(), c.kpe_page_stride(), c.kpe_token_stride(),
                      c.kpe_base()})
      (void)rt::checked::mul(s, es, "stride bytes");
  } catch (const Error& e) {
    rt::invalid(what + ": " + e.what());
  }
}

void require_latent_scales(const MlaCache& c, cl_mem scale_cache) {
  ops::require_buffer(scale_cache, c.scale_required_bytes(), "scale_cache",
                      {{c.num_pages, c.page_size, 2}, dtype_name(c.scale_dtype), "latent scale cache (ckv, kpe) "});
}

void check_options(const MlaCache& cache, const MlaOptions& opt) {
  check_cache(cache, "cache");
  if (opt.num_heads < 1 || opt.num_heads > 1024)
    rt::invalid("num_heads = " + to_string(opt.num_heads) + ", must be in 1..1024");
  ops::require_io_dtype(opt.q_dtype, "q_dtype");
  ops::require_io_dtype(opt.o_dtype, "o_dtype");
  if (!(opt.sm_scale > 0.0f) || !std::isfinite(opt.sm_scale))
    rt::invalid("sm_scale = " + to_string(opt.sm_scale) + ": must be finite and > 0 (MLA has no default)");
  if (opt.max_splits < 0) rt::invalid("max_splits = " + to_string(opt.max_splits) + ", must be >= 0");
}

Requests requests_from_csr(const PagedCsr& csr, const MlaCache& cache, const MlaOptions& opt, bool extend) {
  return meta::requests_from_csr(csr, {cache.num_pages, cache.page_size}, request_options(opt, extend));
}
Requests requests_from_table(const PageTable& t, const MlaCache& cache, const MlaOptions& opt, bool extend) {
  return meta::requests_from_table(t, {cache.num_pages, cache.page_size}, request_options(opt, extend));
}

}  // namespace ops::mla
}  // namespace clattn
