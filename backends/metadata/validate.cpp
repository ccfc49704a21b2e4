// Validation of every metadata form. Messages follow checks.hpp: "field[index] = value
// (request i): why", so an engine author can find the bad entry without a debugger.
#include <algorithm>
#include <limits>
#include <string>

#include "backends/metadata/checks.hpp"
#include "runtime/error.hpp"

namespace clattn {

using meta::bad;
using meta::bad_field;
using meta::bad_value;
using meta::req;

namespace {

std::string num(int64_t v) { return std::to_string(v); }

void check_page_size(int page_size, const CacheShape* cache) {
  if (page_size < 1) bad_value("page_size", page_size, "must be >= 1");
  if (!cache) return;
  if (cache->page_size != page_size)
    bad_value("page_size", page_size, "does not match the cache's page_size = " + num(cache->page_size));
  if (cache->num_pages < 0) bad_value("cache.num_pages", cache->num_pages, "must be >= 0");
}

// Page ids must be below this: the cache's page count, or (structure checks without a
// cache) anything an int32 holds.
int64_t page_id_end(const CacheShape* cache) {
  return cache ? cache->num_pages : int64_t(std::numeric_limits<int32_t>::max()) + 1;
}

// An indptr-like array: n+1 entries, starts at 0, never decreases.
void check_indptr(const std::vector<int32_t>& v, const char* field, int B) {
  if (v.size() != size_t(B) + 1)
    bad_field(field, "has " + num(int64_t(v.size())) + " entries, must be batch_size + 1 = " + num(int64_t(B) + 1));
  if (v[0] != 0) bad(field, 0, v[0], "", "must start at 0");
  for (int i = 0; i < B; ++i)
    if (v[size_t(i) + 1] < v[size_t(i)])
      bad(field, i + 1, v[size_t(i) + 1], req(i),
          "decreases from " + std::string(field) + "[" + num(i) + "] = " + num(v[size_t(i)]));
}

// PagedCsr::kv_len() computes (pages - 1) * page_size + kv_last_page_len in int: that
// must fit (seq_lens are int32 too) before anything calls it. A huge page_size overflows.
void check_kv_len(const PagedCsr& c, int i) {
  const int n = c.num_pages(i);
  if (n == 0) return;
  const int64_t span = int64_t(n - 1) * c.page_size + c.kv_last_page_len[size_t(i)];
  if (span > std::numeric_limits<int32_t>::max())
    bad("kv_indptr", i + 1, c.kv_indptr[size_t(i) + 1], req(i),
        "(pages - 1) * page_size + kv_last_page_len = " + num(span) + " tokens does not fit int32");
}

void csr_impl(const PagedCsr& c, const CacheShape* cache, const int32_t* seq_lens) {
  const int P = c.page_size;
  check_page_size(P, cache);
  const int B = c.batch_size();
  check_indptr(c.kv_indptr, "kv_indptr", B);
  const int64_t nnz = c.kv_indptr[size_t(B)];
  if (int64_t(c.kv_indices.size()) < nnz)
    bad_field("kv_indices", "has " + num(int64_t(c.kv_indices.size())) + " entries, kv_indptr[" + num(B) +
                                "] = " + num(nnz) + " needs at least that many");
  if (c.windowed() && c.kv_start_offset.size() != size_t(B))
    bad_field("kv_start_offset", "has " + num(int64_t(c.kv_start_offset.size())) +
                                     " entries, must be batch_size = " + num(B) + " (or empty: no window)");
  if (!c.qo_indptr.empty()) check_indptr(c.qo_indptr, "qo_indptr", B);

  for (int i = 0; i < B; ++i) {
    const int n = c.num_pages(i);
    const int last = c.kv_last_page_len[size_t(i)];
    check_kv_len(c, i);
    if (n == 0) {
      if (last != 0) bad("kv_last_page_len", i, last, req(i), "must be 0 for a request with no pages");
    } else if (last < 1 || last > P) {
      bad("kv_last_page_len", i, last, req(i), "must be in 1.." + num(P) + " (page_size) for a request with pages");
    }
    if (c.windowed()) {
      const int off = c.kv_start_offset[size_t(i)];
      if (n == 0 && off != 0) bad("kv_start_offset", i, off, req(i), "must be 0 for a request with no pages");
      if (off < 0 || off >= P) bad("kv_start_offset", i, off, req(i), "must be in 0.." + num(P - 1));
      if (n > 0 && c.kv_len(i) < 1)
        bad("kv_start_offset", i, off, req(i), "leaves no keys (one page whose kv_last_page_len = " + num(last) + ")");
    }
    const int64_t id_end = page_id_end(cache);
    for (int64_t k = c.kv_indptr[size_t(i)]; k < c.kv_indptr[size_t(i) + 1]; ++k) {
      const int32_t id = c.kv_indices[size_t(k)];
      if (id >= 0 && id < id_end) continue;
      const std::string where = req(i) + ", page " + num(k - c.kv_indptr[size_t(i)]);
      if (id < 0) bad("kv_indices", k, id, where, "negative page id");
      bad("kv_indices", k, id, where, "outside the cache (num_pages = " + num(id_end) + ")");
    }
    const int kv = c.kv_len(i);
    if (!c.qo_indptr.empty()) {
      const int qo = c.qo_indptr[size_t(i) + 1] - c.qo_indptr[size_t(i)];
      if (qo > kv)
        bad("qo_indptr", i + 1, c.qo_indptr[size_t(i) + 1], req(i),
            "qo_len = " + num(qo) + " exceeds kv_len = " + num(kv));
    }
    if (seq_lens) {
      const int s = seq_lens[i];
      if (s < 0) bad("seq_lens", i, s, req(i), "negative");
      if (!c.windowed()) {
        if (kv != s)
          bad("seq_lens", i, s, req(i),
              "the CSR covers " + num(kv) + " tokens ((pages - 1) * page_size + kv_last_page_len with " + num(n) +
                  " pages, kv_last_page_len " + num(last) + ")");
      } else {
        if (kv > s) bad("seq_lens", i, s, req(i), "the windowed CSR covers more: " + num(kv) + " tokens");
        if (n > 0 && (s - 1) % P + 1 != last)
          bad("kv_last_page_len", i, last, req(i),
              "the last page must end at seq_lens = " + num(s) + ", i.e. hold " + num((s - 1) % P + 1) + " tokens");
      }
    }
  }
}

void table_impl(const PageTable& t, const CacheShape* cache) {
  const int P = t.page_size;
  check_page_size(P, cache);
  if (t.max_pages < 0) bad_value("max_pages", t.max_pages, "must be >= 0");
  const int B = t.batch_size();
  meta::check_table_entries(B, t.max_pages, "page_table");
  if (t.page_table.size() != size_t(B) * size_t(t.max_pages))
    bad_field("page_table", "has " + num(int64_t(t.page_table.size())) +
                                " entries, must be batch_size * max_pages = " + num(int64_t(B) * t.max_pages));
  if (!t.cu_seqlens_k.empty()) check_indptr(t.cu_seqlens_k, "cu_seqlens_k", B);
  if (!t.cu_seqlens_q.empty()) check_indptr(t.cu_seqlens_q, "cu_seqlens_q", B);
  for (int i = 0; i < B; ++i) {
    const int s = t.seq_lens[size_t(i)];
    if (s < 0) bad("seq_lens", i, s, req(i), "negative");
    const int64_t n = rt::checked::ceil_div(s, P);
    if (n > t.max_pages)
      bad("seq_lens", i, s, req(i), "needs " + num(n) + " pages but max_pages = " + num(t.max_pages));
    const int32_t* row = t.page_table.data() + size_t(i) * size_t(t.max_pages);
    const int64_t id_end = page_id_end(cache);
    for (int p = 0; p < n; ++p) {
      if (row[p] >= 0 && row[p] < id_end) continue;
      const std::string field = "page_table[" + num(i) + "]";
      if (row[p] < 0) bad(field, p, row[p], req(i) + ", page " + num(p), "negative page id");
      bad(field, p, row[p], req(i) + ", page " + num(p), "outside the cache (num_pages = " + num(id_end) + ")");
    }
    if (!t.cu_seqlens_k.empty() && t.cu_seqlens_k[size_t(i) + 1] - t.cu_seqlens_k[size_t(i)] != s)
      bad("cu_seqlens_k", i + 1, t.cu_seqlens_k[size_t(i) + 1], req(i),
          "cu_seqlens_k[" + num(i + 1) + "] - cu_seqlens_k[" + num(i) + "] must equal seq_lens[" + num(i) +
              "] = " + num(s));
    if (!t.cu_seqlens_q.empty()) {
      const int qo = t.cu_seqlens_q[size_t(i) + 1] - t.cu_seqlens_q[size_t(i)];
      if (qo > s)
        bad("cu_seqlens_q", i + 1, t.cu_seqlens_q[size_t(i) + 1], req(i),
            "qo_len = " + num(qo) + " exceeds seq_lens = " + num(s));
    }
  }
}

template <class T>
void slots_impl(const T* slots, int64_t n, const CacheShape& cache) {
  if (n < 0) bad_field("slot_mapping", "length " + num(n) + " is negative");
  if (n > 0 && !slots) bad_field("slot_mapping", "null with length " + num(n));
  check_page_size(cache.page_size, &cache);
  const int64_t cap = int64_t(cache.num_pages) * cache.page_size;
  for (int64_t k = 0; k < n; ++k) {
    const int64_t s = int64_t(slots[k]);
    if (s >= cap)
      bad("slot_mapping", k, s, "token " + num(k),
          "outside the cache (num_pages * page_size = " + num(cap) + "; negative = skip)");
  }
}

// Position t of request i breaks a rule: throw the message for the first rule it breaks.
[[noreturn]] void bad_token(const EngineBatch& b, int i, const int32_t* row, int64_t t, int P, int64_t num_slots) {
  const int32_t s = row[t];
  const std::string field = "req_to_token[" + num(b.req_pool_indices[i]) + "]";
  const std::string where = req(i) + ", position " + num(t);
  if (s < 0) bad(field, t, s, where, "negative slot");
  if (s >= num_slots) bad(field, t, s, where, "outside the cache (num_pages * page_size = " + num(num_slots) + ")");
  if (s % P != t % P)
    bad(field, t, s, where,
        "sits at offset " + num(s % P) + " of page " + num(s / P) + ", position " + num(t) + " needs offset " +
            num(t % P) + " (page_size " + num(P) + ")");
  bad(field, t, s, where,
      "is in page " + num(s / P) + " but position " + num(t - t % P) + " of the same logical page is in page " +
          num(row[t - t % P] / P) + " (whole pages: positions P*k .. P*k+P-1 of a request share one physical page)");
}

bool token_ok(const int32_t* row, int64_t t, int P, int64_t num_slots) {
  const int32_t s = row[t];
  return s >= 0 && s < num_slots && s % P == t % P && s / P == row[t - t % P] / P;
}

void engine_impl(const EngineBatch& b, int P, int64_t num_slots) {
  meta::check_batch(b, P);
  for (int i = 0; i < b.batch_size; ++i) {
    const meta::ReqGeom g = meta::geom(b, i, P, -1);
    const int32_t* row = b.req_to_token + g.base;
    // Per logical page: the rules hold for every position iff the first slot is a page
    // start inside the cache and the rest follow it one by one (one compare per token).
    for (int64_t p0 = 0; p0 < g.seq; p0 += P) {
      const int cnt = int(std::min<int64_t>(P, g.seq - p0));
      const int32_t base = row[p0];
      bool ok = base >= 0 && base % P == 0 && int64_t(base) + cnt <= num_slots;
      int64_t diff = 0;  // int64: base + k overflows int for a slot near INT_MAX
      for (int k = 1; k < cnt; ++k) diff |= int64_t(row[p0 + k]) ^ (int64_t(base) + k);
      if (ok && diff == 0) continue;
      for (int64_t t = p0; t < p0 + cnt; ++t)
        if (!token_ok(row, t, P, num_slots)) bad_token(b, i, row, t, P, num_slots);
      rt::fail(Status::Internal, "validate(EngineBatch): page check and token check disagree");
    }
  }
}

}  // namespace

namespace meta {
void check_csr_structure(const PagedCsr& c) { csr_impl(c, nullptr, nullptr); }
void check_table_structure(const PageTable& t) { table_impl(t, nullptr); }
}  // namespace meta

void validate(const PagedCsr& c, const CacheShape& cache, const int32_t* seq_lens) { csr_impl(c, &cache, seq_lens); }

void validate(const PageTable& t, const CacheShape& cache) { table_impl(t, &cache); }

void validate_slot_mapping(const int32_t* slots, int64_t n, const CacheShape& cache) { slots_impl(slots, n, cache); }
void validate_slot_mapping(const int64_t* slots, int64_t n, const CacheShape& cache) { slots_impl(slots, n, cache); }

void validate(const EngineBatch& b, int page_size) { engine_impl(b, page_size, std::numeric_limits<int64_t>::max()); }

void validate(const EngineBatch& b, const CacheShape& cache) {
  check_page_size(cache.page_size, &cache);
  engine_impl(b, cache.page_size, int64_t(cache.num_pages) * cache.page_size);
}

}  // namespace clattn
