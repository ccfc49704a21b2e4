// Merging attention states (o, lse) computed over disjoint key sets (cascade, split-K).
// Checks its arguments before enqueueing anything and only enqueues. Decisions:
// docs/decode.md.
#pragma once
#include "clattn/context.hpp"
#include "clattn/types.hpp"

namespace clattn {

// Attention states (o, lse) over disjoint key sets -> the state over their union:
// lse = log(exp(lse_a) + exp(lse_b)), o = (exp(lse_a) o_a + exp(lse_b) o_b) / exp(lse).
// An lse of -inf is an empty state (its o is ignored); all empty -> o = 0, lse = -inf.
// o dtype f32/f16/bf16, lse f32 natural log. v_out may alias v_a and s_out s_a (in place).
struct MergeStateArgs {
  cl_mem v_a = nullptr, s_a = nullptr;  // [num_tokens, num_heads, head_dim], [num_tokens, num_heads]
  cl_mem v_b = nullptr, s_b = nullptr;
  cl_mem v_out = nullptr, s_out = nullptr;  // s_out may be nullptr
  int num_tokens = 0, num_heads = 0, head_dim = 0;
  DType dtype = DType::F32;
};
CLATTN_API void merge_state(const Context& ctx, const MergeStateArgs& a, const Enqueue& e = {});

// k-way merge: v [num_tokens, num_states, num_heads, head_dim], s [num_tokens,
// num_states, num_heads] -> v_out [num_tokens, num_heads, head_dim], s_out [num_tokens,
// num_heads] (nullable). Parts are combined in index order (deterministic).
struct MergeStatesArgs {
  cl_mem v = nullptr, s = nullptr;
  cl_mem v_out = nullptr, s_out = nullptr;
  int num_tokens = 0, num_states = 0, num_heads = 0, head_dim = 0;
  DType dtype = DType::F32;
};
CLATTN_API void merge_states(const Context& ctx, const MergeStatesArgs& a, const Enqueue& e = {});

}  // namespace clattn
