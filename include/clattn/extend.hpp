// Extend / prefill attention (many query rows per request) and the cascade helper.
//
// - extend (paged): q [num_tokens, Hq, D] split into requests by qo_indptr (CSR form) or
//   cu_seqlens_q (page-table form); request i attends to its whole paged KV (cached prefix
//   plus the new tokens, already appended), causal mask aligned to the end: query row j of
//   request i sits at position kv_len_i - qo_len_i + j (DESIGN.md "Causal alignment").
// - prefill (ragged): K and V contiguous [kv_tokens, Hkv, D] split by kv_indptr over tokens
//   (FlashInfer's BatchPrefillWithRaggedKVCacheWrapper); same alignment and options.
// - cascade: a prefix shared by a group of requests is attended once (all their query rows
//   as one non-causal request), each request's own suffix causally, and the two states
//   are merged with merge_state: the result equals plain extend over prefix + suffix.
//
// Plan/run split as in decode: *_plan validates on the host, builds the tile work list
// (request, query-row tile, KV head), picks and builds the kernel, and uploads the list
// with one non-blocking write; *_run checks buffer sizes and only enqueues. Rejected calls
// throw clattn::Error before anything is enqueued; outputs are untouched.
// Decisions, mask layout and tolerances: docs/extend.md.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "clattn/context.hpp"
#include "clattn/metadata.hpp"
#include "clattn/paged_kv.hpp"
#include "clattn/types.hpp"

namespace clattn {

struct ExtendOptions {
  int num_qo_heads = 0;           // Hq; Hq % Hkv == 0, group Hq / Hkv in 1..16
  DType q_dtype = DType::BF16;    // f32 f16 bf16
  DType o_dtype = DType::BF16;    // f32 f16 bf16
  float sm_scale = 0.0f;          // 0: 1/sqrt(head_dim)
  float logits_soft_cap = 0.0f;   // > 0: s = cap * tanh(s / cap) after sm_scale
  int window_left = -1;           // >= 0: query at position p sees keys >= p - window_left
  bool causal = true;
  // Custom mask (FlashInfer packed_custom_mask, e.g. speculative-decoding trees): host copy
  // of mask_indptr [B+1] in BYTES, as flashinfer.segment_packbits returns it. Request i's
  // mask is qo_len_i rows of kv_len_i bits (bit q*kv_len_i + k = query row q may see key
  // k; little-endian bit order in each byte) starting at byte mask_indptr[i] of the
  // custom_mask buffer; mask_indptr[i+1] - mask_indptr[i] must be ceil(qo_len_i*kv_len_i/8).
  // Empty = no custom mask. ANDed with the causal mask and the window when those are on.
  std::vector<int32_t> mask_indptr;
  bool validate = true;           // run the O(pages) metadata validation (off for the hot path)
  // "" = the device profile's choice; "generic" forces the portable kernel; "nv_mma_sync"
  // asks for the tensor-core kernel (falls back to generic, logged, when unavailable);
  // "nv_wgmma" for its Hopper warpgroup-MMA form (falls back to nv_mma_sync, then generic);
  // "amd_wmma" / "amd_mfma" for the AMD matrix-instruction kernels (fall back, logged).
  // Variants never run on hardware of their kind, forced or not, are used only after they
  // matched the generic kernel on the device (docs/runtime.md, "Self-validation of variants").
  std::string variant;
  std::map<std::string, int> params;  // parameter overrides (tuning, benchmarks); a name the op lacks: InvalidArgument
  PlanBuffer plan_buffer;             // optional caller-owned table memory (context.hpp PlanBuffer)
};

// Contiguous (ragged) K or V: element (token, head, d) at token*stride_token +
// head*stride_head + d (elements); zero strides = [tokens, Hkv, D] contiguous.
struct RaggedKV {
  int64_t num_tokens = 0;  // rows the buffers hold (kv_indptr[B] <= num_tokens)
  int num_kv_heads = 0;
  int head_dim = 0;
  DType dtype = DType::BF16;  // f32 f16 bf16 fp8_e4m3 fp8_e5m2
  int64_t stride_token = 0, stride_head = 0;
};

namespace detail { struct ExtendPlanState; }

class CLATTN_API ExtendPlan {
 public:
  ExtendPlan() = default;

  enum class Source { PagedCsr, PageTable, Ragged };
  Source source = Source::PagedCsr;
  int batch_size = 0, num_qo_heads = 0, num_kv_heads = 0, head_dim = 0;
  int64_t num_tokens = 0;         // query rows (qo_indptr[B])
  DType q_dtype = DType::BF16, o_dtype = DType::BF16, kv_dtype = DType::BF16;
  PagedKV cache;                  // paged sources
  RaggedKV ragged;                // ragged source
  int64_t page_ids_needed = 0;    // int32 entries of page_ids (kv_indices or page_table)
  int64_t mask_bytes_needed = 0;  // bytes of custom_mask (0 = no mask)
  bool has_mask = false;
  int64_t table_bytes = 0;        // bytes of the plan's work table (PlanBuffer size that fits)
  int num_tiles = 0;              // (request, row tile) work items; x num_kv_heads work-groups
  int64_t workspace_bytes = 0;    // caller's workspace for extend_run (0 = none; nv_wgmma with
                                  // the TMA feed: 256 bytes for the k / v tensor maps it writes)
  std::string variant;            // "generic", "cpu", "nv_mma_sync", "nv_wgmma", "intel_dpas",
                                  // "amd_wmma" or "amd_mfma"
  std::string kernel_options;
  struct Tile {
    int wg = 0, rows = 0, keys = 0;  // work-items, packed query rows (tokens x group), keys per step
  } tile;

  std::shared_ptr<const detail::ExtendPlanState> state_;
};

// Paged extend from CSR metadata (csr.qo_indptr required; kv_start_offset honoured) or a
// page table (cu_seqlens_q required). The run reads page ids from a device copy of
// kv_indices / page_table.
CLATTN_API ExtendPlan extend_plan(const Context& ctx, const PagedCsr& csr, const PagedKV& cache,
                                  const ExtendOptions& opt, cl_command_queue queue = nullptr);
CLATTN_API ExtendPlan extend_plan(const Context& ctx, const PageTable& table, const PagedKV& cache,
                                  const ExtendOptions& opt, cl_command_queue queue = nullptr);
// Ragged prefill: qo_indptr [B+1] over q rows, kv_indptr [B+1] over K/V token rows.
CLATTN_API ExtendPlan prefill_plan(const Context& ctx, const std::vector<int32_t>& qo_indptr,
                                   const std::vector<int32_t>& kv_indptr, const RaggedKV& kv,
                                   const ExtendOptions& opt, cl_command_queue queue = nullptr);

struct ExtendBuffers {
  cl_mem q = nullptr;            // [num_tokens, Hq, D] q_dtype
  cl_mem k = nullptr;            // paged: k_cache (PagedKV layout); ragged: K rows
  cl_mem v = nullptr;
  cl_mem page_ids = nullptr;     // paged only: int32 kv_indices (CSR) or page_table [B, max_pages]
  cl_mem o = nullptr;            // [num_tokens, Hq, D] o_dtype
  cl_mem lse = nullptr;          // [num_tokens, Hq] f32, optional
  cl_mem sinks = nullptr;        // [Hq] f32 sink logits, optional
  cl_mem custom_mask = nullptr;  // packed mask bytes; required iff the plan has a mask
  float k_scale = 1.0f, v_scale = 1.0f;  // loaded = stored * scale (int8 / int4 caches: must be 1)
  cl_mem workspace = nullptr;    // >= plan.workspace_bytes when that is nonzero (per-run state)
  // As DecodeBuffers: an int8 cache's row scales or an int4 cache's [scale, zero] group pairs
  // (paged only; PagedKV), and optional per-KV-head scales [Hkv] f32 (> 0) multiplied with
  // k_scale / v_scale (not with int8 / int4). Both or neither.
  cl_mem k_scale_cache = nullptr, v_scale_cache = nullptr;
  cl_mem k_head_scales = nullptr, v_head_scales = nullptr;
};

// Enqueues the plan's kernel. Checks buffer sizes, allocates nothing, never blocks.
CLATTN_API void extend_run(const Context& ctx, const ExtendPlan& plan, const ExtendBuffers& b,
                           const Enqueue& e = {});

// ------------------------------------------------------------------------------ cascade
// shared: the common prefix's pages (a CSR of ONE request, qo_indptr ignored: all query
// rows of the batch attend to it without a causal mask); unique: each request's own pages
// (CSR with qo_indptr; request i's query rows must lie in its suffix: qo_len_i <= its
// unique kv_len_i). Causal and window are applied to the unique level only, so window and
// custom masks are rejected (they would reach into the prefix); sinks join the unique
// level only (counted once). Output = extend over prefix + suffix.
struct CascadePlan {
  ExtendPlan shared, unique;
  int64_t num_tokens = 0;
  int64_t tmp_o_bytes = 0;       // CascadeBuffers::tmp_o: [T, Hq, D] o_dtype
  int64_t tmp_lse_bytes = 0;     // each tmp_lse buffer: [T, Hq] f32
  int64_t workspace_bytes = 0;   // CascadeBuffers::workspace (0 = none), shared by both levels
};
CLATTN_API CascadePlan cascade_plan(const Context& ctx, const PagedCsr& shared, const PagedCsr& unique,
                                    const PagedKV& cache, const ExtendOptions& opt,
                                    cl_command_queue queue = nullptr);
struct CascadeBuffers {
  cl_mem q = nullptr, k_cache = nullptr, v_cache = nullptr;
  cl_mem shared_page_ids = nullptr;   // the shared CSR's kv_indices
  cl_mem unique_page_ids = nullptr;   // the unique CSR's kv_indices
  cl_mem o = nullptr, lse = nullptr;  // lse optional
  // Caller-owned scratch (the run allocates nothing): the shared level's output and lse,
  // and, only when lse is null, the unique level's lse.
  cl_mem tmp_o = nullptr, tmp_lse_shared = nullptr, tmp_lse_unique = nullptr;
  cl_mem sinks = nullptr;
  float k_scale = 1.0f, v_scale = 1.0f;
  cl_mem workspace = nullptr;  // >= plan.workspace_bytes when nonzero
  // As ExtendBuffers (both levels read them): int8 / int4 scale caches, per-KV-head scales.
  cl_mem k_scale_cache = nullptr, v_scale_cache = nullptr;
  cl_mem k_head_scales = nullptr, v_head_scales = nullptr;
};
CLATTN_API void cascade_run(const Context& ctx, const CascadePlan& plan, const CascadeBuffers& b,
                            const Enqueue& e = {});

}  // namespace clattn
