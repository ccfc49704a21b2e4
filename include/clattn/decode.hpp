// Paged decode (plan/run): one query token per request against its paged K/V. Takes
// caller-owned cl_mem buffers, checks its arguments before enqueueing anything
// (clattn::Error naming the argument and request; nothing is written on a rejected call),
// and only enqueues: no host sync, no clFinish. Decisions and semantics: docs/decode.md.
// Contracts: DESIGN.md "Data contracts".
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

// One query token per request: q [B, Hq, D] attends to the request's paged KV (all of it,
// or with window_left = W >= 0 the last W + 1 keys), writing o [B, Hq, D] and optionally
// lse [B, Hq] (natural log, f32). Query position = kv_len - 1. Empty request: o = 0,
// lse = -inf (with sinks: lse = sink). See docs/decode.md.
struct DecodeOptions {
  int num_qo_heads = 0;             // Hq; Hq % Hkv == 0
  DType q_dtype = DType::BF16;      // f32 f16 bf16
  DType o_dtype = DType::BF16;      // f32 f16 bf16
  float sm_scale = 0.0f;            // 0: 1/sqrt(head_dim)
  float logits_soft_cap = 0.0f;     // > 0: s = cap * tanh(s / cap) after sm_scale
  int window_left = -1;             // >= 0: keys at positions >= kv_len - 1 - W only
  // Fixed split tile so a request's output is bitwise independent of its batch mates.
  bool deterministic = false;
  int split_tokens = 0;             // deterministic tile (tokens); 0 = parameter default
  int max_splits = 0;               // per request; 0 = planner's choice; 1 = never split (except on a
                                    // device with a loop-trip limit, docs/portability.md)
  bool validate = true;             // run metadata validation (off for the hot path)
  std::map<std::string, int> params;  // parameter overrides (tuning, benchmarks); a name the op lacks: InvalidArgument
  PlanBuffer plan_buffer;           // optional caller-owned table memory (see PlanBuffer)
};

namespace detail { struct DecodePlanState; }

// Host plan of one decode batch: the split-K work list and its device copy, the chosen
// kernel. Immutable; cheap to copy (shares its device tables). to_vector() gives the
// plain-data form (FlashInfer's PlanInfo idea); from_vector() rebuilds a plan from it.
class CLATTN_API DecodePlan {
 public:
  DecodePlan() = default;

  int batch_size = 0, num_qo_heads = 0, num_kv_heads = 0, head_dim = 0;
  int page_size = 0;
  PagedKV cache;                  // the cache descriptor the plan was made for
  DType q_dtype = DType::BF16, o_dtype = DType::BF16;
  bool page_table = false;        // metadata form: false = CSR kv_indices, true = page table
  bool fixed = false;             // a fixed-capacity plan (decode_plan_fixed)
  int64_t page_ids_needed = 0;    // entries the run's page_ids buffer must hold
  int num_work = 0;               // (request, KV chunk) work items
  int num_partials = 0;           // partial states written to the workspace
  int num_merges = 0;             // requests merged by the second pass
  int chunk_tokens = 0;           // split tile (tokens), 0 = no split
  int64_t workspace_bytes = 0;    // caller's workspace size for decode_run (0 = none)
  int64_t table_bytes = 0;        // bytes of the plan's work table (PlanBuffer size that fits)
  std::string variant;            // kernel variant chosen ("nv_ptx_shfl", "generic")
  std::string kernel_options;     // its build options
  // The kernel's tile: work-group size, lanes per token, query heads per group block,
  // tokens per slot per step, load width, group blocks per KV head.
  struct Tile {
    int wg = 0, tpt = 0, gmax = 0, unroll = 0, load_bytes = 0, head_blocks = 0;
  } tile;

  std::vector<int64_t> to_vector() const;
  static DecodePlan from_vector(const Context& ctx, const std::vector<int64_t>& v, cl_command_queue queue = nullptr);

  std::shared_ptr<const detail::DecodePlanState> state() const { return state_; }
  std::shared_ptr<const detail::DecodePlanState> state_;
};

// Plans from CSR metadata (kv_indptr / kv_last_page_len / optional kv_start_offset; the
// run reads page ids from a device copy of kv_indices) or from a page table (the run
// reads page ids from a device copy of page_table [B, max_pages]). Validates, computes
// the split-K work list and workspace size, builds (or loads) the kernels, and uploads
// the work list with one non-blocking write on `queue` (nullptr = the context's queue).
CLATTN_API DecodePlan decode_plan(const Context& ctx, const PagedCsr& csr, const PagedKV& cache,
                                  const DecodeOptions& opt, cl_command_queue queue = nullptr);
CLATTN_API DecodePlan decode_plan(const Context& ctx, const PageTable& table, const PagedKV& cache,
                                  const DecodeOptions& opt, cl_command_queue queue = nullptr);

// Fixed-capacity plans, for capture and replay (docs/replay.md): kernels, NDRanges, table
// and workspace sizes fixed for up to max_batch requests of up to max_pages pages each, the
// work list rewritten on the device each step by decode_refresh, so recorded launches
// (or a command buffer) stay valid from step to step. The metadata is a page table
// [max_batch, max_pages] (build_page_table_device). The split is the deterministic one
// (DecodeOptions::split_tokens or the parameter row's DET_CHUNK), so a request's output has
// the bits of a normal plan made with deterministic = true.
struct DecodeCapacity {
  int max_batch = 0;  // requests: q/o rows, page-table rows
  int max_pages = 0;  // page-table columns (pages per request at most)
};
CLATTN_API DecodePlan decode_plan_fixed(const Context& ctx, const DecodeCapacity& cap, const PagedKV& cache,
                                        const DecodeOptions& opt, cl_command_queue queue = nullptr);
// Rewrites a fixed plan's work list for the step's seq_lens (device int32 [max_batch], each
// at most max_pages * page_size; 0 marks a padded request: no work, its o/lse rows are not
// written). positions (optional, int32 [max_batch]) receives seq_len - 1, the new token's
// position (RoPE). One kernel, enqueue only; decode_run after it reads the new list.
CLATTN_API void decode_refresh(const Context& ctx, const DecodePlan& plan, cl_mem seq_lens, cl_mem positions = nullptr,
                               const Enqueue& e = {});

struct DecodeBuffers {
  cl_mem q = nullptr;          // [B, Hq, D] q_dtype
  cl_mem k_cache = nullptr;    // PagedKV layout, cache dtype
  cl_mem v_cache = nullptr;
  cl_mem page_ids = nullptr;   // int32: kv_indices (CSR plan) or page_table (page-table plan)
  cl_mem o = nullptr;          // [B, Hq, D] o_dtype
  cl_mem lse = nullptr;        // [B, Hq] f32, optional
  cl_mem workspace = nullptr;  // >= plan.workspace_bytes (when nonzero)
  cl_mem sinks = nullptr;      // [Hq] f32 sink logits, optional
  float k_scale = 1.0f, v_scale = 1.0f;  // loaded = stored * scale (int8 / int4 caches: must be 1)
  cl_mem k_scale_cache = nullptr, v_scale_cache = nullptr;  // int8 / int4 caches: the scales (PagedKV)
  // Optional per-KV-head scales [Hkv] f32 (> 0), multiplied with k_scale / v_scale: loaded =
  // stored * k_scale * k_head_scales[head] (vLLM / FlashInfer per-head fp8 scales). Both or neither.
  cl_mem k_head_scales = nullptr, v_head_scales = nullptr;
};

// Enqueues the plan's kernels (decode, then the merge pass when the plan splits). Only
// checks buffer sizes (clGetMemObjectInfo) and enqueues: allocates nothing, never blocks.
CLATTN_API void decode_run(const Context& ctx, const DecodePlan& plan, const DecodeBuffers& b, const Enqueue& e = {});

}  // namespace clattn
