// Internals shared by the metadata builders and validators: error messages in one format
// ("field[index] = value (request i): why") and the per-request geometry every form uses.
#pragma once
#include <cstdint>
#include <string>

#include "clattn/metadata.hpp"

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
  int pages = 0;   // pages holding keys start .. seq-1
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
  g.start = window_left >= 0 ? (g.prefix - window_left > 0 ? g.prefix - window_left : 0) : 0;
  g.pages = g.seq > g.start ? (g.seq + page_size - 1) / page_size - g.start / page_size : 0;
  return g;
}

// The O(B) checks every builder runs: sizes, null pointers, pool indices, lengths.
void check_batch(const EngineBatch& b, int page_size);

// Slot of position t of a request, checked to be a page's first slot (builders read only
// page-aligned positions; validate(EngineBatch) checks every token).
int32_t page_of(const EngineBatch& b, int i, const ReqGeom& g, int64_t t, int page_size);

// Shape and consistency checks without a cache (the conversions run them on their input).
void check_csr_structure(const PagedCsr& c);
void check_table_structure(const PageTable& t);

}  // namespace clattn::meta
