// Sparse paged attention (plan/run): Hierarchical Sparse Attention (HSA: top-k page
// selection by landmark keys, then decode over the selected pages and an optional dense
// window) and DeepSeek sparse attention for MLA (DSA: an indexer scores every key of a
// request and keeps the top-k token positions; MLA decode reads only those). Semantics,
// kernel design and numbers: docs/sparse.md. Contracts: DESIGN.md "Data contracts".
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "clattn/context.hpp"
#include "clattn/metadata.hpp"
#include "clattn/mla.hpp"
#include "clattn/paged_kv.hpp"
#include "clattn/types.hpp"

namespace clattn {

// ================================================================================= HSA
// Page size = chunk size. The last slot of every page holds the page's landmark token
// (LMK): its K row, at slot page_id * P + P - 1, represents the page. A request of L keys
// with window W (0 = none) has
//   window     = positions [max(0, L - W), L)            (attended densely)
//   candidates = its completed pages j with (j + 1) * P <= L - W, in list order
//                (a partial page never is one; a page touching the window never is one)
// Selection scores every candidate page c of selection list h by
//   group: s = sm_scale * (sum of the query rows of KV head h's group) . K_lmk[c, h]
//   head:  s = sm_scale * q[query head h] . K_lmk[c, h / group]
// and keeps the topk highest (ties: the earlier candidate), written in candidate order,
// then -1 / -inf padding: selected_page_ids [B, H_sel, topk] int32 (physical page ids),
// selected_scores [B, H_sel, topk] f32, H_sel = Hkv (group) or Hq (head).
// Sparse decode: query head h attends (softmax, like decode_run) to the union of the
// window's keys and every key of the pages of its selection list (group: its KV head's
// list, head: its own), each key once: a selected page inside the window adds only its
// keys before the window; ids of -1, outside [0, num_pages) or equal to an earlier entry
// of the same list add nothing; a selected page that is the request's partial last page
// adds only its written keys. No key: o = 0, lse = -inf.
enum class HsaStrategy : int { Group = 0, Head = 1 };

struct HsaOptions {
  int num_qo_heads = 0;             // Hq; Hq % Hkv == 0
  int topk = 0;                     // K pages per selection list, >= 1
  HsaStrategy strategy = HsaStrategy::Group;
  int window_size = 0;              // W >= 0 tokens attended densely (SWA->HSA), 0 = none
  // C > 0: hsa_select scores explicit candidates (HsaBuffers::candidates [B, C]) instead of
  // each request's own candidate pages.
  int num_candidates = 0;
  // true: one decode call attends the window and the selected pages, merged by their LSEs
  // (SGLang's SWA/HSA fusion). false: hsa_decode attends the selected pages only (keys
  // before the window) and the caller merges it with a dense window decode (merge_state).
  bool fuse_window = true;
  DType q_dtype = DType::BF16;      // f32 f16 bf16
  DType o_dtype = DType::BF16;      // f32 f16 bf16
  float sm_scale = 0.0f;            // 0: 1/sqrt(head_dim); selection and attention
  float logits_soft_cap = 0.0f;     // > 0: attention scores s = cap * tanh(s / cap)
  int max_splits = 0;               // decode parts per request; 0 = planner's choice
  bool validate = true;             // full metadata validation (off for the hot path)
  std::map<std::string, int> params;  // decode parameter overrides; unknown name: InvalidArgument
  PlanBuffer plan_buffer;           // optional caller-owned table memory
};

namespace detail { struct HsaPlanState; }

// Host plan of one HSA decode batch: candidate ranges, the window ranges and the sparse
// decode's work list (device copy), the kernels. Immutable; cheap to copy.
class CLATTN_API HsaPlan {
 public:
  int batch_size = 0, num_qo_heads = 0, num_kv_heads = 0, head_dim = 0, page_size = 0;
  int topk = 0, num_sel_heads = 0;  // H_sel = Hkv (group) or Hq (head)
  HsaStrategy strategy = HsaStrategy::Group;
  int window_size = 0;
  bool fuse_window = true;
  PagedKV cache;
  DType q_dtype = DType::BF16, o_dtype = DType::BF16;
  bool page_table = false;          // page ids from a page table (true) or CSR kv_indices
  int64_t page_ids_needed = 0;      // int32 entries the run's page_ids buffer must hold
  int max_candidates = 0;           // most candidate pages of one request (or C)
  std::vector<int32_t> num_candidates;  // [B] candidate pages per request
  int num_work = 0, num_partials = 0, num_merges = 0;
  int64_t workspace_bytes = 0;      // caller's workspace for hsa_select / hsa_decode / hsa_run
  int64_t table_bytes = 0;
  std::string select_variant, decode_variant, decode_options;

  std::shared_ptr<const detail::HsaPlanState> state_;
};

// Plans from CSR metadata (no kv_start_offset) or a page table; builds the selection and
// sparse decode kernels; uploads its tables with one non-blocking write.
CLATTN_API HsaPlan hsa_plan(const Context& ctx, const PagedCsr& csr, const PagedKV& cache, const HsaOptions& opt,
                            cl_command_queue queue = nullptr);
CLATTN_API HsaPlan hsa_plan(const Context& ctx, const PageTable& table, const PagedKV& cache, const HsaOptions& opt,
                            cl_command_queue queue = nullptr);

struct HsaBuffers {
  cl_mem q = nullptr;                  // [B, Hq, D] q_dtype
  cl_mem k_cache = nullptr;            // paged K (landmark rows at the pages' last slots)
  cl_mem v_cache = nullptr;            // paged V (hsa_decode / hsa_run)
  cl_mem page_ids = nullptr;           // int32 kv_indices (CSR plan) or page_table
  // Selection output (hsa_select, hsa_run) and sparse decode input (hsa_decode).
  cl_mem selected_page_ids = nullptr;  // [B, H_sel, topk] int32
  cl_mem selected_scores = nullptr;    // [B, H_sel, topk] f32, optional
  // Explicit candidates for hsa_select (SGLang's cand_page_ids / cand_mask): row b lists page
  // ids (-1 padding) whose landmark rows are scored instead of the request's candidate
  // pages; entries with mask 0, -1 or outside [0, num_pages) are not candidates.
  cl_mem candidates = nullptr;         // [B, C] int32 (plan with num_candidates = C > 0)
  cl_mem candidate_mask = nullptr;     // [B, C] uint8, optional
  cl_mem o = nullptr;                  // [B, Hq, D] o_dtype
  cl_mem lse = nullptr;                // [B, Hq] f32 natural log, optional
  cl_mem sinks = nullptr;              // [Hq] f32 sink logits, optional
  cl_mem workspace = nullptr;          // >= plan.workspace_bytes
  float k_scale = 1.0f, v_scale = 1.0f;
};

// Selection only: writes selected_page_ids (and selected_scores when given).
CLATTN_API void hsa_select(const Context& ctx, const HsaPlan& plan, const HsaBuffers& b, const Enqueue& e = {});
// Sparse decode over a selection (from hsa_select or the caller): writes o (and lse).
CLATTN_API void hsa_decode(const Context& ctx, const HsaPlan& plan, const HsaBuffers& b, const Enqueue& e = {});
// Both, back to back on one queue (no host round trip).
CLATTN_API void hsa_run(const Context& ctx, const HsaPlan& plan, const HsaBuffers& b, const Enqueue& e = {});

// ================================================================================= DSA
// Indexer (DeepSeek-V3.2 lightning indexer) over a paged key cache of one head:
//   score(b, t) = sum_h w[b, h] * relu(q_idx[b, h] . k_idx[t])   for positions t < L_b
// (the caller folds its scales into w), then the topk highest positions (ties: the lower
// position), written in ascending position order, -1 padded: indices [B, topk] int32
// logical positions, scores [B, topk] f32 (-inf padding).
// The most index entries per request the indexer and sparse MLA decode take (topk).
constexpr int kDsaMaxTopk = 1 << 16;

struct DsaIndexOptions {
  int num_index_heads = 0;          // Hi (64 in DeepSeek-V3.2)
  int topk = 0;                     // 1..kDsaMaxTopk (2048 in DeepSeek-V3.2)
  DType q_dtype = DType::BF16;      // f32 f16 bf16
  bool validate = true;
  std::map<std::string, int> params;
  PlanBuffer plan_buffer;
};

namespace detail { struct DsaIndexPlanState; }

class CLATTN_API DsaIndexPlan {
 public:
  int batch_size = 0, num_index_heads = 0, index_dim = 0, page_size = 0, topk = 0;
  PagedKV cache;                    // the indexer key cache: num_kv_heads 1, head_dim Di
  DType q_dtype = DType::BF16;
  bool page_table = false;
  int64_t page_ids_needed = 0;
  int max_kv_len = 0;
  int64_t workspace_bytes = 0;
  int64_t table_bytes = 0;
  std::string variant;

  std::shared_ptr<const detail::DsaIndexPlanState> state_;
};

CLATTN_API DsaIndexPlan dsa_index_plan(const Context& ctx, const PagedCsr& csr, const PagedKV& index_cache,
                                       const DsaIndexOptions& opt, cl_command_queue queue = nullptr);
CLATTN_API DsaIndexPlan dsa_index_plan(const Context& ctx, const PageTable& table, const PagedKV& index_cache,
                                       const DsaIndexOptions& opt, cl_command_queue queue = nullptr);

struct DsaIndexBuffers {
  cl_mem q = nullptr;          // [B, Hi, Di] q_dtype
  cl_mem weights = nullptr;    // [B, Hi] f32
  cl_mem k_cache = nullptr;    // indexer key cache (PagedKV, one head)
  cl_mem page_ids = nullptr;   // int32 kv_indices or page_table
  cl_mem indices = nullptr;    // [B, topk] int32 out
  cl_mem scores = nullptr;     // [B, topk] f32 out, optional
  cl_mem workspace = nullptr;  // >= plan.workspace_bytes
  float k_scale = 1.0f;
};
CLATTN_API void dsa_index_run(const Context& ctx, const DsaIndexPlan& plan, const DsaIndexBuffers& b,
                              const Enqueue& e = {});

// Sparse MLA decode: request b's query row attends only to the keys at the logical
// positions indices[b, 0 .. topk) of its latent cache (-1 and positions outside [0, L_b)
// add nothing; a position listed twice counts twice, as in FlashMLA's sparse kernel). The
// rest is mla_run's decode (scores q_nope.ckv + q_pe.kpe, values ckv, o [B, H, 512]).
CLATTN_API MlaPlan mla_sparse_decode_plan(const Context& ctx, const PagedCsr& csr, const MlaCache& cache,
                                          const MlaOptions& opt, int topk, cl_command_queue queue = nullptr);
CLATTN_API MlaPlan mla_sparse_decode_plan(const Context& ctx, const PageTable& table, const MlaCache& cache,
                                          const MlaOptions& opt, int topk, cl_command_queue queue = nullptr);
// mla_run with the sparse plan's indices [B, topk] int32 (device).
CLATTN_API void mla_sparse_run(const Context& ctx, const MlaPlan& plan, const MlaBuffers& b, cl_mem indices,
                               const Enqueue& e = {});

}  // namespace clattn
