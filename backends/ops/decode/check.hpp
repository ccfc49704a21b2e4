// The decode op's self-validation check (backends/ops/decode/self_check.cpp).
#pragma once
#include <map>
#include <string>

#include "backends/dispatch/self_validation.hpp"
#include "clattn/decode.hpp"

namespace clattn::ops {

// The plan's kind of case: what decides which programs its candidates build.
struct DecodeCheckCase {
  PagedKV cache;  // dtype, layout, head dim, page size (and strides)
  int group = 1;  // GQA group (num_qo_heads / num_kv_heads)
  DType q_dtype = DType::BF16, o_dtype = DType::BF16;
  std::map<std::string, int> params;  // the plan's parameter overrides
  bool split = false;                 // the plan splits (FUSE_MERGE / PREFETCH builds)
};
// Runs the case with exactly `v` and with the generic kernel; see dispatch/self_validation.hpp.
Comparison decode_self_check(const Context& ctx, const DecodeCheckCase& k, const Variant& v);

}  // namespace clattn::ops
