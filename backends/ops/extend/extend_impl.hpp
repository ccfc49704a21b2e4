// The extend op's shared pieces (backends/ops/extend/): the plan state a run reads, the KV
// source as the kernels see it, the requests, the tile of one build, and the functions the
// op's files call across (tile.cpp, variants.cpp, plan.cpp, run.cpp).
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backends/dispatch/catalog.hpp"
#include "backends/dispatch/variant.hpp"
#include "backends/metadata/requests.hpp"
#include "backends/ops/extend/check.hpp"
#include "backends/ops/merge_state.hpp"
#include "backends/ops/op_util.hpp"
#include "backends/params/database.hpp"
#include "backends/params/param_names.hpp"
#include "backends/params/variants.hpp"
#include "backends/planner/split_kv.hpp"
#include "runtime/log.hpp"
#include "runtime/ptx_retarget.hpp"

namespace clattn {
namespace detail {

struct ExtendPlanState : ops::PlanTable {
  std::shared_ptr<rt::Program> prog;
  rt::Kernel* kernel = nullptr;
  size_t wg = 0;
  int group = 1;
  bool paged = true, causal = true;
  int window_left = -1, page_size = 1;
  int64_t stride_page = 0, stride_token = 0, stride_head = 0;
  float q_scale = 1.0f, cap_log2 = 0.0f, inv_cap = 0.0f;
  // Key split (a device's loop-trip limit): split entries at split_off, merge entries at
  // merge_off, the partial states' lse at lse_off_floats of the workspace (split_workspace bytes).
  int32_t split_off = 0, merge_off = 0;
  int num_merges = 0;
  int64_t lse_off_floats = 0, split_workspace = 0;
  std::shared_ptr<rt::Program> merge_prog;
  rt::Kernel* merge_k = nullptr;
  size_t merge_wg = 0;
  // TMA feed (nv_wgmma with MMA_TMA): the tensor-map kernel run before the main one writes the
  // K and V maps into the first 256 bytes of the caller's workspace (per-run state: the plan's
  // table stays read-only); its arguments (dims innermost first, byte strides of dims 1..3,
  // box rows of dims 1 and 2).
  std::shared_ptr<rt::Program> maps_prog;
  rt::Kernel* maps_kernel = nullptr;
  cl_uint map_dims[4] = {0, 0, 0, 0}, map_box[2] = {0, 0};
  cl_ulong map_strides[3] = {0, 0, 0};

  // The run's view of the plan, fixed when it is made (ExtendPlan's public fields are
  // informational: a caller may edit its copy). Byte sizes by checked arithmetic.
  int64_t T = 0;
  int Hq = 0, Hkv = 0, D = 0, num_tiles = 0;
  DType q_dtype = DType::BF16, o_dtype = DType::BF16, kv_dtype = DType::BF16;
  ExtendPlan::Source source = ExtendPlan::Source::PagedCsr;
  int num_pages = 0;  // paged: the pool the kernels check page ids against
  bool has_mask = false;
  int64_t q_bytes = 0, o_bytes = 0, lse_bytes = 0, sinks_bytes = 0, kv_bytes = 0, page_id_bytes = 0;
  int64_t mask_bytes = 0, workspace_bytes = 0;
  std::string kv_shape;  // for messages
  // The cache the scale checks read (paged: the plan's; ragged: heads and dtype only), and the
  // int8 / int4 scale caches' bytes, strides (elements) and dtype flag.
  PagedKV scales_of;
  int64_t scale_bytes = 0, sc_page = 0, sc_token = 0, sc_head = 0;
  int sc_f16 = 0;

  void freeze(const ExtendPlan& p, int64_t kv_required) {
    namespace ck = rt::checked;
    T = p.num_tokens, Hq = p.num_qo_heads, Hkv = p.num_kv_heads, D = p.head_dim, num_tiles = p.num_tiles;
    q_dtype = p.q_dtype, o_dtype = p.o_dtype, kv_dtype = p.kv_dtype, source = p.source;
    num_pages = p.cache.num_pages, has_mask = p.has_mask;
    const ops::RowBytes rb = ops::row_bytes(ck::mul(T, Hq, "extend q/o rows (num_tokens x num_qo_heads)"), D,
                                            q_dtype, D, o_dtype, p.page_ids_needed);
    q_bytes = rb.q, o_bytes = rb.o, lse_bytes = rb.lse, page_id_bytes = rb.page_ids;
    sinks_bytes = ck::mul(Hq, 4, "sinks bytes");
    kv_bytes = kv_required;
    mask_bytes = p.mask_bytes_needed;
    workspace_bytes = p.workspace_bytes;
    if (source == ExtendPlan::Source::Ragged) {
      scales_of.num_kv_heads = p.num_kv_heads, scales_of.head_dim = p.head_dim, scales_of.dtype = p.kv_dtype;
    } else {
      scales_of = p.cache;
    }
    if (p.kv_dtype == DType::I8 || p.kv_dtype == DType::I4) {
      scale_bytes = p.cache.scale_required_bytes();
      sc_page = p.cache.scale_page_stride(), sc_token = p.cache.scale_token_stride();
      sc_head = p.cache.scale_head_stride(), sc_f16 = p.cache.scale_dtype == DType::F16;
    }
  }
};


}  // namespace detail

namespace ops::extend {

using detail::ExtendPlanState;
using std::to_string;


// Work items of one plan: its table is 8 int32 per item (512 MiB at this bound).
constexpr int64_t kMaxWorkItems = int64_t(1) << 24;

// What the kernel sees of the KV source, whatever its form.
struct KVDesc {
  bool paged = true;
  int num_kv_heads = 0, head_dim = 0, page_size = 1;
  DType dtype = DType::BF16;
  int quant_group = 0;  // int4: head-dim elements per [scale, zero] pair
  int64_t stride_page = 0, stride_token = 0, stride_head = 0;
  int64_t num_pages = 0;   // paged: pages in the cache (a tensor map's outer dim)
  int64_t num_tokens = 0;  // ragged: tokens in the buffer
};

// Floats a key carries beside its row per side in the portable and cpu kernels (KV_META,
// cl_kernels/extend_kv.clh): int8 its row scale, int4 a (scale, zero) pair per group.

// Floats a key carries beside its row per side in the portable and cpu kernels (KV_META,
// cl_kernels/extend_kv.clh): int8 its row scale, int4 a (scale, zero) pair per group.
int kv_meta(const KVDesc& kv);
// The quantised formats' build options beside KV_DT (int4: its group).
void add_quant_defs(const KVDesc& kv, std::map<std::string, std::string>& d);

// Per-request rows of the work list.
struct Requests {
  std::vector<int32_t> qo_start, qo_len, kv_len, base, tok_off, mask_off;
  int64_t num_tokens = 0;
  int64_t page_ids_needed = 0;
  int64_t mask_bytes = 0;
  int size() const { return int(qo_len.size()); }
};


// The tile of one build: which kernel (variant and source file), its work-group, rows and
// keys per step.
struct Tile {
  std::string variant, file, kernel;
  int wg = 0, rows = 0, keys = 0;
  bool tma = false;  // nv_wgmma fed by TMA (runs tma_maps_nv.cl first)
  std::string options;
  size_t local_bytes = 0;  // the estimate below (a pre-filter; the driver's figure decides)
};

// The portable kernel's tile (cl_kernels/extend.cl): WG work-items as a (ROWS / TM) x TX grid.

struct GenericTile {
  int wg, rows, keys, tm, dc, vc, qres;
  int tx() const { return wg / (rows / tm); }
};
// extend.cl: the stage (Q and K chunks [ROWS + KEYS][DC + 4], or with QRES K chunks
size_t generic_local_bytes(const GenericTile& g, int d, int meta = 0);
std::string generic_unfit(const GenericTile& g, int d);
size_t mma_local_bytes(int keys, int d, bool async);
size_t wgmma_local_bytes(int keys, int d, bool tma, int pages = 1024, int warps = 12);
std::string tma_unfit(const KVDesc& kv, const std::vector<int32_t>& tok_off);

// The Intel matrix-engine kernel's tile (cl_kernels/extend_dpas_intel.cl): RG x CG sub-groups
// of SG work-items, 8 x RB rows per sub-group, KEYS keys per tile.
struct DpasTile {
  int sg, rb, rg, cg, keys;
  int wg() const { return rg * cg * sg; }
  int rows() const { return rg * 8 * rb; }
};
// Q rows and P as 16-bit values, the scores [ROWS][KEYS + 1], the per-row partials
// [ROWS][WG / ROWS], factors (floats) and query positions (int), KEYS row offsets (long);
// emulated, one A operand per work-item (int8 at SG 8, short8 at SG 16).
size_t dpas_local_bytes(const DpasTile& t, int d, bool emulated);

// The CPU kernel's tile (cl_kernels/extend_cpu.cl): one work-item, ROWS = RV x VW packed rows,
// BK keys per block, SK x RV and PD x RV vector accumulators in its two micro-kernels.
struct CpuTile {
  int vw, rv, bk, sk, pd;
  int rows() const { return rv * vw; }
};
// Q^T and O^T [D][ROWS], the K and V blocks [BK][D], S^T [BK][ROWS] (floats).
size_t cpu_local_bytes(const CpuTile& t, int d);
CpuTile cpu_tile(const params::Entry& e, const std::map<std::string, int>& over, int d, int preferred_width);

// The AMD matrix-instruction kernels (cl_kernels/extend_amd_mm.clh): WAVES waves of `wave`
// lanes in row blocks of WSPLIT waves, 16 packed rows per block. Local memory: Q rows and P
// per block ([16][D + 8], [16][KEYS + 8] 16-bit), K rows [KEYS][D + 8] and V^T [D][KEYS + 8]
// (16-bit), S per block [16][KEYS + 4] and the row partials (floats), KEYS row offsets (long)
// and flags (int), plus the emulation's operand exchange (per work-item: 32 16-bit values
// for WMMA, 8 for MFMA) where it is emulated.
struct AmdMmTile {
  int waves, wsplit, keys, wave;
  int rb() const { return waves / wsplit; }
  int wg() const { return waves * wave; }
};
size_t amd_mm_local_bytes(const AmdMmTile& t, int d, int emul_per_item);

// The extend kernels' candidates, best first, as select_and_build takes them (variants.cpp).
std::vector<ops::Variant> candidates(const DeviceProfile& prof, const KVDesc& kv, const ExtendOptions& opt,
                                     const std::string& tma_why_not, int preferred_width, std::string* why_not_mma);
// ops::set_extend_test_candidate's candidate first where one is set.
void add_test_candidate(const ExtendOptions& opt, std::vector<ops::Variant>& cands);

}  // namespace ops::extend
}  // namespace clattn
