// The decode op's shared pieces (backends/ops/decode/): the plan state a run reads, the tile
// of one decode build, and the functions the op's files call across (tile.cpp, variants.cpp,
// plan.cpp, run.cpp, vector.cpp).
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backends/dispatch/catalog.hpp"
#include "backends/dispatch/variant.hpp"
#include "backends/metadata/requests.hpp"
#include "backends/ops/decode/check.hpp"
#include "backends/ops/decode/sparse.hpp"
#include "backends/ops/merge_state.hpp"
#include "backends/ops/op_util.hpp"
#include "backends/params/database.hpp"
#include "backends/params/param_names.hpp"
#include "backends/params/variants.hpp"
#include "backends/planner/split_kv.hpp"
#include "clattn/decode.hpp"
#include "runtime/log.hpp"

namespace clattn {
namespace detail {

// Everything a run needs besides the caller's buffers. Owned by the plan (shared by its
// copies); the destructor waits for the table upload before freeing its host source.
struct DecodePlanState : ops::PlanTable {
  std::shared_ptr<rt::Program> decode_prog, merge_prog;
  rt::Kernel* decode_k = nullptr;
  rt::Kernel* merge_k = nullptr;
  size_t wg = 0, merge_wg = 0;
  int work_off = 0, merge_off = 0;
  bool fuse = false;    // the decode kernel merges (FUSE_MERGE) with the counter sets below
  bool prefetch = false;  // PREFETCH build (kept for to_vector)
  bool cpu = false;       // the cpu variant (decode_cpu.cl): grid dimensions swapped
  bool deterministic = false;  // DecodeOptions::deterministic (the merge pass's column split)
  ops::CounterSets sets;  // FUSE_MERGE: per-run counters in the table (one set per run)
  int group = 1, gmax = 1, n_hblk = 1, log2_page = 0;
  float q_scale = 1.0f, cap_log2 = 0.0f, inv_cap = 0.0f;
  int64_t lse_off_floats = 0;
  int32_t extra_off = 0;  // sparse plans: where SparseRanges::extra starts in the table
  // Fixed-capacity plans (decode_plan_fixed): refresh_decode_work's settings and kernel.
  struct Fixed {
    int nmax = 0, chunk = 0, align = 0, max_splits = 0, window_left = -1, max_pages = 0, max_keys = 0;
  };
  bool fixed = false;
  Fixed fx;
  std::shared_ptr<rt::Program> refresh_prog;
  rt::Kernel* refresh_k = nullptr;

  // The run's view of the plan, fixed when the plan is made: DecodePlan's public fields
  // are informational (a caller may edit its copy), so the run reads only these.
  int B = 0, Hq = 0, Hkv = 0, D = 0;
  DType q_dtype = DType::BF16, o_dtype = DType::BF16;
  PagedKV cache;
  bool page_table = false;
  int num_work = 0, num_merges = 0, num_partials = 0;
  // Buffer sizes in bytes (checked arithmetic; 0 = not needed).
  int64_t q_bytes = 0, o_bytes = 0, lse_bytes = 0, sinks_bytes = 0, kv_bytes = 0, page_id_bytes = 0;
  int64_t scale_bytes = 0;  // int8 / int4: each scale cache
  int64_t workspace_bytes = 0;

  void freeze(const DecodePlan& p) {
    namespace ck = rt::checked;
    B = p.batch_size, Hq = p.num_qo_heads, Hkv = p.num_kv_heads, D = p.head_dim;
    q_dtype = p.q_dtype, o_dtype = p.o_dtype, cache = p.cache, page_table = p.page_table;
    num_work = p.num_work, num_merges = p.num_merges, num_partials = p.num_partials;
    const ops::RowBytes rb = ops::row_bytes(ck::mul(B, Hq, "decode q/o rows (batch_size x num_qo_heads)"), D,
                                            q_dtype, D, o_dtype, p.page_ids_needed);
    q_bytes = rb.q, o_bytes = rb.o, lse_bytes = rb.lse, page_id_bytes = rb.page_ids;
    sinks_bytes = ck::mul(Hq, 4, "sinks bytes");
    kv_bytes = cache.required_bytes();
    scale_bytes = cache.scale_required_bytes();
    workspace_bytes = p.workspace_bytes;
  }
};


}  // namespace detail

namespace ops::decode {

using detail::DecodePlanState;
using ops::is_pow2;
using ops::log2_int;
using ops::pow2_ceil;

constexpr int64_t kPlanMagic = 0x434c4154444543LL;  // "CLATDEC"
constexpr int64_t kPlanVersion = 5;

// Parts one request may be split into: the merge pass keeps their weights in local memory
// (MERGE_MAXP in merge_state.cl).
constexpr int kMaxMergeParts = 256;

const char* kv_key(DType t);
// Bytes of n cache elements (int4: two a byte; its strides and head dims are even).
int64_t kv_nbytes(DType t, int64_t n);
// Cache elements per LOAD_BYTES load.
int load_elems(DType t, int load_bytes);

// KTile parameters of one decode kernel build.
struct KTile {
  int wg = 128, tpt = 8, gmax = 4, unroll = 4, load_bytes = 16;
  bool ptx_shfl = false;  // preferred by the parameters (the variant still needs the device)
  // Sub-group variants (SUBGROUP): intel_subgroups and khr_subgroups, each where allowed here
  // (a plan vector names the one it was built with); sg_size: SUBGROUP_SIZE, Intel's required
  // sub-group size (0: none required) and the emulated size (0: 32); sg_shuffle: SUBGROUP_SHUFFLE,
  // -1 = cl_khr_subgroup_shuffle where the device has it, 0 = the sub-group-fenced local-memory
  // butterfly, 1 = shuffles required.
  bool subgroup = false, sg_intel = true, sg_khr = true;
  int sg_size = 0, sg_shuffle = -1;
  int fuse_merge = 1;     // split-K merged by the last work-group of each request (no second launch)
  int prefetch = 0;       // next tile's K/V loaded into a second register set (PREFETCH)
  int merge_batch = 8;    // fused merge: partial states loaded per batch (MERGE_BATCH)
  int n_hblk = 1;
  int unroll_hints = -1;  // -1: by device type (GPUs on, CPUs off)
  int fp8_fast = -1;      // -1: when the device keeps f32 denormals
  // CPU variant (decode_cpu.cl), asked for by CPU_KERNEL: one work-item per group, tokens in
  // blocks of `unroll` = VW (the vector width in floats); wg/tpt above serve the generic
  // fallback.
  bool cpu = false;
  int touch_ahead = 2;    // CPU variant: blocks ahead whose rows are prefetched (TOUCH_AHEAD)
  int prefetch_locality = 3;  // and the prefetch's locality hint (PREFETCH_LOCALITY: 3 L1, 1 L2)
  int sparse = 0;         // SPARSE build (HSA per-head page lists): 1 per KV head, 2 per query head
  // Tensor-core variant (decode_mma_nv.cl, int8 caches), asked for by MMA: wg / 32 warps,
  // mma_unroll 16-key blocks per warp and step (MMA_UNROLL).
  bool mma = false;
  int mma_unroll = 1;
  std::string source;     // parameter source, for logs
  int group = 1;          // the GQA group the tile serves (head blocks = ceil(group / gmax))
  int tpt_max = 32;       // lanes per token at most (loads per row, 32, WG)
  int64_t trips_fixed = 0, trips_per_key = 0;  // the built variant's loop-trip bound (set_trips)
};

struct SplitParams {
  int wgs_per_cu = 4, min_chunk = 256, max_splits = 64, det_chunk = 1024;
};


// Local memory the kernel declares (mirrors LMEM_FLOATS in decode.cl); shfl: the butterfly
// uses register shuffles (no scratch rows).
size_t local_bytes(const KTile& t, int head_dim, bool shfl);
// Chooses the tile from the parameter entry (with overrides) for this shape.
KTile choose_tile(const DeviceProfile& prof, const PagedKV& c, int group, const std::map<std::string, int>& over,
                  SplitParams* sp, int preferred_float_width);

// The knobs a decode variant shrinks along (WG, TPT, GMAX, UNROLL; the cpu variant's: GMAX
// and VW, its UNROLL), and `base` with the knobs of `t`: head blocks re-derived from the
// group, lanes per token at most WG; *why_not set where the result is illegal.
ops::Tile tile_of(const KTile& t, bool cpu);
KTile with_tile(const KTile& base, const ops::Tile& t, bool cpu, std::string* why_not);
// An upper bound of one work-item's loop iterations (dispatch/variant.hpp: trips_fixed,
// trips_per_key) for variant `name` built with tile t.
void set_trips(ops::Variant& v, const KTile& t, const PagedKV& c);

// The decode kernel's variants, best first (variants.cpp).
std::vector<ops::Variant> variants(const DeviceProfile& prof, const KTile& tile, const PagedKV& cache, bool denorms);
// Builds the first variant that fits and the merge pass into st; names them in plan.
// Returns the tile that was built (shrunk where the device asked for it).
KTile build_kernels(const Context& ctx, const KTile& tile, const PagedKV& cache, const ops::DecodeCheckCase& k,
                    DecodePlanState& st, DecodePlan& plan);

// Per-request key ranges in list coordinates (the window applied), and where their page
// ids start.
struct Requests {
  std::vector<int32_t> begin, end, page_base, tok_off;
  int64_t page_ids_needed = 0;
  // Sparse decode (ops::SparseRanges): entry r is a key range of request owner[r] whose
  // list has stride lstride[r]; the plan has `batch` requests. Empty for dense decode.
  std::vector<int32_t> owner, lstride;
  std::vector<int32_t> extra;  // appended to the plan's table (extra_off)
  int batch = 0;
  int sparse = 0;  // SPARSE build: 1 per-KV-head lists, 2 per-query-head lists
};

}  // namespace ops::decode
}  // namespace clattn
