#include "support/paged_cache.hpp"

#include <algorithm>
#include <numeric>

#include "reference/kv_formats_reference.hpp"

namespace clattn::test {

ShuffledPages shuffled_pages(const std::vector<int>& lens, int page_size, int spare_pages, Rng& rng) {
  const int P = page_size;
  ShuffledPages s;
  s.num_pages = spare_pages;
  for (int L : lens) s.num_pages += (L + P - 1) / P;
  std::vector<int32_t> perm(size_t(s.num_pages));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng.gen);
  s.csr.page_size = P;
  s.csr.kv_indptr = {0};
  size_t next = 0;
  for (int L : lens) {
    const int np = (L + P - 1) / P;
    s.pages.emplace_back(perm.begin() + ptrdiff_t(next), perm.begin() + ptrdiff_t(next + size_t(np)));
    next += size_t(np);
    const auto& pages = s.pages.back();
    for (int t = 0; t < L; ++t) s.slots.push_back(int64_t(pages[size_t(t / P)]) * P + t % P);
    s.csr.kv_indices.insert(s.csr.kv_indices.end(), pages.begin(), pages.end());
    s.csr.kv_indptr.push_back(int32_t(s.csr.kv_indices.size()));
    s.csr.kv_last_page_len.push_back(L - (np - 1) * P);
  }
  return s;
}

KVBuffers kv_buffers(const PagedKV& cache, uint8_t fill, uint8_t scale_fill) {
  KVBuffers b;
  b.cache = cache;
  b.bytes = size_t(cache.required_bytes()), b.scale_bytes = size_t(cache.scale_required_bytes());
  b.k = upload(std::vector<uint8_t>(b.bytes, fill)), b.v = upload(std::vector<uint8_t>(b.bytes, fill));
  if (b.scale_bytes) {
    b.k_scales = upload(std::vector<uint8_t>(b.scale_bytes, scale_fill));
    b.v_scales = upload(std::vector<uint8_t>(b.scale_bytes, scale_fill));
  }
  return b;
}

void append_rows(const KVBuffers& kv, const std::vector<double>& k, const std::vector<double>& v,
                 const std::vector<int64_t>& slots, const AppendKVArgs& scales) {
  auto dk = upload(pack(k, DType::F32)), dv = upload(pack(v, DType::F32));
  auto dslots = upload(slots);
  AppendKVArgs a;
  a.k = dk.get(), a.v = dv.get(), a.src_dtype = DType::F32, a.slot_mapping = dslots.get(), a.slot_dtype = DType::I64;
  a.num_tokens = int64_t(slots.size()), a.k_cache = kv.k.get(), a.v_cache = kv.v.get(), a.cache = kv.cache;
  a.k_scale_cache = kv.k_scales.get(), a.v_scale_cache = kv.v_scales.get();
  a.k_scale = scales.k_scale, a.v_scale = scales.v_scale;
  a.k_head_scales = scales.k_head_scales, a.v_head_scales = scales.v_head_scales;
  append_kv(ctx(), a);
  ctx().finish();
}

StoredKV stored(const KVBuffers& kv) {
  StoredKV s;
  s.k = download<uint8_t>(kv.k, kv.bytes), s.v = download<uint8_t>(kv.v, kv.bytes);
  s.k_scales = download<uint8_t>(kv.k_scales, kv.scale_bytes);
  s.v_scales = download<uint8_t>(kv.v_scales, kv.scale_bytes);
  return s;
}

int64_t row_offset(const PagedKV& c, int64_t slot, int head) {
  return slot / c.page_size * c.page_stride() + slot % c.page_size * c.token_stride() + head * c.head_stride();
}

int64_t scale_offset(const PagedKV& c, int64_t slot, int head) {
  return slot / c.page_size * c.scale_page_stride() + slot % c.page_size * c.scale_token_stride() +
         head * c.scale_head_stride();
}

double scale_at(const std::vector<uint8_t>& scales, int64_t i, DType dt) {
  const auto es = ptrdiff_t(dtype_size(dt));
  return unpack(std::vector<uint8_t>(scales.begin() + i * es, scales.begin() + (i + 1) * es), dt)[0];
}

void dequantized_row(const PagedKV& c, const std::vector<uint8_t>& bytes, const std::vector<uint8_t>& scales,
                     int64_t slot, int head, double* out) {
  const int64_t at = row_offset(c, slot, head), so = scale_offset(c, slot, head);
  if (c.dtype == DType::I8) {
    ref::int8_dequantize_row(reinterpret_cast<const int8_t*>(&bytes[size_t(at)]), c.head_dim,
                             float(scale_at(scales, so, c.scale_dtype)), out);
    return;
  }
  const int G = c.quant_group;
  std::vector<uint8_t> u(size_t(c.head_dim));
  ref::int4_unpack(&bytes[size_t(at / 2)], c.head_dim, u.data());
  for (int g = 0; g < c.head_dim / G; ++g)
    ref::int4_dequantize_group(&u[size_t(g * G)], G, float(scale_at(scales, so + 2 * g, c.scale_dtype)),
                               float(scale_at(scales, so + 2 * g + 1, c.scale_dtype)), out + g * G);
}

}  // namespace clattn::test
