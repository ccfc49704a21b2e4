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

// The split pass's merge (decode, extend and MLA plans): merge_partials over the plan's
// num_merges entries at merge_off in its table, after `after` (released here, also when the
// launch throws): each entry's parts in ws (rows of head_dim floats, lse at lse_off floats)
// into o (o_dt) and lse; sinks where given. cb column blocks per row (merge_col_blocks).
struct MergeLaunch {
  rt::Kernel* kernel = nullptr;
  size_t wg = 0;
  int num_merges = 0, cb = 1, heads = 0, head_dim = 0;
  cl_mem table = nullptr, ws = nullptr;
  int merge_off = 0;
  uint64_t lse_off = 0;
};
void enqueue_merge(cl_command_queue q, const MergeLaunch& m, cl_event after, cl_event* done, cl_mem o, DType o_dt,
                   cl_mem lse, bool has_lse, cl_mem sinks, bool has_sinks);

}  // namespace clattn::ops
