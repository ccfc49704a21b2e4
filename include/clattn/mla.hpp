// MLA (DeepSeek-V2/V3 multi-head latent attention, absorbed form) on a paged latent cache:
// decode (plan/run, split-K + merge), extend (ragged causal queries over a cached prefix),
// append_latent, and the CLBlast absorption GEMMs (W_UK before attention, W_UV after).
// Decisions, kernel design and numbers: docs/mla.md. Contracts: DESIGN.md "MLA".
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "clattn/context.hpp"
#include "clattn/metadata.hpp"
#include "clattn/types.hpp"

namespace clattn {

// Latent widths of DeepSeek-V2/V3 (kv_lora_rank, qk_rope_head_dim): the only ones served.
constexpr int kMlaCkvDim = 512;
constexpr int kMlaKpeDim = 64;

// One layer's paged latent cache. Two layouts share one descriptor:
// - split buffers: ckv [num_pages, P, 512] and kpe [num_pages, P, 64];
// - one 576-wide buffer [num_pages, P, 576] (ckv at +0, kpe at +512 of each row): set
//   `single_buffer`; the kpe cl_mem is then ignored (the ckv one is read for both).
// Element d of token (page, t): ckv at page*stride_page + t*stride_token + d, kpe at
// kpe_offset + page*kpe_stride_page + t*kpe_stride_token + d (elements of `dtype`; zero
// strides take the contiguous layout's, kpe_offset 0 = 512 for single_buffer).
// The fastest loads need byte strides/offsets that are multiples of 16 (else 8, else 4).
//
// int8 (dtype I8): symmetric, two scales per token, one for its ckv part and one for its
// kpe part (loaded = stored * scale; append_latent computes them, max |part| / 127). They
// live in a scale cache beside the latent (MlaBuffers / AppendLatentArgs scale_cache, the same
// page ids) of scale_dtype (f32 or f16): the pair (ckv scale, kpe scale) of token (page, t)
// at page*scale_stride_page + t*scale_stride_token (elements; zero strides: [num_pages, P, 2]).
// Layout and reasoning: docs/kv_formats.md "int8 MLA latent".
struct MlaCache {
  int num_pages = 0;
  int page_size = 64;            // powers of two 1..256 (1, 16, 32, 64 tested)
  DType dtype = DType::BF16;     // f16 bf16 fp8_e4m3 int8 (f32 where local memory allows)
  bool single_buffer = false;
  int64_t stride_page = 0, stride_token = 0;
  int64_t kpe_stride_page = 0, kpe_stride_token = 0, kpe_offset = 0;
  DType scale_dtype = DType::F32;                      // int8: the scale cache's dtype, f32 or f16
  int64_t scale_stride_page = 0, scale_stride_token = 0;  // int8: elements (a pair's first)

  CLATTN_API int64_t ckv_token_stride() const;  // resolved strides (elements)
  CLATTN_API int64_t ckv_page_stride() const;
  CLATTN_API int64_t kpe_token_stride() const;
  CLATTN_API int64_t kpe_page_stride() const;
  CLATTN_API int64_t kpe_base() const;
  // Bytes the ckv (or single) and kpe buffers must hold.
  CLATTN_API int64_t ckv_required_bytes() const;
  CLATTN_API int64_t kpe_required_bytes() const;
  // int8: the scale cache's resolved strides (elements) and the bytes it must hold (0 for
  // other dtypes).
  CLATTN_API int64_t scale_token_stride() const;
  CLATTN_API int64_t scale_page_stride() const;
  CLATTN_API int64_t scale_required_bytes() const;
};

struct MlaOptions {
  int num_heads = 0;             // H (query heads of this rank, 1..128)
  DType q_dtype = DType::BF16;   // f32 f16 bf16 (q_nope and q_pe)
  DType o_dtype = DType::BF16;   // f32 f16 bf16
  float sm_scale = 0.0f;         // required (> 0): DeepSeek uses 1/sqrt(192) x yarn mscale^2
  bool causal = true;            // extend only; decode sees all of its keys
  int max_splits = 0;            // decode: KV chunks per request; 0 = planner's choice; 1 = never split
                                 // (a device with a loop-trip limit splits decode and extend where it
                                 // must, docs/portability.md)
  bool validate = true;          // run metadata validation (off for the hot path)
  std::map<std::string, int> params;  // parameter overrides (QB, LANES, LOAD_BYTES, ...); unknown name: InvalidArgument
  PlanBuffer plan_buffer;             // optional caller-owned table memory (context.hpp PlanBuffer)
};

namespace detail { struct MlaPlanState; }

// Host plan of one MLA decode or extend batch: the work list (request, head/row block, KV
// chunk) and its device copy, the kernel. Immutable; cheap to copy.
class CLATTN_API MlaPlan {
 public:
  bool extend = false;
  int batch_size = 0, num_heads = 0, num_tokens = 0;  // num_tokens = query rows (B for decode)
  MlaCache cache;
  DType q_dtype = DType::BF16, o_dtype = DType::BF16;
  bool page_table = false;        // page ids from a page table (true) or CSR kv_indices
  int64_t page_ids_needed = 0;    // int32 entries the run's page_ids buffer must hold
  int num_work = 0, num_partials = 0, num_merges = 0, chunk_tokens = 0;
  int topk = 0;                   // sparse decode plan (clattn/sparse.hpp): index entries per request; 0 = dense
  int64_t workspace_bytes = 0;    // caller's workspace for mla_run (0 = none)
  int64_t table_bytes = 0;        // bytes of the plan's work table (PlanBuffer size that fits)
  std::string variant, kernel_options;
  struct Tile {
    int qb = 0, lanes = 0, wg = 0, load_bytes = 0;  // query vectors, lanes (= tile tokens) per vector
  } tile;

  std::shared_ptr<const detail::MlaPlanState> state_;
};

// Decode: one query row per request (qo_indptr / cu_seqlens_q empty or all ones). Validates,
// plans split-K, builds the kernels, uploads the work list with one non-blocking write.
CLATTN_API MlaPlan mla_decode_plan(const Context& ctx, const PagedCsr& csr, const MlaCache& cache,
                                   const MlaOptions& opt, cl_command_queue queue = nullptr);
CLATTN_API MlaPlan mla_decode_plan(const Context& ctx, const PageTable& table, const MlaCache& cache,
                                   const MlaOptions& opt, cl_command_queue queue = nullptr);
// Extend: ragged query rows by csr.qo_indptr (table.cu_seqlens_q); row j of request i sits
// at position kv_len_i - qo_len_i + j (causal) and sees keys 0 ..= that position.
CLATTN_API MlaPlan mla_extend_plan(const Context& ctx, const PagedCsr& csr, const MlaCache& cache,
                                   const MlaOptions& opt, cl_command_queue queue = nullptr);
CLATTN_API MlaPlan mla_extend_plan(const Context& ctx, const PageTable& table, const MlaCache& cache,
                                   const MlaOptions& opt, cl_command_queue queue = nullptr);

struct MlaBuffers {
  cl_mem q_nope = nullptr;     // [T, H, 512] q_dtype
  cl_mem q_pe = nullptr;       // [T, H, 64]  q_dtype
  cl_mem ckv = nullptr;        // latent cache (or the single 576-wide buffer)
  cl_mem kpe = nullptr;        // ignored with cache.single_buffer
  cl_mem page_ids = nullptr;   // int32 kv_indices (CSR plan) or page_table [B, max_pages]
  cl_mem o = nullptr;          // [T, H, 512] o_dtype
  cl_mem lse = nullptr;        // [T, H] f32 natural log, optional
  cl_mem workspace = nullptr;  // >= plan.workspace_bytes when nonzero
  float kv_scale = 1.0f;       // fp8 latent: loaded = stored * kv_scale (1 with int8)
  cl_mem scale_cache = nullptr;  // int8 latent: the token scale pairs (MlaCache); null otherwise
};

// Enqueues the plan's kernels (attention, then the merge pass when split). Checks buffer
// sizes only; allocates nothing, never blocks.
CLATTN_API void mla_run(const Context& ctx, const MlaPlan& plan, const MlaBuffers& b, const Enqueue& e = {});

// ------------------------------------------------------------------------ append_latent
// Writes new latent rows at slot_mapping (slot s -> page s / P, offset s % P); negative
// slots are skipped. Converts src_dtype to cache.dtype: stored = value / scale, RNE, fp8
// saturating to +-448; int8: quantises each token's ckv and kpe parts with their own scales
// (written to scale_cache; `scale` must be 1), docs/kv_formats.md "int8 MLA latent".
struct AppendLatentArgs {
  cl_mem ckv = nullptr;            // [num_tokens, 512] (row stride src_stride_ckv)
  cl_mem kpe = nullptr;            // [num_tokens, 64]  (row stride src_stride_kpe)
  DType src_dtype = DType::BF16;   // f32 f16 bf16
  int64_t src_stride_ckv = 0, src_stride_kpe = 0;  // elements; 0 = 512 / 64
  cl_mem slot_mapping = nullptr;   // [num_tokens] int32 or int64
  DType slot_dtype = DType::I64;
  int64_t num_tokens = 0;
  const void* slot_mapping_host = nullptr;  // optional host copy: validated before enqueue
  cl_mem ckv_cache = nullptr, kpe_cache = nullptr;  // kpe_cache ignored with single_buffer
  MlaCache cache;
  float scale = 1.0f;
  cl_mem scale_cache = nullptr;    // int8 latent: the token scale pairs written; null otherwise
};
CLATTN_API void append_latent(const Context& ctx, const AppendLatentArgs& a, const Enqueue& e = {});

// ------------------------------------------------------------------- absorption (CLBlast)
// y[t, h, :out] = alpha * x[t, h, :in] x W[h] for every head (one strided-batched GEMM):
// - q absorption: x = q_nope per head [T, H, 128], W = W_UK [H, 128, 512] -> [T, H, 512];
// - output projection: x = o [T, H, 512], W = W_UV -> [T, H, 128].
// W[h] is [in, out] row-major, or [out, in] with w_transposed (DeepSeek's kv_b_proj rows).
// Row strides of x / y default to H*in / H*out (elements); buffers are f32 or f16 (f16
// needs cl_khr_fp16). Not on the attention kernels' path. Enqueues only.
struct AbsorbArgs {
  int num_tokens = 0, num_heads = 0, in_dim = 0, out_dim = 0;
  DType dtype = DType::F32;        // f32 f16 (x, W, y alike)
  cl_mem x = nullptr, w = nullptr, y = nullptr;
  int64_t x_row_stride = 0, y_row_stride = 0;  // elements; 0 = H*in / H*out
  bool w_transposed = false;
  float alpha = 1.0f;
};
CLATTN_API void mla_absorb(const Context& ctx, const AbsorbArgs& a, const Enqueue& e = {});
// Compiles CLBlast's GEMM kernels for these dtypes with one tiny call each (blocking), so
// the first real call does not pay the build. Returns false when CLBlast is absent/unusable.
CLATTN_API bool mla_absorb_warmup(const Context& ctx, bool f32 = true, bool f16 = false);

}  // namespace clattn
