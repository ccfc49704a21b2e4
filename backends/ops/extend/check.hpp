// Internal entry points of the extend op shared with the cascade helper.
#pragma once
#include <optional>

#include "backends/dispatch/self_validation.hpp"
#include "clattn/extend.hpp"

namespace clattn::ops {

struct Variant;

// The plan's kind of case for its self-validation check (backends/ops/extend/self_check.cpp):
// what decides which programs its candidates build.
struct ExtendCheckCase {
  DType kv_dtype = DType::BF16, q_dtype = DType::BF16, o_dtype = DType::BF16;
  int head_dim = 128, page_size = 16;
  std::string variant;                // the plan's ExtendOptions::variant
  std::map<std::string, int> params;  // and its parameter overrides
};
// Runs the case with exactly `v` and with the generic kernel; see dispatch/self_validation.hpp.
Comparison extend_self_check(const Context& ctx, const ExtendCheckCase& k, const Variant& v);

// Tests: a candidate every extend plan tries first (not listed by candidates(), so the
// catalog never sees it): the generic kernel named `name`, its -D`define` set to `value`.
struct ExtendTestCandidate {
  std::string name, define, value;
};
void set_extend_test_candidate(std::optional<ExtendTestCandidate> t);

// One non-causal request (the cascade's shared prefix, a CSR of batch 1) attended by
// num_rows query rows, which may outnumber its keys (extend_plan rejects qo_len > kv_len,
// the rule for causal requests). Options must have causal off, no window and no mask.
ExtendPlan extend_plan_prefix(const Context& ctx, const PagedCsr& prefix, int32_t num_rows, const PagedKV& cache,
                              const ExtendOptions& opt, cl_command_queue queue);

}  // namespace clattn::ops
