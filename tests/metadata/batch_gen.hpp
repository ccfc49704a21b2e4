// Random SGLang-style engine batches for the metadata tests, and an oracle written
// independently of the builders: it walks every kept position of a request and lists
// the distinct pages its slots fall in (never computes page counts or offsets).
#pragma once
#include <algorithm>
#include <clattn/metadata.hpp>
#include <cstdint>
#include <numeric>
#include <vector>

#include "support/test_support.hpp"

namespace clattn::test {

struct GenBatch {
  int page_size = 1;
  int pool_size = 0, max_ctx = 0, num_pages = 0;
  bool extend = false;
  std::vector<int32_t> req_to_token, req_pool_indices, seq_lens, prefix_lens, extend_lens;

  int batch_size() const { return int(seq_lens.size()); }
  EngineBatch view() const {
    EngineBatch b;
    b.req_to_token = req_to_token.data();
    b.pool_size = pool_size;
    b.max_ctx = max_ctx;
    b.req_pool_indices = req_pool_indices.data();
    b.seq_lens = seq_lens.data();
    b.batch_size = batch_size();
    if (extend) {
      b.prefix_lens = prefix_lens.data();
      b.extend_lens = extend_lens.data();
    }
    return b;
  }
  CacheShape cache() const { return CacheShape{num_pages, page_size}; }
  int32_t slot(int i, int t) const { return req_to_token[size_t(req_pool_indices[size_t(i)]) * max_ctx + t]; }
};

// Filler for req_to_token entries past a request's length: a builder that reads them
// produces a negative page id the oracle never does.
constexpr int32_t kUnused = -7777;

// B requests with lengths drawn from edge cases (0, 1, P-1, P, P+1, 2P, max_ctx) and
// uniform ones; about a third share a prefix of whole pages with an earlier request (the
// same physical page ids in several req_to_token rows); physical pages are shuffled.
inline GenBatch random_batch(Rng& rng, int P, int B, int max_ctx, bool extend) {
  GenBatch g;
  g.page_size = P;
  g.max_ctx = max_ctx;
  g.extend = extend;
  g.pool_size = B + rng.uniform_int(0, 3);
  const int max_pages = (max_ctx + P - 1) / P;
  g.num_pages = B * max_pages + rng.uniform_int(0, 7);
  std::vector<int32_t> free_pages(size_t(g.num_pages));
  std::iota(free_pages.begin(), free_pages.end(), 0);
  std::shuffle(free_pages.begin(), free_pages.end(), rng.gen);
  size_t next_free = 0;

  std::vector<int32_t> rows(size_t(g.pool_size));
  std::iota(rows.begin(), rows.end(), 0);
  std::shuffle(rows.begin(), rows.end(), rng.gen);
  g.req_pool_indices.assign(rows.begin(), rows.begin() + B);
  g.req_to_token.assign(size_t(g.pool_size) * max_ctx, kUnused);

  std::vector<std::vector<int32_t>> phys(static_cast<size_t>(B));  // physical page of each logical page
  for (int i = 0; i < B; ++i) {
    int s;
    switch (rng.uniform_int(0, 9)) {
      case 0:
        s = 0;
        break;
      case 1:
        s = 1;
        break;
      case 2:
        s = P - 1;
        break;
      case 3:
        s = P;
        break;
      case 4:
        s = P + 1;
        break;
      case 5:
        s = 2 * P;
        break;
      case 6:
        s = max_ctx;
        break;
      default:
        s = rng.uniform_int(0, max_ctx);
        break;
    }
    s = std::clamp(s, 0, max_ctx);
    g.seq_lens.push_back(s);
    const int n = (s + P - 1) / P;
    int shared = 0;
    if (i > 0 && rng.uniform_int(0, 2) == 0) {
      int j = rng.uniform_int(0, i - 1);
      int full_j = g.seq_lens[size_t(j)] / P;  // whole pages of j
      shared = rng.uniform_int(0, std::min(full_j, n));
      phys[size_t(i)].assign(phys[size_t(j)].begin(), phys[size_t(j)].begin() + shared);
    }
    for (int p = shared; p < n; ++p) phys[size_t(i)].push_back(free_pages[next_free++]);
    int32_t* row = g.req_to_token.data() + size_t(g.req_pool_indices[size_t(i)]) * max_ctx;
    for (int t = 0; t < s; ++t) row[t] = phys[size_t(i)][size_t(t / P)] * P + t % P;
    if (extend) {
      int pre;
      switch (rng.uniform_int(0, 4)) {
        case 0:
          pre = 0;
          break;
        case 1:
          pre = s;
          break;  // no new tokens
        default:
          pre = rng.uniform_int(0, s);
          break;
      }
      g.prefix_lens.push_back(pre);
      g.extend_lens.push_back(s - pre);
    }
  }
  return g;
}

// Oracle: per-position walk.
inline PagedCsr oracle_csr(const GenBatch& g, int window_left) {
  const int P = g.page_size, B = g.batch_size();
  PagedCsr c;
  c.page_size = P;
  c.kv_indptr.push_back(0);
  if (g.extend) c.qo_indptr.push_back(0);
  for (int i = 0; i < B; ++i) {
    const int s = g.seq_lens[size_t(i)];
    const int first_query = g.extend ? g.prefix_lens[size_t(i)] : s - 1;
    int start = 0;
    if (window_left >= 0) start = std::max(0, first_query - window_left);
    std::vector<int32_t> pages;
    for (int t = start; t < s; ++t) {
      int32_t pg = g.slot(i, t) / P;
      if (pages.empty() || pages.back() != pg) pages.push_back(pg);
    }
    c.kv_indices.insert(c.kv_indices.end(), pages.begin(), pages.end());
    c.kv_indptr.push_back(int32_t(c.kv_indices.size()));
    c.kv_last_page_len.push_back(start < s ? g.slot(i, s - 1) % P + 1 : 0);
    if (window_left >= 0) c.kv_start_offset.push_back(start < s ? g.slot(i, start) % P : 0);
    if (g.extend) c.qo_indptr.push_back(c.qo_indptr.back() + g.extend_lens[size_t(i)]);
  }
  return c;
}

inline PageTable oracle_table(const GenBatch& g, int width) {
  PagedCsr c = oracle_csr(g, -1);
  const int B = g.batch_size();
  PageTable t;
  t.page_size = g.page_size;
  t.max_pages = width;
  t.page_table.assign(size_t(B) * size_t(width), -1);
  t.seq_lens = g.seq_lens;
  if (g.extend) t.cu_seqlens_q.push_back(0);
  t.cu_seqlens_k.push_back(0);
  for (int i = 0; i < B; ++i) {
    std::copy(c.kv_indices.begin() + c.kv_indptr[size_t(i)], c.kv_indices.begin() + c.kv_indptr[size_t(i) + 1],
              t.page_table.begin() + ptrdiff_t(i) * width);
    if (g.extend) t.cu_seqlens_q.push_back(t.cu_seqlens_q.back() + g.extend_lens[size_t(i)]);
    t.cu_seqlens_k.push_back(t.cu_seqlens_k.back() + g.seq_lens[size_t(i)]);
  }
  return t;
}

inline int oracle_width(const GenBatch& g) {
  int w = 1;
  for (int s : g.seq_lens) w = std::max(w, (s + g.page_size - 1) / g.page_size);
  return w;
}

inline std::vector<int32_t> oracle_slots(const GenBatch& g) {
  std::vector<int32_t> out;
  for (int i = 0; i < g.batch_size(); ++i) {
    const int s = g.seq_lens[size_t(i)];
    if (!g.extend) {
      out.push_back(s > 0 ? g.slot(i, s - 1) : -1);
    } else {
      for (int t = g.prefix_lens[size_t(i)]; t < s; ++t) out.push_back(g.slot(i, t));
    }
  }
  return out;
}

}  // namespace clattn::test
