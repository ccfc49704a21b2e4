// The request view shared by the paged ops (requests.hpp). Full validation lives in
// validate.cpp; this file holds the O(B) checks of the hot path and the conversion.
#include "backends/metadata/requests.hpp"

#include <limits>
#include <string>

#include "backends/metadata/checks.hpp"
#include "runtime/error.hpp"

namespace clattn::meta {

namespace {

std::string num(int64_t v) { return std::to_string(v); }
constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();

}  // namespace

void fill_queries(KVRequests& r, const std::vector<int32_t>& indptr, const char* field, Queries q) {
  const int B = r.size();
  r.qo_start.resize(size_t(B)), r.qo_len.resize(size_t(B));
  if (q == Queries::Decode) {
    if (!indptr.empty()) {
      const std::vector<int32_t> len = indptr_lengths(indptr, B, field);
      for (int i = 0; i < B; ++i)
        if (len[size_t(i)] != 1)
          bad(field, i + 1, indptr[size_t(i) + 1], req(i),
              "the request has " + num(len[size_t(i)]) + " query rows; decode takes exactly one per request");
    }
    for (int i = 0; i < B; ++i) r.qo_start[size_t(i)] = i, r.qo_len[size_t(i)] = 1;
    r.num_tokens = B;
    return;
  }
  if (indptr.empty()) bad_field(field, "empty; extend needs [batch_size + 1] query offsets");
  r.qo_len = indptr_lengths(indptr, B, field);
  for (int i = 0; i < B; ++i) {
    r.qo_start[size_t(i)] = indptr[size_t(i)];
    if (q == Queries::Extend && r.qo_len[size_t(i)] > r.kv_len[size_t(i)])
      bad(field, i + 1, indptr[size_t(i) + 1], req(i),
          "qo_len = " + num(r.qo_len[size_t(i)]) + " exceeds kv_len = " + num(r.kv_len[size_t(i)]) +
              " (the new rows must be in the cache)");
  }
  r.num_tokens = B ? indptr[size_t(B)] : 0;
}

namespace {

// Keys need pages: the kernels' masked and clamped loads read inside the pool.
void require_pages(const KVRequests& r, const CacheShape& cache) {
  if (cache.num_pages > 0) return;
  for (int i = 0; i < r.size(); ++i)
    if (r.kv_len[size_t(i)] > 0)
      bad_value("cache.num_pages", cache.num_pages,
                req(i) + " has " + num(r.kv_len[size_t(i)]) + " keys; keys need a cache of at least one page");
}

// O(B): kv_indptr from 0 and non-decreasing, kv_last_page_len in 1..P for requests with
// pages, start offsets in 0..P-1, key counts that fit int32.
void check_csr_shape(const PagedCsr& c, KVRequests& r) {
  const int B = c.batch_size(), P = c.page_size;
  const std::vector<int32_t> pages = indptr_lengths(c.kv_indptr, B, "kv_indptr");
  for (int i = 0; i < B; ++i) {
    const int64_t n = pages[size_t(i)];
    const int last = c.kv_last_page_len[size_t(i)];
    const int off = c.windowed() ? c.kv_start_offset[size_t(i)] : 0;
    if (n == 0) {
      r.kv_len[size_t(i)] = 0;
      continue;
    }
    if (last < 1 || last > P) bad("kv_last_page_len", i, last, req(i), "must be in 1.." + num(P) + " (page_size)");
    if (off < 0 || off >= P) bad("kv_start_offset", i, off, req(i), "must be in 0.." + num(P - 1));
    const int64_t keys = (n - 1) * P + last - off;
    if (keys < 1) bad("kv_start_offset", i, off, req(i), "leaves no keys");
    if (keys > kInt32Max) bad("kv_indptr", i + 1, c.kv_indptr[size_t(i) + 1], req(i), num(keys) + " keys exceed int32");
    r.kv_len[size_t(i)] = int32_t(keys);
  }
}

}  // namespace

std::vector<int32_t> indptr_lengths(const std::vector<int32_t>& indptr, int n, const char* field) {
  if (indptr.size() != size_t(n) + 1)
    bad_field(field, "has " + num(int64_t(indptr.size())) + " entries, needs batch_size + 1 = " + num(int64_t(n) + 1));
  if (indptr[0] != 0) bad(field, 0, indptr[0], "", "must be 0");
  std::vector<int32_t> len(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    const int64_t d = int64_t(indptr[size_t(i) + 1]) - indptr[size_t(i)];
    if (d < 0)
      bad(field, i + 1, indptr[size_t(i) + 1], req(i),
          "decreases from " + std::string(field) + "[" + num(i) + "] = " + num(indptr[size_t(i)]));
    len[size_t(i)] = int32_t(d);  // 0 <= d <= INT32_MAX: the array starts at 0 and never decreases
  }
  return len;
}

KVRequests requests_from_csr(const PagedCsr& csr, const CacheShape& cache, const RequestOptions& o) {
  if (csr.page_size != cache.page_size)
    bad_value("csr.page_size", csr.page_size, "differs from cache.page_size = " + num(cache.page_size));
  const int B = csr.batch_size();
  if (csr.kv_indptr.size() != size_t(B) + 1)
    bad_field("kv_indptr", "has " + num(int64_t(csr.kv_indptr.size())) + " entries, needs batch_size + 1 = " +
                               num(int64_t(B) + 1) + " (batch_size from kv_last_page_len)");
  if (csr.windowed() && !o.allow_window)
    throw Error(Status::Unsupported, "kv_start_offset: a windowed CSR is not supported by this op");
  if (csr.windowed() && csr.kv_start_offset.size() != size_t(B))
    bad_field("kv_start_offset", "has " + num(int64_t(csr.kv_start_offset.size())) + " entries, needs batch_size = " +
                                     num(B) + " (or none: no window)");
  KVRequests r;
  r.kv_len.resize(size_t(B));
  if (o.validate) {
    // Given: the CSR's own qo_indptr is not the one that counts; Decode: fill_queries holds it
    // to one row per request (an empty request included), not to extend's qo_len <= kv_len.
    if (o.queries != Queries::Extend) {
      PagedCsr kv_only = csr;
      kv_only.qo_indptr.clear();
      validate(kv_only, cache, nullptr);
    } else {
      validate(csr, cache, nullptr);
    }
    for (int i = 0; i < B; ++i) r.kv_len[size_t(i)] = csr.kv_len(i);
  } else {
    check_csr_shape(csr, r);
  }
  r.page_base.assign(csr.kv_indptr.begin(), csr.kv_indptr.end() - 1);
  r.tok_off.assign(size_t(B), 0);
  if (csr.windowed())
    for (int i = 0; i < B; ++i)
      if (csr.num_pages(i) > 0) r.tok_off[size_t(i)] = csr.kv_start_offset[size_t(i)];
  r.page_ids_needed = csr.kv_indptr[size_t(B)];
  fill_queries(r, o.queries == Queries::Given ? *o.rows : csr.qo_indptr, "qo_indptr", o.queries);
  require_pages(r, cache);
  return r;
}

KVRequests requests_from_table(const PageTable& t, const CacheShape& cache, const RequestOptions& o) {
  if (t.page_size != cache.page_size)
    bad_value("page_table.page_size", t.page_size, "differs from cache.page_size = " + num(cache.page_size));
  if (t.max_pages < 0) bad_value("page_table.max_pages", t.max_pages, "must be >= 0");
  const int B = t.batch_size();
  const int64_t entries = int64_t(B) * t.max_pages;
  if (entries > kInt32Max) bad_field("page_table", num(entries) + " entries (batch_size x max_pages) exceed int32");
  if (int64_t(t.page_table.size()) < entries)
    bad_field("page_table", "has " + num(int64_t(t.page_table.size())) + " entries, needs batch_size x max_pages = " +
                                num(entries));
  if (o.validate) {
    validate(t, cache);
  } else {
    for (int i = 0; i < B; ++i) {
      const int s = t.seq_lens[size_t(i)];
      if (s < 0) bad("seq_lens", i, s, req(i), "negative");
      const int64_t pages = (int64_t(s) + t.page_size - 1) / t.page_size;
      if (pages > t.max_pages)
        bad("seq_lens", i, s, req(i), "needs " + num(pages) + " pages but max_pages = " + num(t.max_pages));
    }
  }
  KVRequests r;
  r.kv_len = t.seq_lens;
  r.page_base.resize(size_t(B));
  for (int i = 0; i < B; ++i) r.page_base[size_t(i)] = int32_t(int64_t(i) * t.max_pages);
  r.tok_off.assign(size_t(B), 0);
  r.page_ids_needed = entries;
  fill_queries(r, o.queries == Queries::Given ? *o.rows : t.cu_seqlens_q, "cu_seqlens_q", o.queries);
  require_pages(r, cache);
  return r;
}

}  // namespace clattn::meta
