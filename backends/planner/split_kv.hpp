// Split-K planner for paged decode (FlashInfer's DecodePlan idea): from per-request KV
// ranges, decide which (request, KV chunk) pairs form the work list, which requests need
// the merge pass, and how many partial states the workspace holds. Pure host code, no
// OpenCL: the decode dispatcher (backends/ops/decode/plan.cpp) turns the result into
// device tables.
//
// Rules: a batch that already launches as many work-groups as the device runs at once is
// never split; otherwise the smallest chunk (>= min_chunk, a multiple of align, at most
// max_splits chunks per request) whose work list still fits one wave is chosen, so small
// batches with long contexts fill the device. Deterministic mode uses one fixed chunk for
// every batch, so a request's work items (and hence its output bits) never depend on its
// batch mates.
#pragma once
#include <cstdint>
#include <vector>

namespace clattn::planner {

struct SplitKVConfig {
  int64_t units_per_item = 1;    // work-groups launched per work item (KV heads x head blocks)
  int64_t max_concurrent = 1;    // work-groups the device keeps resident at once
  int min_chunk = 256;           // tokens: never split finer than this
  int max_splits = 64;           // chunks per request at most (<= 1: never split)
  int align = 16;                // chunk sizes are multiples of this
  bool deterministic = false;
  int fixed_chunk = 1024;        // deterministic tile (tokens)
  // 0: none; else no work item covers more tokens than this (a device's loop-trip limit,
  // DeviceProfile::loop_trip_limit): it wins over max_splits and the one-wave rule.
  int64_t max_chunk = 0;
};

// Tokens [begin, end) of request req; part = workspace row of its partial state, or -1
// when the item covers the whole request and writes the final output.
struct WorkItem {
  int32_t req, begin, end, part;
};
// Request req's partial states are workspace rows first .. first + count - 1.
struct MergeItem {
  int32_t req, first, count;
};

struct SplitKVPlan {
  std::vector<WorkItem> work;
  std::vector<MergeItem> merges;
  int num_partials = 0;
  int chunk = 0;  // tokens per chunk, 0 when nothing is split
};

// begin/end: [batch] token ranges (begin <= end) in each request's key list.
SplitKVPlan plan_split_kv(const int32_t* begin, const int32_t* end, int batch, const SplitKVConfig& cfg);

// Deterministic mode's chunk: fixed_chunk rounded up to align (before any widening for
// max_splits). Also the chunk of fixed-capacity decode plans (decode_plan_fixed).
int64_t deterministic_chunk(const SplitKVConfig& cfg);

// The chunk a loop-trip bound of max_keys keys per work item gives at alignment `align`
// (lowered to a power of two within the bound where it exceeds it): what plan_split_kv cuts
// with max_chunk, for ops that cut their own work lists the same way (MLA extend).
int64_t bounded_chunk(int64_t max_keys, int align);

// Number of work items a chunk size gives (without building them).
int64_t count_work_items(const int32_t* begin, const int32_t* end, int batch, int chunk);

// Workspace layout of the partial states: o [P, Hq, D] f32, then lse [P, Hq] f32 at a
// 256-byte aligned offset. Sizes are checked (InvalidArgument).
struct WorkspaceLayout {
  int64_t lse_offset_bytes = 0;
  int64_t bytes = 0;
};
WorkspaceLayout workspace_layout(int num_partials, int num_qo_heads, int head_dim);

}  // namespace clattn::planner
