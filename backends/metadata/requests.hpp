// The per-request view every paged op plans from (FlashInfer's paged_kv_t): where each
// request's page ids start in the run's page-id list, how many keys it has and where key 0
// sits, and its query rows. Built the same way for decode, extend and MLA from host CSR or
// page-table metadata: fully validated against the cache, or, on the hot path
// (validate = false), checked in O(B) with int64 arithmetic so that no count, offset or
// page-id read computed from it can wrap.
#pragma once
#include <cstdint>
#include <vector>

#include "clattn/metadata.hpp"

namespace clattn::meta {

// How an op reads query rows.
enum class Queries {
  Decode,  // one row per request (row i); qo_indptr / cu_seqlens_q may be given, all ones
  Extend,  // rows from qo_indptr / cu_seqlens_q (required), qo_len <= kv_len
  Given,   // rows from the caller's indptr, which may outnumber the keys (a cascade prefix)
};

struct KVRequests {
  std::vector<int32_t> page_base;  // [B] index of the request's first page id in the list
  std::vector<int32_t> kv_len;     // [B] keys
  std::vector<int32_t> tok_off;    // [B] list slot of key 0 (windowed CSR), else 0
  std::vector<int32_t> qo_start;   // [B] first query row
  std::vector<int32_t> qo_len;     // [B] query rows
  int64_t page_ids_needed = 0;     // entries the run's page-id list must hold
  int64_t num_tokens = 0;          // query rows in all
  int size() const { return int(kv_len.size()); }
};

struct RequestOptions {
  Queries queries = Queries::Decode;
  bool validate = true;            // full validation (O(pages)) instead of O(B) shape checks
  bool allow_window = true;        // false: a windowed CSR is Unsupported (MLA)
  const std::vector<int32_t>* rows = nullptr;  // Queries::Given: the [B+1] row offsets
};

// From FlashInfer CSR metadata (kv_indptr / kv_indices / kv_last_page_len, optional
// kv_start_offset and qo_indptr) over a cache of `cache.num_pages` pages.
KVRequests requests_from_csr(const PagedCsr& csr, const CacheShape& cache, const RequestOptions& o);
// From a FlashAttention/vLLM page table (seq_lens, optional cu_seqlens_q).
KVRequests requests_from_table(const PageTable& t, const CacheShape& cache, const RequestOptions& o);
// Either form, for the plans written once over both.
inline KVRequests requests_of(const PagedCsr& m, const CacheShape& c, const RequestOptions& o) {
  return requests_from_csr(m, c, o);
}
inline KVRequests requests_of(const PageTable& m, const CacheShape& c, const RequestOptions& o) {
  return requests_from_table(m, c, o);
}

// Query rows of every request of `r` (kv_len set): one each (Decode), or from `indptr`
// (Extend: qo_len <= kv_len; Given: any). `field` names the array in messages.
void fill_queries(KVRequests& r, const std::vector<int32_t>& indptr, const char* field, Queries q);

// Lengths of an indptr-like array of `n` + 1 entries: starts at 0, never decreases; the
// differences are taken in int64 (hostile values such as INT_MIN never wrap). Messages
// name `field` and the request.
std::vector<int32_t> indptr_lengths(const std::vector<int32_t>& indptr, int n, const char* field);

}  // namespace clattn::meta
