// C ABI: metadata builders into caller arrays (sizes first), device builders, validation.
// Each builder and conversion sizes its output in O(B) and checks the caller's capacity
// before it allocates anything for the output or writes to the caller's arrays.
#include <algorithm>
#include <vector>

#include "backends/c_api/c_api_common.hpp"
#include "backends/metadata/checks.hpp"
#include "clattn/metadata.hpp"

namespace {

using clattn::capi::invalid;
using clattn::capi::need;
using clattn::capi::to_cpp;

clattn::EngineBatch to_cpp_batch(const clattn_engine_batch* b) {
  need(b, "batch");
  clattn::EngineBatch e;
  e.req_to_token = b->req_to_token;
  e.pool_size = b->pool_size;
  e.max_ctx = b->max_ctx;
  e.req_pool_indices = b->req_pool_indices;
  e.seq_lens = b->seq_lens;
  e.batch_size = b->batch_size;
  e.prefix_lens = b->prefix_lens;
  e.extend_lens = b->extend_lens;
  if (e.batch_size < 0) invalid("batch.batch_size = " + std::to_string(e.batch_size) + " is negative");
  return e;
}

clattn::DeviceEngineBatch to_cpp_dev(const clattn_device_engine_batch* b) {
  need(b, "batch");
  clattn::DeviceEngineBatch e;
  e.req_to_token = b->req_to_token;
  e.pool_size = b->pool_size;
  e.max_ctx = b->max_ctx;
  e.req_pool_indices = b->req_pool_indices;
  e.seq_lens = b->seq_lens;
  e.batch_size = b->batch_size;
  e.prefix_lens = b->prefix_lens;
  e.extend_lens = b->extend_lens;
  return e;
}

// Per-thread scratch so that steady-state calls reuse capacity (no allocation). A call
// that grew a vector past kKeepEntries releases it on the way out: a one-off huge batch
// must not stay resident in every thread that ever built one.
thread_local clattn::PagedCsr scratch_csr;
thread_local clattn::PageTable scratch_table;
thread_local std::vector<int32_t> scratch_slots;

constexpr size_t kKeepEntries = size_t(1) << 20;  // 4 MiB of int32 per vector

void trim(std::vector<int32_t>& v) {
  if (v.capacity() > kKeepEntries) std::vector<int32_t>().swap(v);
}
void trim(clattn::PagedCsr& c) {
  for (auto* v : {&c.kv_indptr, &c.kv_indices, &c.kv_last_page_len, &c.qo_indptr, &c.kv_start_offset}) trim(*v);
}
void trim(clattn::PageTable& t) {
  for (auto* v : {&t.page_table, &t.seq_lens, &t.cu_seqlens_q, &t.cu_seqlens_k}) trim(*v);
}

// Trims a scratch value when the call ends, whichever way it ends.
template <class T>
struct Scratch {
  T& value;
  ~Scratch() { trim(value); }
};

void put(int32_t* dst, const std::vector<int32_t>& v) {
  if (!v.empty()) std::copy(v.begin(), v.end(), dst);
}

// The output array must hold `needed` entries (and be non-null when needed > 0). Runs
// before anything is allocated for the output or written to the caller's arrays.
void check_out(const void* array, const char* array_name, const char* capacity_name, int64_t capacity,
               int64_t needed) {
  if (needed > 0) need(array, array_name);
  if (capacity < needed)
    invalid(std::string(capacity_name) + " = " + std::to_string(capacity) + " is too small: this batch needs " +
            std::to_string(needed) + " entries");
}

// Copies a built CSR into the caller's arrays (sizes checked by check_out before).
void write_csr(const clattn::PagedCsr& c, int batch_size, const clattn_csr_out* out) {
  put(out->kv_indptr, c.kv_indptr);
  put(out->kv_indices, c.kv_indices);
  put(out->kv_last_page_len, c.kv_last_page_len);
  if (out->qo_indptr && !c.qo_indptr.empty()) put(out->qo_indptr, c.qo_indptr);
  if (out->kv_start_offset) {
    if (c.windowed()) put(out->kv_start_offset, c.kv_start_offset);
    else std::fill(out->kv_start_offset, out->kv_start_offset + batch_size, 0);
  }
}

void write_table(const clattn::PageTable& t, const clattn_page_table_out* out) {
  put(out->page_table, t.page_table);
  if (out->cu_seqlens_q && !t.cu_seqlens_q.empty()) put(out->cu_seqlens_q, t.cu_seqlens_q);
  if (out->cu_seqlens_k) put(out->cu_seqlens_k, t.cu_seqlens_k);
  if (out->seq_lens) put(out->seq_lens, t.seq_lens);
}

// The C page table for the metadata calls. Its shape is checked before the copy, and
// cu_seqlens_k stays empty (absent) instead of being summed from unchecked seq_lens.
clattn::PageTable table_from_c(const clattn_page_table* t) {
  need(t, "table");
  if (t->batch_size < 0 || t->max_pages < 0)
    invalid("table.batch_size/max_pages is negative (" + std::to_string(t->batch_size) + ", " +
            std::to_string(t->max_pages) + ")");
  clattn::meta::check_table_entries(t->batch_size, t->max_pages, "table.page_table");
  clattn::PageTable pt;
  pt.page_size = t->page_size;
  pt.max_pages = t->max_pages;
  pt.page_table = clattn::capi::copy(t->page_table, int64_t(t->batch_size) * t->max_pages, "table.page_table");
  pt.seq_lens = clattn::capi::copy(t->seq_lens, t->batch_size, "table.seq_lens");
  if (t->cu_seqlens_q)
    pt.cu_seqlens_q = clattn::capi::copy(t->cu_seqlens_q, int64_t(t->batch_size) + 1, "table.cu_seqlens_q");
  return pt;
}

}  // namespace

using clattn::capi::guard;
using clattn::capi::with_enqueue;
namespace meta = clattn::meta;

extern "C" {

clattn_status clattn_metadata_sizes_get(const clattn_engine_batch* b, int page_size, int window_left,
                                        clattn_metadata_sizes* out) {
  return guard([&] {
    need(out, "out");
    clattn::EngineBatch e = to_cpp_batch(b);
    clattn_metadata_sizes s{};
    s.csr_indices = meta::csr_size(e, page_size, window_left);
    s.table_width = meta::table_width(e, page_size, 0);
    s.num_slots = meta::slot_count(e);
    s.num_qo_rows = s.num_slots;
    meta::check_pages(e, page_size);  // a batch the builders reject has no sizes
    *out = s;
  });
}

clattn_status clattn_max_csr_pages(int batch_size, int max_ctx, int page_size, int64_t* out) {
  return guard([&] { *need(out, "out") = clattn::max_csr_pages(batch_size, max_ctx, page_size); });
}

clattn_status clattn_max_table_pages(int max_ctx, int page_size, int* out) {
  return guard([&] { *need(out, "out") = clattn::max_table_pages(max_ctx, page_size); });
}

clattn_status clattn_build_csr(const clattn_engine_batch* b, int page_size, int window_left, const clattn_csr_out* out,
                               int64_t* num_indices) {
  return guard([&] {
    need(out, "out");
    need(out->kv_indptr, "out.kv_indptr");
    need(out->kv_last_page_len, "out.kv_last_page_len");
    if (window_left >= 0) need(out->kv_start_offset, "out.kv_start_offset (required with window_left >= 0)");
    clattn::EngineBatch e = to_cpp_batch(b);
    const int32_t n = meta::csr_size(e, page_size, window_left);
    if (num_indices) *num_indices = n;
    check_out(out->kv_indices, "out.kv_indices", "out.kv_indices_capacity", out->kv_indices_capacity, n);
    Scratch<clattn::PagedCsr> keep{scratch_csr};
    clattn::build_csr(e, page_size, window_left, scratch_csr);
    write_csr(scratch_csr, e.batch_size, out);
  });
}

clattn_status clattn_build_page_table(const clattn_engine_batch* b, int page_size, int max_pages,
                                      const clattn_page_table_out* out, int* width) {
  return guard([&] {
    need(out, "out");
    clattn::EngineBatch e = to_cpp_batch(b);
    const int w = meta::table_width(e, page_size, max_pages);
    if (width) *width = w;
    check_out(out->page_table, "out.page_table", "out.page_table_capacity", out->page_table_capacity,
              int64_t(e.batch_size) * w);
    Scratch<clattn::PageTable> keep{scratch_table};
    clattn::build_page_table(e, page_size, max_pages, scratch_table);
    write_table(scratch_table, out);
  });
}

clattn_status clattn_build_slot_mapping(const clattn_engine_batch* b, int32_t* slots, int64_t capacity,
                                        int64_t* num_slots) {
  return guard([&] {
    clattn::EngineBatch e = to_cpp_batch(b);
    const int32_t n = meta::slot_count(e);
    if (num_slots) *num_slots = n;
    check_out(slots, "slots", "capacity", capacity, n);
    Scratch<std::vector<int32_t>> keep{scratch_slots};
    clattn::build_slot_mapping(e, scratch_slots);
    put(slots, scratch_slots);
  });
}

clattn_status clattn_build_block_table(const clattn_engine_batch* b, int block_size, int max_blocks, int32_t* table,
                                       int64_t capacity, int* width) {
  return guard([&] {
    clattn::EngineBatch e = to_cpp_batch(b);
    // The block table is the page table at block_size (build_block_table's definition).
    const int w = meta::table_width(e, block_size, max_blocks);
    if (width) *width = w;
    check_out(table, "table", "capacity", capacity, int64_t(e.batch_size) * w);
    Scratch<clattn::PageTable> keep{scratch_table};
    clattn::build_page_table(e, block_size, max_blocks, scratch_table);
    put(table, scratch_table.page_table);
  });
}

clattn_status clattn_csr_to_page_table(const clattn_csr* csr, const clattn_page_table_out* out, int* width) {
  return guard([&] {
    need(out, "out");
    clattn::PagedCsr c = to_cpp(csr, "csr", true, true);
    const int w = meta::table_width(c);
    if (width) *width = w;
    check_out(out->page_table, "out.page_table", "out.page_table_capacity", out->page_table_capacity,
              int64_t(c.batch_size()) * w);
    Scratch<clattn::PageTable> keep{scratch_table};
    meta::csr_to_table_into(c, w, scratch_table);
    write_table(scratch_table, out);
  });
}

clattn_status clattn_page_table_to_csr(const clattn_page_table* table, const clattn_csr_out* out,
                                       int64_t* num_indices) {
  return guard([&] {
    need(out, "out");
    need(out->kv_indptr, "out.kv_indptr");
    need(out->kv_last_page_len, "out.kv_last_page_len");
    clattn::PageTable t = table_from_c(table);
    const int32_t n = meta::csr_size(t);
    if (num_indices) *num_indices = n;
    check_out(out->kv_indices, "out.kv_indices", "out.kv_indices_capacity", out->kv_indices_capacity, n);
    Scratch<clattn::PagedCsr> keep{scratch_csr};
    meta::table_to_csr_into(t, scratch_csr);
    write_csr(scratch_csr, table->batch_size, out);
  });
}

clattn_status clattn_validate_csr(const clattn_csr* csr, int num_pages, const int32_t* seq_lens) {
  return guard([&] {
    clattn::PagedCsr c = to_cpp(csr, "csr", true, true);
    clattn::CacheShape cs;
    cs.num_pages = num_pages;
    cs.page_size = csr->page_size;
    clattn::validate(c, cs, seq_lens);
  });
}

clattn_status clattn_validate_page_table(const clattn_page_table* table, int num_pages) {
  return guard([&] {
    clattn::PageTable t = table_from_c(table);
    clattn::CacheShape cs;
    cs.num_pages = num_pages;
    cs.page_size = table->page_size;
    clattn::validate(t, cs);
  });
}

clattn_status clattn_validate_slot_mapping(const void* slots, int slot_dtype, int64_t n, int num_pages,
                                           int page_size) {
  return guard([&] {
    if (n > 0) need(slots, "slots");
    clattn::CacheShape cs;
    cs.num_pages = num_pages;
    cs.page_size = page_size;
    if (slot_dtype == int(clattn::DType::I32)) clattn::validate_slot_mapping(static_cast<const int32_t*>(slots), n, cs);
    else if (slot_dtype == int(clattn::DType::I64))
      clattn::validate_slot_mapping(static_cast<const int64_t*>(slots), n, cs);
    else invalid("slot_dtype = " + std::to_string(slot_dtype) + " must be 5 (i32) or 6 (i64)");
  });
}

clattn_status clattn_validate_engine_batch(const clattn_engine_batch* b, int num_pages, int page_size) {
  return guard([&] {
    clattn::EngineBatch e = to_cpp_batch(b);
    clattn::CacheShape cs;
    cs.num_pages = num_pages;
    cs.page_size = page_size;
    clattn::validate(e, cs);
  });
}

clattn_status clattn_build_csr_device(clattn_context ctx, const clattn_device_engine_batch* b, int page_size,
                                      int window_left, const clattn_device_csr* out, const clattn_enqueue* e) {
  return guard([&] {
    auto d = to_cpp_dev(b);
    need(out, "out");
    clattn::DeviceCsr o;
    o.kv_indptr = out->kv_indptr;
    o.kv_indices = out->kv_indices;
    o.kv_last_page_len = out->kv_last_page_len;
    o.qo_indptr = out->qo_indptr;
    o.kv_start_offset = out->kv_start_offset;
    with_enqueue(ctx, e, "build_csr_device",
                 [&](cl_command_queue q) { clattn::build_csr_device(ctx->ctx, d, page_size, window_left, o, q); });
  });
}

clattn_status clattn_build_page_table_device(clattn_context ctx, const clattn_device_engine_batch* b, int page_size,
                                             int max_pages, const clattn_device_page_table* out,
                                             const clattn_enqueue* e) {
  return guard([&] {
    auto d = to_cpp_dev(b);
    need(out, "out");
    clattn::DevicePageTable o;
    o.page_table = out->page_table;
    o.seq_lens = out->seq_lens;
    o.cu_seqlens_q = out->cu_seqlens_q;
    o.cu_seqlens_k = out->cu_seqlens_k;
    with_enqueue(ctx, e, "build_page_table_device", [&](cl_command_queue q) {
      clattn::build_page_table_device(ctx->ctx, d, page_size, max_pages, o, q);
    });
  });
}

clattn_status clattn_build_slot_mapping_device(clattn_context ctx, const clattn_device_engine_batch* b,
                                               cl_mem slot_mapping, const clattn_enqueue* e) {
  return guard([&] {
    auto d = to_cpp_dev(b);
    with_enqueue(ctx, e, "build_slot_mapping_device",
                 [&](cl_command_queue q) { clattn::build_slot_mapping_device(ctx->ctx, d, slot_mapping, q); });
  });
}

clattn_status clattn_build_block_table_device(clattn_context ctx, const clattn_device_engine_batch* b, int block_size,
                                              int max_blocks, cl_mem block_table, const clattn_enqueue* e) {
  return guard([&] {
    auto d = to_cpp_dev(b);
    with_enqueue(ctx, e, "build_block_table_device", [&](cl_command_queue q) {
      clattn::build_block_table_device(ctx->ctx, d, block_size, max_blocks, block_table, q);
    });
  });
}

}  // extern "C"
