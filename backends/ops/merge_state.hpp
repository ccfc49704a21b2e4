// The merge program (cl_kernels/merge_state.cl), shared by the public merge ops and the
// split-K pass of decode: one build per context, work-group size from the "merge"
// parameter rows.
#pragma once
#include <memory>

#include "backends/dispatch/variant.hpp"
#include "runtime/context_impl.hpp"
#include "runtime/program_cache.hpp"

namespace clattn::ops {

struct MergeProgram {
  std::shared_ptr<rt::Program> program;
  size_t wg = 64;
};
// merge_state.cl as this device's parameters build it (MERGE_WG work-items per group).
Variant merge_variant(const DeviceProfile& p);
// Builds (or fetches) the merge program for this context.
MergeProgram merge_program(detail::ContextImpl& c);
// Groups per (merge entry, head) row for merge_partials (its col_blocks argument): enough
// for about two groups per compute unit, each keeping at least 8 float4 columns. A few long
// rows (B=1 with 128 parts) are otherwise merged by a handful of groups that wait for their
// parts' loads one round after another.
int merge_col_blocks(const DeviceProfile& p, int num_merges, int heads, int head_dim);

}  // namespace clattn::ops
