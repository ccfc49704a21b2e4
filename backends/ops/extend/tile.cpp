// The extend kernels' tiles: local-memory sizes (the host's estimates; the driver's figures
// decide), the portable tile's rules, and whether the TMA feed can serve a batch.
#include <algorithm>
#include <cmath>
#include <limits>
#include <mutex>
#include <numeric>
#include <optional>

#include "backends/ops/extend/extend_impl.hpp"

namespace clattn {
namespace ops::extend {

int kv_meta(const KVDesc& kv) {
  if (kv.dtype == DType::I8) return 1;
  if (kv.dtype == DType::I4) return 2 * (kv.head_dim / kv.quant_group);
  return 0;
}

// The quantised formats' build options beside KV_DT (int4: its group).
void add_quant_defs(const KVDesc& kv, std::map<std::string, std::string>& d) {
  if (kv.dtype == DType::I4) d["QGROUP"] = to_string(kv.quant_group);
}


// [KEYS][DC + 4]; or a V chunk [VC][D + 4]), with QRES the Q rows [ROWS][D + 4], P^T
// [KEYS][ROWS + 4], the row partials [ROWS][TX + 4] (floats), KEYS row offsets (long) and
// the K and V meta of a quantised tile (2 x KEYS x `meta` floats, kv_meta; other builds never
// read their one-float placeholder, which the compilers drop).
size_t generic_local_bytes(const GenericTile& g, int d, int meta) {
  const size_t srows = size_t(g.qres ? g.keys : g.rows + g.keys);
  const size_t stage = std::max(srows * (g.dc + 4), size_t(g.vc) * (d + 4));
  const size_t qs = g.qres ? size_t(g.rows) * (d + 4) : 0;
  const size_t scales = 2 * size_t(g.keys) * size_t(meta);
  return (stage + qs + size_t(g.keys) * (g.rows + 4) + size_t(g.rows) * (g.tx() + 4) + scales) * 4 +
         size_t(g.keys) * 8;
}
// "" when the tile's divisibility rules hold (the kernel's #error line), else which fails.
std::string generic_unfit(const GenericTile& g, int d) {
  if (g.wg < 1 || g.rows < 1 || g.keys < 1 || g.tm < 1 || g.dc < 1 || g.vc < 1) return "every value must be >= 1";
  if (g.tm % 4 != 0 || g.rows % g.tm != 0) return "TM must be a multiple of 4 dividing ROWS";
  if (g.wg % (g.rows / g.tm) != 0) return "WG must be a multiple of ROWS / TM";
  if (g.keys % g.tx() != 0) return "KEYS must be a multiple of TX = WG / (ROWS / TM) = " + to_string(g.tx());
  if (g.dc % 4 != 0 || d % g.dc != 0) return "DC must be a multiple of 4 dividing head_dim " + to_string(d);
  if (g.keys % g.vc != 0) return "VC must divide KEYS";
  return "";
}
// extend_mma_nv.cl: Ks [keys][KRS words] (rows swizzled when d/8 is a multiple of 8, else
// padded to 16 mod 32 words) and key row offsets of two tiles [2][keys] (long), plus the feed's
// V: register staging (extend_mma_feed_regs_nv.clh) one Ks and a transposed Vt [d][keys/2
// words]; ASYNC (cp.async, 16-bit KV, extend_mma_feed_cpasync_nv.clh) two stages of Ks and of V
// rows (d / 8 chunks, padded to an odd count unless a multiple of 8).
size_t mma_local_bytes(int keys, int d, bool async) {
  const int half = d / 2, cpr = d / 8;
  const int krs = cpr % 8 == 0 ? half : half + (48 - half % 32) % 32;
  if (async) return 2 * size_t(keys) * krs * 4 + 2 * size_t(keys) * size_t(cpr % 8 == 0 ? cpr : cpr | 1) * 16 +
                    size_t(keys) * 2 * 8;
  return size_t(keys) * krs * 4 + size_t(d) * (keys / 2) * 4 + size_t(keys) * 2 * 8;
}

// extend_wgmma_nv.cl: three K and three V stages in core-matrix layout (unpadded); row offsets
// stay in registers (extend_wgmma_feed_cpasync_nv.clh). TMA (extend_wgmma_feed_tma_nv.clh):
// five stages (TK_ST + TV_ST), 1 KB of alignment slack, a full and an empty mbarrier per
// stage, the table of `pages` page ids (TMA_PAGES) and one run flag per warp (prun).
size_t wgmma_local_bytes(int keys, int d, bool tma, int pages, int warps) {
  return tma ? 5 * size_t(keys) * d * 2 + 1024 + 10 * 8 + 4 * size_t(pages) + 4 * size_t(warps)
             : 6 * size_t(keys) * d * 2;
}

// Why the TMA feed cannot serve these requests ("" when it can): its 16-key boxes must not
// cross a page, its strides are whole 16 bytes (checked with the other tensor-core
// conditions) and its coordinates 32-bit.
std::string tma_unfit(const KVDesc& kv, const std::vector<int32_t>& tok_off) {
  if (kv.paged && kv.page_size % 16 != 0) return "page_size " + to_string(kv.page_size) + " is not a multiple of 16";
  for (size_t i = 0; i < tok_off.size(); ++i)
    if (tok_off[i] % 16 != 0)
      return "request " + to_string(i) + " starts at offset " + to_string(tok_off[i]) + " of its first page";
  if ((kv.paged ? kv.num_pages : kv.num_tokens) >= (int64_t(1) << 31)) return "more than 2^31 pages or tokens";
  return "";
}


// Q rows and P as 16-bit values, the scores [ROWS][KEYS + 1], the per-row partials
// [ROWS][WG / ROWS], factors (floats) and query positions (int), KEYS row offsets (long);
// emulated, one A operand per work-item (int8 at SG 8, short8 at SG 16).
size_t dpas_local_bytes(const DpasTile& t, int d, bool emulated) {
  const size_t rows = size_t(t.rows()), keys = size_t(t.keys);
  return rows * d * 2 + rows * (keys + 1) * 4 + rows * keys * 2 + rows * (size_t(t.wg()) / rows + 2) * 4 +
         keys * 8 + (emulated ? size_t(t.wg()) * (t.sg == 8 ? 32 : 16) : 0);
}

// The intel_dpas candidate where it applies ("" in *why_not), else why not.

size_t cpu_local_bytes(const CpuTile& t, int d) {
  return (2 * size_t(d) * t.rows() + 2 * size_t(t.bk) * d + size_t(t.bk) * t.rows()) * 4;
}
// The CPU tile from the parameters: VW 0 = the device's preferred float width (4, 8 or 16,
// lowered to divide head_dim); SK / PD 0 = 8 with 16-wide vectors (32 vector registers on
// AVX-512), else 4 (16 on AVX2).
CpuTile cpu_tile(const params::Entry& e, const std::map<std::string, int>& over, int d, int preferred_width) {
  CpuTile t{ops::cpu_vector_width(ops::param_or(e, over, "VW", 0), preferred_width, d, "extend"),
            ops::param_or(e, over, "RV", 2), ops::param_or(e, over, "BK", 32), ops::param_or(e, over, "SK", 0),
            ops::param_or(e, over, "PD", 0)};
  if (t.sk == 0) t.sk = t.vw >= 16 ? 8 : 4;
  if (t.pd == 0) t.pd = t.vw >= 16 ? 8 : 4;
  if (t.rv < 1 || t.rv > 8) rt::invalid("extend parameter RV = " + to_string(t.rv) + " must be 1..8");
  if (t.bk < 1 || t.bk > 64 || t.sk < 1 || t.bk % t.sk != 0)
    rt::invalid("extend parameters BK = " + to_string(t.bk) + ", SK = " + to_string(t.sk) +
                ": BK must be 1..64 and a multiple of SK");
  if (t.pd < 1 || d % t.pd != 0)
    rt::invalid("extend parameter PD = " + to_string(t.pd) + " must divide head_dim " + to_string(d));
  return t;
}


size_t amd_mm_local_bytes(const AmdMmTile& t, int d, int emul_per_item) {
  const size_t rb = size_t(t.rb()), ng = size_t(t.wave) * t.wsplit / 16, k = size_t(t.keys);
  return rb * 16 * (d + 8) * 2 + k * (d + 8) * 2 + size_t(d) * (k + 8) * 2 + rb * 16 * (k + 8) * 2 +
         rb * 16 * (k + 4) * 4 + rb * ng * 16 * 4 + rb * 16 * 4 + k * 8 + k * 4 + size_t(t.wg()) * emul_per_item * 2;
}

// amd_wmma / amd_mfma (asked for): "" in *why when it was added to `out`, else why not.

}  // namespace ops::extend
}  // namespace clattn
