// Internals shared by the metadata builders and validators: error messages in one format
// ("field[index] = value (request i): why") and the per-request geometry every form uses.
#pragma once
#include <cstdint>
#include <string>

#include "clattn/metadata.hpp"
#include "runtime/checked.hpp"

namespace clattn::meta {

// Throws InvalidArgument: "<field>[<index>] = <value> (<where>): <why>".
[[noreturn]] void bad(const std::string& field, int64_t index, int64_t value, const std::string& where,
                      const std::string& why);
// Throws InvalidArgument with a message about a whole field (shape, null pointer...).
[[noreturn]] void bad_field(const std::string& field, const std::string& why);
// Throws InvalidArgument: "<field> = <value>: <why>" (scalar arguments).
[[noreturn]] void bad_value(const std::string& field, int64_t value, const std::string& why);
std::string req(int64_t i);  // "request i"

// What one request of an engine batch covers. Positions start .. seq-1 are kept keys.
struct ReqGeom {
  int64_t base = 0;  // offset of the request's req_to_token row
  int seq = 0;
  int prefix = 0;  // first new position (seq - 1 for decode)
  int qo = 1;      // new tokens (1 for decode)
  int start = 0;   // first kept key (0 without a window)
  int pages = 0;   // pages holding keys start .. seq-1 (<= seq, so it fits int)
};

// Request i of a batch already checked by check_batch().
inline ReqGeom geom(const EngineBatch& b, int i, int page_size, int window_left) {
  ReqGeom g;
  g.base = int64_t(b.req_pool_indices[i]) * b.max_ctx;
  g.seq = b.seq_lens[i];
  if (b.is_extend()) {
    g.prefix = b.prefix_lens[i];
    g.qo = b.extend_lens[i];
  } else {
    g.prefix = g.seq - 1;
    g.qo = 1;
  }
  // The first query row (position prefix) sees keys prefix - W .. prefix.
  const int64_t first = int64_t(g.prefix) - window_left;
  g.start = window_left >= 0 && first > 0 ? int(first) : 0;
  // ceil_div in int64: seq + page_size - 1 overflows int for a large page_size.
  g.pages = g.seq > g.start ? int(rt::checked::ceil_div(g.seq, page_size) - g.start / page_size) : 0;
  return g;
}

// Tokens in the last page of a request of `seq` >= 1 tokens: 1..page_size.
inline int last_page_len(int seq, int page_size) { return (seq - 1) % page_size + 1; }

// The O(B) checks every builder runs: sizes, null pointers, pool indices, lengths.
void check_batch(const EngineBatch& b, int page_size);

// Slot of position t of a request, checked to be a page's first slot (builders read only
// page-aligned positions; validate(EngineBatch) checks every token).
int32_t page_of(const EngineBatch& b, int i, const ReqGeom& g, int64_t t, int page_size);

// Shape and consistency checks without a cache (the conversions run them on their input).
void check_csr_structure(const PagedCsr& c);
void check_table_structure(const PageTable& t);

// A page table of batch_size rows of `width` entries: the entry count must fit int32, like
// a CSR's kv_indptr[B] (kernels address both with int32 offsets).
void check_table_entries(int64_t batch_size, int64_t width, const char* field);

// Output sizes, computed in O(B) before anything is allocated, so that a caller's
// capacity is checked first and a hostile shape never allocates. Each runs every check its
// builder or conversion runs except the page-slot reads, and throws as that one would.
// build_csr: kv_indptr[B] (the kv_indices count).
int32_t csr_size(const EngineBatch& b, int page_size, int window_left);
// build_page_table: the row width (max_pages, or the tightest when max_pages == 0).
int table_width(const EngineBatch& b, int page_size, int max_pages);
// build_slot_mapping: the entry count.
int32_t slot_count(const EngineBatch& b);
// csr_to_page_table: the row width (also checks the CSR, a windowed one is rejected).
int table_width(const PagedCsr& c);
// page_table_to_csr: kv_indptr[B] (also checks the table).
int32_t csr_size(const PageTable& t);
// Reads every page-aligned slot the builders read (all pages from position 0), writing
// nothing: the slot checks of the builders, for callers that stop before building.
void check_pages(const EngineBatch& b, int page_size);

// The conversions into a reused output, for input already checked and sized above.
void csr_to_table_into(const PagedCsr& c, int width, PageTable& out);
void table_to_csr_into(const PageTable& t, PagedCsr& out);

}  // namespace clattn::meta
