// Paged-KV metadata: builders from SGLang-style engine tables to FlashInfer CSR,
// FlashAttention/vLLM page tables, slot mappings and fixed-page block tables (host C++
// and OpenCL, identical output), the conversions between the forms, and validation.
// Rules and decisions: docs/metadata.md. Contracts: DESIGN.md "Data contracts".
#pragma once
#include <cstdint>
#include <vector>

#include "clattn/context.hpp"

namespace clattn {

// ---------------------------------------------------------------------------------------
// Engine inputs (SGLang semantics), host pointers. A slot s lives in page s / P at offset
// s % P; request i owns row req_pool_indices[i] of req_to_token, whose entry t is the slot
// of the request's token at position t.
struct EngineBatch {
  const int32_t* req_to_token = nullptr;  // [pool_size, max_ctx]
  int pool_size = 0;
  int max_ctx = 0;
  const int32_t* req_pool_indices = nullptr;  // [batch_size]
  const int32_t* seq_lens = nullptr;          // [batch_size], KV length after this step
  int batch_size = 0;
  // Extend (prefill with prefix) when extend_lens != nullptr; then prefix_lens is required
  // and prefix_lens[i] + extend_lens[i] == seq_lens[i]. Decode: both nullptr (one query
  // per request, at position seq_lens[i] - 1).
  const int32_t* prefix_lens = nullptr;
  const int32_t* extend_lens = nullptr;
  bool is_extend() const { return extend_lens != nullptr; }
};

// FlashInfer paged-KV CSR. A request with no pages has kv_last_page_len 0; every other
// request has 1 <= kv_last_page_len <= page_size.
struct PagedCsr {
  int page_size = 1;
  std::vector<int32_t> kv_indptr;         // [B+1], pages
  std::vector<int32_t> kv_indices;        // [kv_indptr[B]] page ids
  std::vector<int32_t> kv_last_page_len;  // [B]
  std::vector<int32_t> qo_indptr;         // [B+1] for extend; empty for decode
  // Sliding-window form only ([B]): offset of the first kept key inside the request's
  // first listed page (0 for requests with no pages). Empty when not windowed.
  std::vector<int32_t> kv_start_offset;

  int batch_size() const { return int(kv_last_page_len.size()); }
  int num_pages(int i) const { return kv_indptr[size_t(i) + 1] - kv_indptr[size_t(i)]; }
  // Keys covered by request i: (pages-1)*P + last_page_len - start_offset (0 with no pages).
  // Computed in int: call it on a CSR that passed validate(), which checks that it fits.
  int kv_len(int i) const {
    int n = num_pages(i);
    if (n <= 0) return 0;
    int off = kv_start_offset.empty() ? 0 : kv_start_offset[size_t(i)];
    return (n - 1) * page_size + kv_last_page_len[size_t(i)] - off;
  }
  bool windowed() const { return !kv_start_offset.empty(); }
};

// FlashAttention / vLLM page table. Row i lists the pages of request i; entries past
// ceil(seq_lens[i] / page_size) are -1 (readers must ignore them).
struct PageTable {
  int page_size = 1;
  int max_pages = 0;                  // row width
  std::vector<int32_t> page_table;    // [B, max_pages], padded with -1
  std::vector<int32_t> seq_lens;      // [B]
  std::vector<int32_t> cu_seqlens_q;  // [B+1] for extend; empty for decode (query row i = request i)
  std::vector<int32_t> cu_seqlens_k;  // [B+1], prefix sum of seq_lens

  int batch_size() const { return int(seq_lens.size()); }
};

// The paged cache the metadata points into: num_pages pages of page_size tokens.
struct CacheShape {
  int num_pages = 0;
  int page_size = 1;
};

// ---------------------------------------------------------------------------------------
// Host builders. Each checks the batch in O(B + pages) first (pool indices in range,
// 0 <= seq_len <= max_ctx, prefix + extend == seq_len, every page's first slot
// non-negative and at offset 0 of its page) and throws clattn::Error(InvalidArgument)
// naming the field, request and value. The O(tokens) whole-page check is validate(EngineBatch).
// Each has an overload writing into `out`, reusing its vectors' capacity (no allocation
// in steady state); when it throws, `out` is left empty.

// FlashInfer CSR. window_left = W >= 0 keeps only the keys the request's first query row
// can see (decode: positions >= seq_len - (W+1); extend: >= prefix_len - W, clamped at 0),
// listing pages from the one holding the first kept key and filling kv_start_offset.
CLATTN_API PagedCsr build_csr(const EngineBatch& b, int page_size, int window_left = -1);
CLATTN_API void build_csr(const EngineBatch& b, int page_size, int window_left, PagedCsr& out);
// Page table; max_pages = 0 picks the tightest width (max pages of any request, at least 1);
// a larger value pads further; a smaller one than some request needs is rejected.
CLATTN_API PageTable build_page_table(const EngineBatch& b, int page_size, int max_pages = 0);
CLATTN_API void build_page_table(const EngineBatch& b, int page_size, int max_pages, PageTable& out);
// Decode: slot of position seq_len-1 per request (-1 for a request with seq_len 0, i.e.
// skipped). Extend: slots of positions prefix_len .. seq_len-1, request-major.
CLATTN_API std::vector<int32_t> build_slot_mapping(const EngineBatch& b);
CLATTN_API void build_slot_mapping(const EngineBatch& b, std::vector<int32_t>& out);
// Page ids at a fixed block size (e.g. MLA's 64): [B, max_blocks] padded with -1, the
// page_table of build_page_table(b, block_size, max_blocks). *max_blocks_out gets the
// width when non-null; max_blocks = 0 picks the tightest.
CLATTN_API std::vector<int32_t> build_block_table(const EngineBatch& b, int block_size, int* max_blocks_out = nullptr,
                                                  int max_blocks = 0);

// Conversions (exact inverses on builder output). csr_to_page_table rejects a windowed
// CSR (a page table has no start offset: FlashAttention applies its window itself);
// qo_indptr <-> cu_seqlens_q (both empty for decode). Both check their input's structure.
CLATTN_API PageTable csr_to_page_table(const PagedCsr& c);
CLATTN_API PagedCsr page_table_to_csr(const PageTable& t);

// ---------------------------------------------------------------------------------------
// Validation: throws clattn::Error(InvalidArgument) whose message names the field, the
// request (or token) index and the bad value, e.g. "kv_last_page_len[3] = 0: ...".

// indptr/shape rules, 1 <= last_page_len <= P (0 exactly when a request has no pages),
// page ids in [0, num_pages), qo_len <= kv_len, window offsets in range. With seq_lens
// ([B]): kv_len == seq_len (windowed: kv_len <= seq_len and the last page ends at seq_len).
CLATTN_API void validate(const PagedCsr& c, const CacheShape& cache, const int32_t* seq_lens = nullptr);
// Shape, seq_lens >= 0, ceil(seq_len/P) <= max_pages, used entries in [0, num_pages),
// cu_seqlens_k / cu_seqlens_q (each may be empty = absent) consistent, qo_len <= seq_len.
CLATTN_API void validate(const PageTable& t, const CacheShape& cache);
// Negative slots are padding (skipped); others must be < num_pages * page_size.
CLATTN_API void validate_slot_mapping(const int32_t* slots, int64_t n, const CacheShape& cache);
CLATTN_API void validate_slot_mapping(const int64_t* slots, int64_t n, const CacheShape& cache);
// The engine batch, token by token: pool indices, lengths, every slot >= 0, and with
// page_size > 1 position t at offset t % P of the request's (t / P)-th page, all tokens of
// one page in the same physical page. The CacheShape overload also bounds slots by
// num_pages * page_size.
CLATTN_API void validate(const EngineBatch& b, int page_size);
CLATTN_API void validate(const EngineBatch& b, const CacheShape& cache);

// ---------------------------------------------------------------------------------------
// Device builders: the same outputs from device-resident engine tables, computed by OpenCL
// kernels (one work-group per request). Enqueue only: no host sync, nothing blocks; on
// `queue` (nullptr = the context's queue) in its order. Buffers are int32. Host-side
// argument and buffer-size checks (clGetMemObjectInfo) run before anything is enqueued.
// The kernels assume a valid batch (check it with validate_device in debug builds); an
// out-of-range pool index or seq_len outside [0, max_ctx] makes that request empty
// rather than reading out of bounds.
struct DeviceEngineBatch {
  cl_mem req_to_token = nullptr;  // [pool_size, max_ctx]
  int pool_size = 0;
  int max_ctx = 0;
  cl_mem req_pool_indices = nullptr;  // [batch_size]
  cl_mem seq_lens = nullptr;          // [batch_size]
  int batch_size = 0;
  // Extend when extend_lens != nullptr. The kernels derive prefix_len = seq_len -
  // extend_len and never read prefix_lens (validate_device does).
  cl_mem prefix_lens = nullptr;
  cl_mem extend_lens = nullptr;
};

struct DeviceCsr {
  cl_mem kv_indptr = nullptr;         // [B+1]
  cl_mem kv_indices = nullptr;        // >= the real total, e.g. max_csr_pages(); writes past its end are dropped
  cl_mem kv_last_page_len = nullptr;  // [B]
  cl_mem qo_indptr = nullptr;         // [B+1]; optional, extend only
  cl_mem kv_start_offset = nullptr;   // [B]; required when window_left >= 0, else ignored
};

struct DevicePageTable {
  cl_mem page_table = nullptr;    // [B, max_pages]
  cl_mem seq_lens = nullptr;      // [B]; optional copy of the batch's seq_lens
  cl_mem cu_seqlens_q = nullptr;  // [B+1]; optional, extend only
  cl_mem cu_seqlens_k = nullptr;  // [B+1]; optional
};

// Upper bound on kv_indptr[B] for any batch of this shape (with or without a window):
// batch_size * ceil(max_ctx / page_size). Size kv_indices by it when the host does not
// know the lengths.
CLATTN_API int64_t max_csr_pages(int batch_size, int max_ctx, int page_size);
// Upper bound on the page-table width: ceil(max_ctx / page_size) (at least 1).
CLATTN_API int max_table_pages(int max_ctx, int page_size);

CLATTN_API void build_csr_device(const Context& ctx, const DeviceEngineBatch& b, int page_size, int window_left,
                                 const DeviceCsr& out, cl_command_queue queue = nullptr);
// max_pages: row width of out.page_table (>= 1); rows of requests needing more are cut.
CLATTN_API void build_page_table_device(const Context& ctx, const DeviceEngineBatch& b, int page_size, int max_pages,
                                        const DevicePageTable& out, cl_command_queue queue = nullptr);
// slot_mapping: decode [B]; extend [sum of extend_lens] (writes past its end are dropped).
CLATTN_API void build_slot_mapping_device(const Context& ctx, const DeviceEngineBatch& b, cl_mem slot_mapping,
                                          cl_command_queue queue = nullptr);
// [B, max_blocks] padded with -1 (build_page_table_device with only the table).
CLATTN_API void build_block_table_device(const Context& ctx, const DeviceEngineBatch& b, int block_size, int max_blocks,
                                         cl_mem block_table, cl_command_queue queue = nullptr);

// Debug paths (blocking: they finish `queue` and copy back).
// The device CSR as host vectors (qo_indptr / kv_start_offset only when their buffers are
// given). kv_indices holds min(kv_indptr[B], buffer capacity) entries.
CLATTN_API PagedCsr download_csr(const Context& ctx, const DeviceCsr& c, int batch_size, int page_size,
                                 cl_command_queue queue = nullptr);
// Copies the device engine tables back and runs validate(EngineBatch, page_size).
CLATTN_API void validate_device(const Context& ctx, const DeviceEngineBatch& b, int page_size,
                                cl_command_queue queue = nullptr);

}  // namespace clattn
