// KV append (set_kv_buffer / reshape_and_cache): new K/V rows into the paged cache. Checks
// its arguments before enqueueing anything (clattn::Error naming the argument; nothing is
// written on a rejected call) and only enqueues. Decisions: docs/decode.md.
#pragma once
#include <cstdint>

#include "clattn/context.hpp"
#include "clattn/paged_kv.hpp"
#include "clattn/types.hpp"

namespace clattn {

// Writes new K/V rows into the paged cache at slot_mapping (slot s -> page s / P, offset
// s % P); negative slots are skipped (vLLM padding). Converts the source dtype to the
// cache's: stored = value / scale, round-to-nearest-even, fp8 saturating to its max. int8
// caches: each (token, head) row gets scale = max |row| * fl(1/127) in k/v_scale_cache (the
// cache's scale_dtype) and stored = the integer nearest to row / scale (exact quotient by
// the stored scale, ties to even), saturated to [-127, 127]. int4 caches: each group of
// quant_group elements gets scale = (max(max x, 0) - min(min x, 0)) * fl(1/15) and zero =
// the integer nearest to -min(min x, 0) / scale, stored = nearest(x / scale) + zero clamped to
// [0, 15] (exact quotients, ties to even). With either, k_scale and v_scale must be 1
// (PagedKV, docs/kv_formats.md).
struct AppendKVArgs {
  cl_mem k = nullptr, v = nullptr;   // new rows [num_tokens, Hkv, D] (strides below)
  DType src_dtype = DType::BF16;     // f32 f16 bf16
  int64_t src_stride_token = 0;      // elements; 0 = Hkv * D
  int64_t src_stride_head = 0;       // elements; 0 = D
  cl_mem slot_mapping = nullptr;     // [num_tokens], int32 or int64
  DType slot_dtype = DType::I64;
  int64_t num_tokens = 0;
  // Optional host copy of slot_mapping (same dtype): validated (every slot < num_pages*P)
  // before anything is enqueued. Without it the kernel skips out-of-range slots.
  const void* slot_mapping_host = nullptr;
  cl_mem k_cache = nullptr, v_cache = nullptr;
  PagedKV cache;
  float k_scale = 1.0f, v_scale = 1.0f;
  cl_mem k_scale_cache = nullptr, v_scale_cache = nullptr;  // int8 / int4 caches only
  // Optional per-KV-head scales [Hkv] f32 (> 0), multiplied with k_scale / v_scale: stored =
  // value / (k_scale * k_head_scales[head]). Both or neither; not with int8 / int4 caches.
  cl_mem k_head_scales = nullptr, v_head_scales = nullptr;
};
CLATTN_API void append_kv(const Context& ctx, const AppendKVArgs& a, const Enqueue& e = {});

}  // namespace clattn
