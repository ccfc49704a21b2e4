// Linear attention with a pooled recurrent state: Gated DeltaNet (Qwen3-Next style) and
// simple gated linear attention (scalar-per-head decay; "lightning" constant decay).
// Recurrent decode (one token per request) and chunked varlen prefill (cu_seqlens).
// Contracts: DESIGN.md "Data contracts" / "Linear attention"; details and decisions:
// docs/linear.md.
//
// Per v-head, per token t (state S [Dk, Dv], g_t a log decay, normally <= 0):
//   GDN: S = exp(g_t) S;  S = S + beta_t k_t (x) (v_t - S^T k_t);  o_t = S^T (q_t * scale)
//   GLA: S = exp(g_t) S + k_t (x) v_t;                             o_t = S^T (q_t * scale)
//
// Metadata: state_indices (and cu_seqlens for prefill) are passed TWICE: as host arrays,
// which are only read to validate the batch before anything is enqueued, and as device
// int32 buffers with the same contents, which the kernels read. Nothing blocks; every op
// enqueues on `queue` (nullptr = the context's queue) in its order. A rejected call
// (clattn::Error InvalidArgument naming the argument and index) enqueues nothing, so
// the state pool and the outputs stay untouched.
#pragma once
#include <cstdint>
#include <map>
#include <string>

#include "clattn/context.hpp"

namespace clattn {

// The state pool: state[num_slots][num_v_heads][head_dim_k][head_dim_v], row-major.
// Arithmetic is f32; F16/BF16 storage rounds (RTE) each time a state is written back:
// after every decode step, after a whole prefill request (not per chunk).
struct LinearStatePool {
  cl_mem state = nullptr;
  int num_slots = 0;
  DType dtype = DType::F32;  // F32, F16 or BF16
};

struct LinearConfig {
  int num_qk_heads = 0;  // Hqk
  int num_v_heads = 0;   // Hv, a multiple of Hqk (v-head h reads q/k head h / (Hv / Hqk))
  int head_dim_k = 0;    // Dk in {64, 128, 256}
  int head_dim_v = 0;    // Dv in {64, 128, 256}
  DType dtype = DType::F16;  // q, k, v and o: F32, F16 or BF16
  float scale = 0.f;         // applied to q; 0 = 1/sqrt(Dk)
  bool l2norm_qk = false;       // GDN only: q, k divided by sqrt(sum x^2 + 1e-6) in-kernel
  bool beta_is_logits = false;  // GDN only: beta = sigmoid(given beta)
  bool constant_decay = false;  // g is [Hv], the same for every token (lightning attention)
  // Parameter overrides (tuning, benchmarks): DEC_DVT DEC_VEC DEC_ROWS (ops linear_decode),
  // PF_C PF_DVT PF_WG PF_DKT (linear_prefill); a name neither op has is InvalidArgument;
  // clamped to the shape and device like the
  // database's values.
  std::map<std::string, int> params;
};

// Device tensors. Decode: T = B (one token per request); prefill: T = cu_seqlens[B].
//   q, k [T, Hqk, Dk]; v, o [T, Hv, Dv] in config.dtype;
//   g [T, Hv] f32 (or [Hv] with constant_decay); beta [T, Hv] f32 (GDN only, else ignored).
struct LinearTensors {
  cl_mem q = nullptr, k = nullptr, v = nullptr, g = nullptr, beta = nullptr, o = nullptr;
};

struct LinearBatch {
  int batch_size = 0;  // B
  // [B] slot per request. -1 = no state: the request starts from a zero state and its
  // final state is discarded (nothing written: SGLang/FLA padding semantics). Slots
  // >= 0 must be < num_slots and distinct within one call.
  const int32_t* state_indices = nullptr;  // host copy (validation only)
  cl_mem state_indices_dev = nullptr;      // device copy (read by the kernels)
  // Prefill only: [B+1], cu_seqlens[0] = 0, non-decreasing, cu_seqlens[B] = num_tokens.
  const int32_t* cu_seqlens = nullptr;
  cl_mem cu_seqlens_dev = nullptr;
  int num_tokens = 0;  // prefill only: T
};

CLATTN_API void gdn_decode(const Context& ctx, const LinearConfig& cfg, const LinearTensors& t,
                           const LinearStatePool& pool, const LinearBatch& batch, cl_command_queue queue = nullptr);
CLATTN_API void gdn_prefill(const Context& ctx, const LinearConfig& cfg, const LinearTensors& t,
                            const LinearStatePool& pool, const LinearBatch& batch, cl_command_queue queue = nullptr);
CLATTN_API void gla_decode(const Context& ctx, const LinearConfig& cfg, const LinearTensors& t,
                           const LinearStatePool& pool, const LinearBatch& batch, cl_command_queue queue = nullptr);
CLATTN_API void gla_prefill(const Context& ctx, const LinearConfig& cfg, const LinearTensors& t,
                            const LinearStatePool& pool, const LinearBatch& batch, cl_command_queue queue = nullptr);

// Pool helpers (enqueue only). Zero `n` slots (each in [0, num_slots)); copy slot src to
// dst (fork / prefix reuse; src == dst is a no-op). Slot size comes from cfg's Hv, Dk, Dv.
CLATTN_API void linear_zero_slots(const Context& ctx, const LinearConfig& cfg, const LinearStatePool& pool,
                                  const int32_t* slots, int n, cl_command_queue queue = nullptr);
CLATTN_API void linear_copy_slot(const Context& ctx, const LinearConfig& cfg, const LinearStatePool& pool, int src,
                                 int dst, cl_command_queue queue = nullptr);

}  // namespace clattn
