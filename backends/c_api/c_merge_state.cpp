// C ABI: merging attention states, pairwise and k-way.
#include "backends/c_api/c_api_common.hpp"
#include "clattn/merge_state.hpp"

using clattn::capi::guard;
using clattn::capi::need;
using clattn::capi::to_cpp;

extern "C" {

clattn_status clattn_merge_state(clattn_context ctx, cl_mem v_a, cl_mem s_a, cl_mem v_b, cl_mem s_b, cl_mem v_out,
                                 cl_mem s_out, int num_tokens, int num_heads, int head_dim, int dtype,
                                 const clattn_enqueue* e) {
  return guard([&] {
    const clattn::MergeStateArgs m{v_a,        s_a,       v_b,      s_b, v_out, s_out, num_tokens,
                                   num_heads, head_dim, static_cast<clattn::DType>(dtype)};
    clattn::merge_state(need(ctx, "ctx")->ctx, m, to_cpp(e));
  });
}

clattn_status clattn_merge_states(clattn_context ctx, cl_mem v, cl_mem s, cl_mem v_out, cl_mem s_out, int num_tokens,
                                  int num_states, int num_heads, int head_dim, int dtype, const clattn_enqueue* e) {
  return guard([&] {
    const clattn::MergeStatesArgs m{v,         s,         v_out,    s_out, num_tokens, num_states,
                                    num_heads, head_dim, static_cast<clattn::DType>(dtype)};
    clattn::merge_states(need(ctx, "ctx")->ctx, m, to_cpp(e));
  });
}

}  // extern "C"
