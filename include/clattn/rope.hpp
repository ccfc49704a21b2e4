// Rotary position embedding (RoPE): apply_rope on q and k rows, and rope_append_kv, which
// rotates q and k, writes the rotated k and v into the paged cache (converted to the cache's
// dtype as append_kv does) and the rotated q to q_out, in one kernel (FlashInfer's
// rope_quantize_fp8_append_paged_kv_cache, vLLM's rotary_embedding + reshape_and_cache).
// Both check their arguments before enqueueing anything (clattn::Error naming the argument;
// nothing is written on a rejected call) and only enqueue. Semantics: docs/rope.md.
#pragma once
#include <cstdint>

#include "clattn/append_kv.hpp"
#include "clattn/context.hpp"
#include "clattn/types.hpp"

namespace clattn {

// Which dimensions form a rotated pair (x, y) -> (x cos - y sin, y cos + x sin):
//   NeoX (rotate_half; Llama, Qwen, most HF models; FlashInfer interleave=False):
//        pair i = dims (i, i + R/2), i < R/2
//   GptJ (interleaved; GPT-J, ChatGLM; FlashInfer interleave=True):
//        pair i = dims (2i, 2i + 1), i < R/2
// R = rotary_dim; dims R .. D-1 pass through unchanged (partial rotary).
enum class RopeStyle : int { NeoX = 0, GptJ = 1 };

// The angle of pair i at position p:
//   without a cache: p / scale * theta^(-2i / R)  (FlashInfer's rope_scale / rope_theta),
//                    computed in f32 on the device (sincos at full precision);
//   with cos_sin_cache [cache_positions, R] f32, row p = (cos of pairs 0..R/2-1, sin of the
//   same): cos and sin are read from row p (vLLM / FlashInfer's cos_sin_cache form; any
//   scaling, e.g. Llama-3's, is the engine's when it fills the cache).
struct RopeConfig {
  RopeStyle style = RopeStyle::NeoX;
  int rotary_dim = 0;                // R: even, 2 <= R <= head_dim; 0 = head_dim
  float theta = 10000.0f;            // > 0 (no cache)
  float scale = 1.0f;                // > 0 (no cache): positions are divided by it
  cl_mem cos_sin_cache = nullptr;    // optional [cache_positions, R] f32
  int64_t cache_positions = 0;       // rows of cos_sin_cache (> 0 when it is set)
};

// Positions: one per token, int32 or int64, >= 0 (and < cache_positions with a cache). A
// device position outside that range leaves the token's outputs unwritten and sets
// FaultPosition (Context::device_faults); positions_host (optional host copy, same dtype)
// is checked before anything is enqueued.
struct RopePositions {
  cl_mem positions = nullptr;        // [num_tokens]
  DType dtype = DType::I64;          // i32 or i64
  const void* positions_host = nullptr;
};

// q [T, Hq, D] -> q_out, k [T, Hk, D] -> k_out (either pair may be omitted with Hq = 0 or
// Hk = 0). In place when q_out == q (same strides). dtypes f32 f16 bf16; outputs are rounded
// to nearest even. Strides in elements (0 = contiguous).
struct RopeArgs {
  cl_mem q = nullptr, q_out = nullptr;
  cl_mem k = nullptr, k_out = nullptr;
  DType dtype = DType::BF16;         // q, k and their outputs
  int64_t num_tokens = 0;
  int num_qo_heads = 0, num_kv_heads = 0, head_dim = 0;
  int64_t q_stride_token = 0, q_stride_head = 0;  // q and q_out
  int64_t k_stride_token = 0, k_stride_head = 0;  // k and k_out
  RopePositions pos;
  RopeConfig rope;
};
CLATTN_API void apply_rope(const Context& ctx, const RopeArgs& a, const Enqueue& e = {});

// append_kv with RoPE on the way: k (append.k) is rotated before it is stored, v is stored as
// append_kv stores it, and q [T, Hq, D] (append.src_dtype, its own strides) is rotated into
// q_out (q_out_dtype). A token whose slot is negative or outside the cache still gets its
// q_out row (the slot only decides the cache write, as in append_kv). Float and fp8 caches take
// append.k_head_scales / v_head_scales as append_kv does (stored = rotated k / (k_scale *
// k_head_scales[head]), v likewise; both or neither). int8 / int4 caches: the
// rotated k row and the v row are quantised with append_kv's rules (int8: the scale from the
// rotated row's max; int4: a [scale, zero] pair from each rotated group's range, the cache's
// quant_group), written to append.k_scale_cache / v_scale_cache.
struct RopeAppendKVArgs {
  AppendKVArgs append;               // k, v, slot_mapping, caches, scales (append_kv's checks)
  cl_mem q = nullptr, q_out = nullptr;
  int num_qo_heads = 0;
  int64_t q_stride_token = 0, q_stride_head = 0;  // q and q_out (elements; 0 = contiguous)
  DType q_out_dtype = DType::BF16;   // f32 f16 bf16
  RopePositions pos;
  RopeConfig rope;
};
CLATTN_API void rope_append_kv(const Context& ctx, const RopeAppendKVArgs& a, const Enqueue& e = {});

}  // namespace clattn
