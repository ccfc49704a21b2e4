// Host metadata builders and the CSR <-> page-table conversions. These are the
// specification the OpenCL builders (cl_kernels/metadata.cl) must match element for element.
#include <algorithm>
#include <limits>

#include "backends/metadata/checks.hpp"
#include "runtime/error.hpp"

namespace clattn {

namespace meta {

[[noreturn]] void bad(const std::string& field, int64_t index, int64_t value, const std::string& where,
                      const std::string& why) {
  std::string msg = field + "[" + std::to_string(index) + "] = " + std::to_string(value);
  if (!where.empty()) msg += " (" + where + ")";
  rt::invalid(msg + ": " + why);
}

[[noreturn]] void bad_field(const std::string& field, const std::string& why) { rt::invalid(field + ": " + why); }

[[noreturn]] void bad_value(const std::string& field, int64_t value, const std::string& why) {
  rt::invalid(field + " = " + std::to_string(value) + ": " + why);
}

std::string req(int64_t i) { return "request " + std::to_string(i); }

void check_batch(const EngineBatch& b, int page_size) {
  if (page_size < 1) bad_value("page_size", page_size, "must be >= 1");
  if (b.batch_size < 0) bad_value("batch_size", b.batch_size, "must be >= 0");
  if (b.pool_size < 0) bad_value("pool_size", b.pool_size, "must be >= 0");
  if (b.max_ctx < 0) bad_value("max_ctx", b.max_ctx, "must be >= 0");
  if (b.batch_size == 0) return;
  if (!b.req_pool_indices) bad_field("req_pool_indices", "null with batch_size > 0");
  if (!b.seq_lens) bad_field("seq_lens", "null with batch_size > 0");
  if (!b.req_to_token && int64_t(b.pool_size) * b.max_ctx > 0) bad_field("req_to_token", "null");
  if (b.is_extend() && !b.prefix_lens) bad_field("prefix_lens", "null while extend_lens is given (extend batch)");
  for (int i = 0; i < b.batch_size; ++i) {
    int r = b.req_pool_indices[i];
    if (r < 0 || r >= b.pool_size)
      bad("req_pool_indices", i, r, req(i), "outside the pool [0, " + std::to_string(b.pool_size) + ")");
    int s = b.seq_lens[i];
    if (s < 0) bad("seq_lens", i, s, req(i), "negative");
    if (s > b.max_ctx) bad("seq_lens", i, s, req(i), "exceeds max_ctx = " + std::to_string(b.max_ctx));
    if (b.is_extend()) {
      int p = b.prefix_lens[i], e = b.extend_lens[i];
      if (p < 0) bad("prefix_lens", i, p, req(i), "negative");
      if (e < 0) bad("extend_lens", i, e, req(i), "negative");
      if (e > s) bad("extend_lens", i, e, req(i), "exceeds seq_lens[" + std::to_string(i) + "] = " + std::to_string(s));
      if (int64_t(p) + e != s)
        bad("prefix_lens", i, p, req(i),
            "prefix_lens + extend_lens = " + std::to_string(int64_t(p) + e) + " != seq_lens = " + std::to_string(s));
    }
  }
}

int32_t page_of(const EngineBatch& b, int i, const ReqGeom& g, int64_t t, int page_size) {
  int32_t s = b.req_to_token[g.base + t];
  int row = b.req_pool_indices[i];
  if (s < 0)
    bad("req_to_token[" + std::to_string(row) + "]", t, s, req(i) + ", position " + std::to_string(t), "negative slot");
  if (s % page_size != 0)
    bad("req_to_token[" + std::to_string(row) + "]", t, s, req(i) + ", position " + std::to_string(t),
        "the first position of a page must sit at offset 0 of its page, found offset " + std::to_string(s % page_size) +
            " (page_size " + std::to_string(page_size) + ")");
  return s / page_size;
}

namespace {

// Page ids of `count` logical pages of request i from logical page `first` on, into out
// (out == nullptr: check the slots only).
void fill_pages(const EngineBatch& b, int i, const ReqGeom& g, int64_t first, int64_t count, int P, int32_t* out) {
  const int32_t* row = b.req_to_token + g.base;
  if ((P & (P - 1)) == 0) {  // power of two: shift and mask instead of two divisions per page
    int sh = 0;
    while ((1 << sh) < P) ++sh;
    for (int64_t p = 0; p < count; ++p) {
      const int32_t s = row[(first + p) * P];
      if (s < 0 || (s & (P - 1)) != 0) page_of(b, i, g, (first + p) * P, P);  // throws the message
      if (out) out[p] = s >> sh;
    }
  } else {
    for (int64_t p = 0; p < count; ++p) {
      const int32_t id = page_of(b, i, g, (first + p) * P, P);
      if (out) out[p] = id;
    }
  }
}

// A running total stored in an int32 array (kv_indptr, qo_indptr, cu_seqlens, slot counts).
int32_t checked_total(int64_t total, const char* what) {
  if (total > std::numeric_limits<int32_t>::max())
    bad_field(what, "total " + std::to_string(total) + " overflows int32");
  return int32_t(total);
}

void check_window(int window_left) {
  if (window_left < -1) bad_value("window_left", window_left, "must be >= -1");
}

}  // namespace

void check_table_entries(int64_t batch_size, int64_t width, const char* field) {
  const int64_t n = rt::checked::mul(batch_size, width, field);
  if (n > std::numeric_limits<int32_t>::max())
    bad_field(field, "batch_size * max_pages = " + std::to_string(batch_size) + " * " + std::to_string(width) + " = " +
                         std::to_string(n) + " entries does not fit int32");
}

int32_t csr_size(const EngineBatch& b, int page_size, int window_left) {
  check_batch(b, page_size);
  check_window(window_left);
  int64_t pages = 0, qo = 0;
  for (int i = 0; i < b.batch_size; ++i) {
    const ReqGeom g = geom(b, i, page_size, window_left);
    pages += g.pages;
    qo += g.qo;
  }
  if (b.is_extend()) checked_total(qo, "qo_indptr");
  return checked_total(pages, "kv_indptr");
}

int table_width(const EngineBatch& b, int page_size, int max_pages) {
  check_batch(b, page_size);
  if (max_pages < 0) bad_value("max_pages", max_pages, "must be >= 0 (0 = tightest)");
  int need = 1;
  int64_t q = 0, k = 0;
  for (int i = 0; i < b.batch_size; ++i) {
    const ReqGeom g = geom(b, i, page_size, -1);
    if (max_pages > 0 && g.pages > max_pages)
      bad("seq_lens", i, g.seq, req(i),
          "needs " + std::to_string(g.pages) + " pages but max_pages = " + std::to_string(max_pages));
    need = std::max(need, g.pages);
    q += g.qo;
    k += g.seq;
  }
  if (b.is_extend()) checked_total(q, "cu_seqlens_q");
  checked_total(k, "cu_seqlens_k");
  const int width = max_pages > 0 ? max_pages : need;
  check_table_entries(b.batch_size, width, "page_table");
  return width;
}

int32_t slot_count(const EngineBatch& b) {
  check_batch(b, 1);
  if (!b.is_extend()) return b.batch_size;
  int64_t total = 0;
  for (int i = 0; i < b.batch_size; ++i) total += b.extend_lens[i];
  return checked_total(total, "slot_mapping");
}

int table_width(const PagedCsr& c) {
  check_csr_structure(c);
  if (c.windowed())
    bad_field("kv_start_offset",
              "a windowed CSR has no page-table form (build the page table without a window; "
              "FlashAttention applies window_left itself)");
  int need = 1;
  int64_t k = 0;
  for (int i = 0; i < c.batch_size(); ++i) {
    need = std::max(need, c.num_pages(i));
    k += c.kv_len(i);
  }
  checked_total(k, "cu_seqlens_k");
  check_table_entries(c.batch_size(), need, "page_table");
  return need;
}

int32_t csr_size(const PageTable& t) {
  check_table_structure(t);
  int64_t total = 0;
  for (int i = 0; i < t.batch_size(); ++i) total += rt::checked::ceil_div(t.seq_lens[size_t(i)], t.page_size);
  return checked_total(total, "kv_indptr");
}

void check_pages(const EngineBatch& b, int page_size) {
  check_batch(b, page_size);
  for (int i = 0; i < b.batch_size; ++i) {
    const ReqGeom g = geom(b, i, page_size, -1);
    fill_pages(b, i, g, 0, g.pages, page_size, nullptr);
  }
}

void csr_to_table_into(const PagedCsr& c, int width, PageTable& t) {
  const int B = c.batch_size();
  t.page_size = c.page_size;
  t.max_pages = width;
  t.page_table.assign(size_t(B) * size_t(width), -1);
  t.seq_lens.resize(size_t(B));
  t.cu_seqlens_k.assign(size_t(B) + 1, 0);
  for (int i = 0; i < B; ++i) {
    const int32_t* first = c.kv_indices.data() + c.kv_indptr[size_t(i)];
    std::copy(first, first + c.num_pages(i), t.page_table.data() + size_t(i) * size_t(width));
    t.seq_lens[size_t(i)] = c.kv_len(i);
    t.cu_seqlens_k[size_t(i) + 1] = t.cu_seqlens_k[size_t(i)] + c.kv_len(i);  // total checked by table_width
  }
  t.cu_seqlens_q = c.qo_indptr;
}

void table_to_csr_into(const PageTable& t, PagedCsr& c) {
  const int B = t.batch_size();
  const int P = t.page_size;
  c.page_size = P;
  c.kv_indptr.assign(size_t(B) + 1, 0);
  c.kv_last_page_len.assign(size_t(B), 0);
  c.kv_start_offset.clear();
  for (int i = 0; i < B; ++i) {
    const int s = t.seq_lens[size_t(i)];
    const int n = int(rt::checked::ceil_div(s, P));
    c.kv_indptr[size_t(i) + 1] = c.kv_indptr[size_t(i)] + n;  // total checked by csr_size
    c.kv_last_page_len[size_t(i)] = n > 0 ? last_page_len(s, P) : 0;
  }
  c.kv_indices.resize(size_t(c.kv_indptr[size_t(B)]));
  for (int i = 0; i < B; ++i) {
    const int32_t* row = t.page_table.data() + size_t(i) * size_t(t.max_pages);
    std::copy(row, row + (c.kv_indptr[size_t(i) + 1] - c.kv_indptr[size_t(i)]),
              c.kv_indices.begin() + c.kv_indptr[size_t(i)]);
  }
  c.qo_indptr = t.cu_seqlens_q;
}

}  // namespace meta

using meta::bad;
using meta::req;

namespace {

// Runs `fill`; if it throws (a bad slot found while copying pages), `out` is reset to an
// empty value first so no half-built metadata survives, then the error propagates.
template <class T, class F>
void or_reset(T& out, F&& fill) {
  try {
    fill();
  } catch (...) {
    out = T{};
    throw;
  }
}

// The fills below run on a batch checked and sized by meta::csr_size / table_width /
// slot_count, so every total fits int32 and only a bad slot can still throw.

void csr_into(const EngineBatch& b, int P, int window_left, int32_t total, PagedCsr& c) {
  const int B = b.batch_size;
  c.page_size = P;
  c.kv_indptr.assign(size_t(B) + 1, 0);
  c.kv_last_page_len.assign(size_t(B), 0);
  c.qo_indptr.assign(b.is_extend() ? size_t(B) + 1 : 0, 0);
  c.kv_start_offset.assign(window_left >= 0 ? size_t(B) : 0, 0);
  c.kv_indices.resize(size_t(total));
  int32_t* out = c.kv_indices.data();
  for (int i = 0; i < B; ++i) {
    const meta::ReqGeom g = meta::geom(b, i, P, window_left);
    c.kv_indptr[size_t(i) + 1] = c.kv_indptr[size_t(i)] + g.pages;
    if (g.pages > 0) {
      c.kv_last_page_len[size_t(i)] = meta::last_page_len(g.seq, P);
      if (window_left >= 0) c.kv_start_offset[size_t(i)] = g.start % P;
    }
    if (b.is_extend()) c.qo_indptr[size_t(i) + 1] = c.qo_indptr[size_t(i)] + g.qo;
    meta::fill_pages(b, i, g, g.start / P, g.pages, P, out);
    out += g.pages;
  }
}

void table_into(const EngineBatch& b, int P, int width, PageTable& t) {
  const int B = b.batch_size;
  t.page_size = P;
  t.max_pages = width;
  t.page_table.assign(size_t(B) * size_t(width), -1);
  t.seq_lens.assign(b.seq_lens, b.seq_lens + B);
  t.cu_seqlens_q.assign(b.is_extend() ? size_t(B) + 1 : 0, 0);
  t.cu_seqlens_k.assign(size_t(B) + 1, 0);
  for (int i = 0; i < B; ++i) {
    const meta::ReqGeom g = meta::geom(b, i, P, -1);
    meta::fill_pages(b, i, g, 0, g.pages, P, t.page_table.data() + size_t(i) * size_t(width));
    if (b.is_extend()) t.cu_seqlens_q[size_t(i) + 1] = t.cu_seqlens_q[size_t(i)] + g.qo;
    t.cu_seqlens_k[size_t(i) + 1] = t.cu_seqlens_k[size_t(i)] + g.seq;
  }
}

void slots_into(const EngineBatch& b, int32_t count, std::vector<int32_t>& out) {
  auto slot = [&](int i, const meta::ReqGeom& g, int64_t t) {
    int32_t s = b.req_to_token[g.base + t];
    if (s < 0)
      bad("req_to_token[" + std::to_string(b.req_pool_indices[i]) + "]", t, s,
          req(i) + ", position " + std::to_string(t), "negative slot");
    return s;
  };
  out.resize(size_t(count));
  int32_t* o = out.data();
  for (int i = 0; i < b.batch_size; ++i) {
    const meta::ReqGeom g = meta::geom(b, i, 1, -1);
    if (!b.is_extend())
      *o++ = g.seq > 0 ? slot(i, g, g.seq - 1) : -1;
    else
      for (int64_t t = g.prefix; t < g.seq; ++t) *o++ = slot(i, g, t);
  }
}

}  // namespace

void build_csr(const EngineBatch& b, int page_size, int window_left, PagedCsr& out) {
  const int32_t total = meta::csr_size(b, page_size, window_left);
  or_reset(out, [&] { csr_into(b, page_size, window_left, total, out); });
}

PagedCsr build_csr(const EngineBatch& b, int page_size, int window_left) {
  PagedCsr c;
  build_csr(b, page_size, window_left, c);
  return c;
}

void build_page_table(const EngineBatch& b, int page_size, int max_pages, PageTable& out) {
  const int width = meta::table_width(b, page_size, max_pages);
  or_reset(out, [&] { table_into(b, page_size, width, out); });
}

PageTable build_page_table(const EngineBatch& b, int page_size, int max_pages) {
  PageTable t;
  build_page_table(b, page_size, max_pages, t);
  return t;
}

void build_slot_mapping(const EngineBatch& b, std::vector<int32_t>& out) {
  const int32_t count = meta::slot_count(b);
  or_reset(out, [&] { slots_into(b, count, out); });
}

std::vector<int32_t> build_slot_mapping(const EngineBatch& b) {
  std::vector<int32_t> out;
  build_slot_mapping(b, out);
  return out;
}

std::vector<int32_t> build_block_table(const EngineBatch& b, int block_size, int* max_blocks_out, int max_blocks) {
  PageTable t = build_page_table(b, block_size, max_blocks);
  if (max_blocks_out) *max_blocks_out = t.max_pages;
  return std::move(t.page_table);
}

PageTable csr_to_page_table(const PagedCsr& c) {
  PageTable t;
  meta::csr_to_table_into(c, meta::table_width(c), t);
  return t;
}

PagedCsr page_table_to_csr(const PageTable& t) {
  meta::csr_size(t);
  PagedCsr c;
  meta::table_to_csr_into(t, c);
  return c;
}

}  // namespace clattn
