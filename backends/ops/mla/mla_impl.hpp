// The MLA op's shared pieces (backends/ops/mla/): the plan state a run reads, the tile the
// parameters ask for, and the functions the op's files call across (cache.cpp: the latent
// cache's geometry and checks; tile.cpp: the parameters' tile; variants.cpp: the candidate
// kernels and the catalog; plan.cpp: work lists and split-K; run.cpp: mla_run and
// append_latent). Kernels: cl_kernels/mla_tiled.cl (register-blocked), mla.cl (generic),
// mla_mma_nv.cl (tensor cores), mla_cpu.cl (CPU devices), mla_sparse.clh (sparse decode);
// parameters: backends/params/rows_mla.cpp; decisions: docs/mla.md.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "backends/dispatch/catalog.hpp"
#include "backends/dispatch/variant.hpp"
#include "backends/metadata/requests.hpp"
#include "backends/ops/op_util.hpp"
#include "clattn/mla.hpp"

namespace clattn {
namespace detail {
struct MlaPlanState : ops::PlanTable {
  std::shared_ptr<rt::Program> prog, merge_prog;
  rt::Kernel* attn_k = nullptr;
  rt::Kernel* merge_k = nullptr;
  size_t wg = 0, merge_wg = 0;
  int work_off = 0, merge_off = 0, log2_page = 0;
  // Fused split-K merge (mla_mma_nv.cl FUSE_MERGE): the part -> merge entry map and the
  // counter sets (one zeroed counter per (merge entry, head block) each) follow the merge
  // entries in the table.
  bool fuse_kernel = false;  // the kernel was built with FUSE_MERGE (takes the extra arguments)
  bool fuse = false;         // ... and this plan's merges run in it (pmap_off >= 0)
  int pmap_off = -1, n_hblk = 1;
  ops::CounterSets sets;
  float q_scale = 1.0f;
  int64_t lse_off_floats = 0;
  int64_t ckv_sp = 0, ckv_st = 0, kpe_sp = 0, kpe_st = 0, kpe_base = 0;  // 32-bit words

  // The run's view of the plan, fixed when it is made (MlaPlan's public fields are
  // informational: a caller may edit its copy). Byte sizes by checked arithmetic.
  int T = 0, H = 0;
  DType q_dtype = DType::BF16, o_dtype = DType::BF16;
  MlaCache cache;
  bool page_table = false;
  int num_work = 0, num_merges = 0, num_partials = 0;
  int64_t q_nope_bytes = 0, q_pe_bytes = 0, o_bytes = 0, lse_bytes = 0, ckv_bytes = 0, kpe_bytes = 0;
  int64_t page_id_bytes = 0, workspace_bytes = 0;
  int topk = 0;              // sparse decode: index entries per request (0: dense)
  int64_t index_bytes = 0;   // ... and the bytes of indices [B, topk] int32

  void freeze(const MlaPlan& p) {
    namespace ck = rt::checked;
    T = p.num_tokens, H = p.num_heads, q_dtype = p.q_dtype, o_dtype = p.o_dtype, cache = p.cache;
    page_table = p.page_table, num_work = p.num_work, num_merges = p.num_merges, num_partials = p.num_partials;
    const int64_t rows = ck::mul(T, H, "MLA q/o rows (tokens x num_heads)");
    const ops::RowBytes rb = ops::row_bytes(rows, kMlaCkvDim, q_dtype, kMlaCkvDim, o_dtype, p.page_ids_needed);
    q_nope_bytes = rb.q, o_bytes = rb.o, lse_bytes = rb.lse, page_id_bytes = rb.page_ids;
    q_pe_bytes = ck::product({rows, kMlaKpeDim, int64_t(dtype_size(q_dtype))}, "q_pe bytes");
    ckv_bytes = cache.ckv_required_bytes();
    kpe_bytes = cache.single_buffer ? 0 : cache.kpe_required_bytes();
    workspace_bytes = p.workspace_bytes;
    topk = p.topk;
    index_bytes = ck::product({int64_t(p.batch_size), int64_t(topk), 4}, "sparse MLA indices bytes");
  }
};
}  // namespace detail

namespace ops::mla {

using Requests = meta::KVRequests;

// cache.cpp
void check_cache(const MlaCache& c, const std::string& what);
void check_options(const MlaCache& cache, const MlaOptions& opt);
// int8 latent: the scale cache buffer holds the descriptor's pairs.
void require_latent_scales(const MlaCache& c, cl_mem scale_cache);
// Per-request query rows and key counts, and where their page ids start: the shared request
// view (backends/metadata/requests.hpp); a windowed CSR is unsupported.
Requests requests_from_csr(const PagedCsr& csr, const MlaCache& cache, const MlaOptions& opt, bool extend);
Requests requests_from_table(const PageTable& t, const MlaCache& cache, const MlaOptions& opt, bool extend);

// tile.cpp: the parameters' tile (every variant's knobs, validated; which variants apply).
struct Tile {
  int qb = 16, lanes = 16, load_bytes = 16;
  int wgs_per_cu = 2, min_chunk = 256, max_splits = 64;
  std::string source;
  // Tensor-core kernel (mla_mma_nv.cl) when the parameters ask for it (MMA=1) and the
  // device and cache allow it: 16 query vectors per group, MMA_WARPS warps, MMA_KEYS tokens.
  bool mma = false;
  int mma_warps = 4, mma_keys = 16;
  bool fuse_merge = true;  // decode: the last part's group merges (FUSE_MERGE) ...
  int fuse_max_parts = 8;  // ... when no merge has more parts than this (one group reads them all)
  int l2_ahead = 0;        // sparse decode: prefetch the listed rows this many tiles ahead into L2 (0: off)
  std::string why_not_mma;
  // Register-blocked portable kernel (mla_tiled.cl) when the parameters ask for it (TILED=1)
  // and it fits: tqb query vectors, KT-token tiles; S by tqb / MS x DS work-items (MS vectors
  // each), P V with MO vectors per work-item.
  bool tiled = false;
  int tqb = 16, kt = 8, ms = 1, ds = 16, dsw = 8, mo = 8;
  bool unroll = true;  // UNROLL_HINTS: GPUs on, CPU devices off (PoCL compiles unrolled code slowly)
  size_t tiled_wg() const { return size_t(tqb / ms) * ds; }
  std::string why_not_tiled;
  // CPU variant (mla_cpu.cl) when the parameters ask for it (CPU_KERNEL=1): one work-item per
  // group owning cqb query vectors (a multiple of the vector width vw); bk-key blocks; S in
  // sk x (cqb / vw) micro-tiles over sd-dim passes, P V in oh x od; fp8 decoded by bit moves
  // where fp8_fast.
  bool cpu = false;
  int cqb = 16, vw = 16, bk = 16, sk = 8, sd = 64, oh = 8, od = 2, touch_ahead = 1;
  bool fp8_fast = false;
  bool local_bufs = true;
};

size_t cpu_local_bytes(int cqb, int bk);
size_t mma_local_bytes(int warps, int keys);
size_t tiled_local_bytes(int qb, int kt, int ds);
size_t local_bytes(const Tile& t, DType dt);
// preferred_float_width: the device's CL_DEVICE_PREFERRED_VECTOR_WIDTH_FLOAT (the CPU
// variant's default VW); denorms: the device keeps f32 denormals (the CPU variant's fast fp8
// decode is exact only then).
Tile choose_tile(const DeviceProfile& prof, const MlaCache& c, const MlaOptions& opt, bool extend,
                 int preferred_float_width, bool denorms);

// variants.cpp
// The kernel's candidates, best first (sparse: every one built with SPARSE_IDX).
std::vector<ops::Variant> variants(const DeviceProfile& prof, const Tile& tile, const MlaCache& cache, bool extend,
                                   bool sparse = false);
// mla_append.cl's kernel as a work-group tile.
ops::Variant append_variant(const DeviceProfile& prof, const std::string& kernel = "append_latent");

// plan.cpp
// topk > 0: sparse decode over index lists of topk entries per request.
MlaPlan make_plan(const Context& ctx, const Requests& r, bool page_table, bool extend, const MlaCache& cache,
                  const MlaOptions& opt, cl_command_queue queue, int topk = 0);

}  // namespace ops::mla
}  // namespace clattn
