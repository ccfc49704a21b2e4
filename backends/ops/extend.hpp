// Internal entry points of the extend op shared with the cascade helper.
#pragma once
#include "clattn/extend.hpp"

namespace clattn::ops {

// One non-causal request (the cascade's shared prefix, a CSR of batch 1) attended by
// num_rows query rows, which may outnumber its keys (extend_plan rejects qo_len > kv_len,
// the rule for causal requests). Options must have causal off, no window and no mask.
ExtendPlan extend_plan_prefix(const Context& ctx, const PagedCsr& prefix, int32_t num_rows, const PagedKV& cache,
                              const ExtendOptions& opt, cl_command_queue queue);

}  // namespace clattn::ops
