// C ABI: metadata builders into caller arrays (sizes first), device builders, validation.
#include <algorithm>
#include <vector>

#include "backends/c_api/c_api_common.hpp"
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

// Per-thread scratch so that steady-state calls reuse capacity (no allocation).
thread_local clattn::PagedCsr scratch_csr;
thread_local clattn::PageTable scratch_table;
thread_local std::vector<int32_t> scratch_slots;

void put(int32_t* dst, const std::vector<int32_t>& v) {
  if (!v.empty()) std::copy(v.begin(), v.end(), dst);
}

void check_capacity(const char* what, int64_t capacity, int64_t needed) {
  if (capacity < needed)
    invalid(std::string(what) + " = " + std::to_string(capacity) + " is too small: this batch needs " +
            std::to_string(needed) + " entries");
}

// Copies a built CSR into the caller's arrays (capacity checked before anything is written).
void write_csr(const clattn::PagedCsr& c, int batch_size, const clattn_csr_out* out, int64_t* num_indices) {
  const int64_t n = c.kv_indptr.back();
  if (num_indices) *num_indices = n;
  if (n > 0) need(out->kv_indices, "out.kv_indices");
  check_capacity("out.kv_indices_capacity", out->kv_indices_capacity, n);
  put(out->kv_indptr, c.kv_indptr);
  put(out->kv_indices, c.kv_indices);
  put(out->kv_last_page_len, c.kv_last_page_len);
  if (out->qo_indptr && !c.qo_indptr.empty()) put(out->qo_indptr, c.qo_indptr);
  if (out->kv_start_offset) {
    if (c.windowed()) put(out->kv_start_offset, c.kv_start_offset);
    else std::fill(out->kv_start_offset, out->kv_start_offset + batch_size, 0);
  }
}

void write_table(const clattn::PageTable& t, const clattn_page_table_out* out, int* width) {
  if (width) *width = t.max_pages;
  const int64_t n = int64_t(t.batch_size()) * t.max_pages;
  if (n > 0) need(out->page_table, "out.page_table");
  check_capacity("out.page_table_capacity", out->page_table_capacity, n);
  put(out->page_table, t.page_table);
  if (out->cu_seqlens_q && !t.cu_seqlens_q.empty()) put(out->cu_seqlens_q, t.cu_seqlens_q);
  if (out->cu_seqlens_k) put(out->cu_seqlens_k, t.cu_seqlens_k);
  if (out->seq_lens) put(out->seq_lens, t.seq_lens);
}

}  // namespace

using clattn::capi::guard;
using clattn::capi::with_enqueue;

extern "C" {

clattn_status clattn_metadata_sizes_get(const clattn_engine_batch* b, int page_size, int window_left,
                                        clattn_metadata_sizes* out) {
  return guard([&] {
    need(out, "out");
    clattn::EngineBatch e = to_cpp_batch(b);
    clattn::build_csr(e, page_size, window_left, scratch_csr);
    clattn::build_page_table(e, page_size, 0, scratch_table);
    clattn_metadata_sizes s{};
    s.csr_indices = scratch_csr.kv_indptr.back();
    s.table_width = scratch_table.max_pages;
    int64_t rows = e.batch_size;
    if (e.is_extend()) {
      rows = 0;
      for (int i = 0; i < e.batch_size; ++i) rows += e.extend_lens[i];
    }
    s.num_slots = rows;
    s.num_qo_rows = rows;
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
    clattn::build_csr(e, page_size, window_left, scratch_csr);
    write_csr(scratch_csr, e.batch_size, out, num_indices);
  });
}

clattn_status clattn_build_page_table(const clattn_engine_batch* b, int page_size, int max_pages,
                                      const clattn_page_table_out* out, int* width) {
  return guard([&] {
    need(out, "out");
    clattn::EngineBatch e = to_cpp_batch(b);
    clattn::build_page_table(e, page_size, max_pages, scratch_table);
    write_table(scratch_table, out, width);
  });
}

clattn_status clattn_build_slot_mapping(const clattn_engine_batch* b, int32_t* slots, int64_t capacity,
                                        int64_t* num_slots) {
  return guard([&] {
    clattn::EngineBatch e = to_cpp_batch(b);
    clattn::build_slot_mapping(e, scratch_slots);
    const int64_t n = int64_t(scratch_slots.size());
    if (num_slots) *num_slots = n;
    if (n > 0) need(slots, "slots");
    check_capacity("capacity", capacity, n);
    put(slots, scratch_slots);
  });
}

clattn_status clattn_build_block_table(const clattn_engine_batch* b, int block_size, int max_blocks, int32_t* table,
                                       int64_t capacity, int* width) {
  return guard([&] {
    clattn::EngineBatch e = to_cpp_batch(b);
    // The block table is the page table at block_size (build_block_table's definition),
    // built into the reused scratch.
    clattn::PageTable& t = scratch_table;
    clattn::build_page_table(e, block_size, max_blocks, t);
    if (width) *width = t.max_pages;
    const int64_t n = int64_t(e.batch_size) * t.max_pages;
    if (n > 0) need(table, "table");
    check_capacity("capacity", capacity, n);
    put(table, t.page_table);
  });
}

clattn_status clattn_csr_to_page_table(const clattn_csr* csr, const clattn_page_table_out* out, int* width) {
  return guard([&] {
    need(out, "out");
    clattn::PagedCsr c = to_cpp(csr, "csr", true, true);
    write_table(clattn::csr_to_page_table(c), out, width);
  });
}

clattn_status clattn_page_table_to_csr(const clattn_page_table* table, const clattn_csr_out* out,
                                       int64_t* num_indices) {
  return guard([&] {
    need(out, "out");
    need(out->kv_indptr, "out.kv_indptr");
    need(out->kv_last_page_len, "out.kv_last_page_len");
    clattn::PageTable t = to_cpp(table, "table", true, true);
    write_csr(clattn::page_table_to_csr(t), table->batch_size, out, num_indices);
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
    clattn::PageTable t = to_cpp(table, "table", true, true);
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
