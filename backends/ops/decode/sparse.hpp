// Paged decode over per-head page lists (HSA sparse decode, ops/hsa.cpp): decode.cl's
// SPARSE build, planned from key ranges that each belong to one request.
#pragma once
#include <cstdint>
#include <vector>

#include "clattn/decode.hpp"

namespace clattn::ops {

// Range r covers keys [0, len[r]) of request owner[r]: key j at list slot tok_off[r] + j of
// the page list at page_base[r] (+ list * lstride[r] for the work-group's list when
// lstride[r] > 0, whose page lengths follow the lists; see decode.cl SPARSE). A request's
// ranges are merged by their LSEs. The run's page_ids buffer holds page_ids_needed entries.
struct SparseRanges {
  std::vector<int32_t> owner, len, page_base, tok_off, lstride;
  std::vector<int32_t> extra;  // the caller's rows, uploaded with the plan's table
  int batch = 0;
  int mode = 1;  // 1: a list per KV head, 2: a list per query head
  int64_t page_ids_needed = 0;
};

// page_base values count from the lists' start, which is int32 entry
// sparse_lists_offset(plan.num_partials, Hq, D) of the workspace (after the partial
// states); page_ids_needed counts from there too and the plan's workspace_bytes covers both.
// The run's page_ids buffer is the workspace.
DecodePlan decode_plan_sparse(const Context& ctx, const SparseRanges& r, const PagedKV& cache,
                              const DecodeOptions& opt, cl_command_queue queue);

int32_t sparse_lists_offset(int num_partials, int num_qo_heads, int head_dim);

// The plan's device table, its upload event (wait for it before reading the table) and
// where SparseRanges::extra starts in it (int32 entries).
struct SparseTable {
  cl_mem table = nullptr;
  cl_event upload = nullptr;
  int32_t extra_off = 0;
};
SparseTable sparse_table(const DecodePlan& p);

// decode_run in its two steps, so a caller with kernels of its own before the decode can
// check every buffer first: the checks (InvalidArgument naming the buffer), then the enqueue.
void decode_check(const DecodePlan& plan, const DecodeBuffers& b);
void decode_enqueue(const Context& ctx, const DecodePlan& plan, const DecodeBuffers& b, const Enqueue& e);

}  // namespace clattn::ops
