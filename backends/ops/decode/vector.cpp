// DecodePlan's plain-data form: to_vector, and from_vector with every field checked.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

#include "backends/ops/decode/decode_impl.hpp"

namespace clattn {
namespace ops::decode {

// The variant in a plan vector: 0 generic, 1 nv_ptx_shfl, 2 cpu, 3 intel_subgroups,
// 4 khr_subgroups, 5 nv_mma_sync (versions before the CPU variant wrote 0 or 1 here).
int64_t variant_code(const std::string& v) {
  return v == "nv_ptx_shfl"       ? 1
         : v == "cpu"             ? 2
         : v == "intel_subgroups" ? 3
         : v == "khr_subgroups"   ? 4
         : v == "nv_mma_sync"     ? 5
                                  : 0;
}

// A plan vector comes from outside the library: every field the kernels index with is
// checked against the others, so a forged or corrupted vector is rejected, never run.
[[noreturn]] void bad_vector(const std::string& why) { rt::invalid("DecodePlan::from_vector: " + why); }

int vec_int(int64_t x, const char* name) {
  if (x < std::numeric_limits<int>::min() || x > std::numeric_limits<int>::max())
    bad_vector(std::string(name) + " = " + std::to_string(x) + " does not fit int");
  return int(x);
}

void check_vector_tile(const DecodePlan& p, const KTile& t, const DecodePlanState& st) {
  auto need = [](bool ok, const std::string& why) {
    if (!ok) bad_vector(why);
  };
  need(ops::supported_head_dim(p.head_dim), "head_dim = " + std::to_string(p.head_dim) + " unsupported");
  need(is_pow2(p.page_size) && p.page_size <= 256, "page_size = " + std::to_string(p.page_size) + " unsupported");
  need(p.batch_size >= 0 && p.num_kv_heads >= 1 && p.num_qo_heads >= 1 && p.num_qo_heads % p.num_kv_heads == 0,
       "batch_size / num_qo_heads / num_kv_heads inconsistent");
  need(ops::is_float_io(p.q_dtype) && ops::is_float_io(p.o_dtype), "q/o dtype codes unsupported");
  need(int(p.cache.layout) == 0 || int(p.cache.layout) == 1, "cache layout code unsupported");
  need(st.group == p.num_qo_heads / p.num_kv_heads, "group != num_qo_heads / num_kv_heads");
  need(st.log2_page == log2_int(p.page_size), "log2_page does not match page_size");
  need(is_pow2(t.wg) && t.wg <= 1024 && is_pow2(t.tpt) && t.tpt <= 32 && t.tpt <= t.wg, "tile WG/TPT out of range");
  need(t.gmax >= 1 && t.gmax <= 16 && t.unroll >= 1 && t.unroll <= 16, "tile GMAX/UNROLL out of range");
  need(t.load_bytes == 4 || t.load_bytes == 8 || t.load_bytes == 16, "tile LOAD_BYTES out of range");
  need(!t.cpu || ((t.unroll == 4 || t.unroll == 8 || t.unroll == 16) && p.head_dim % t.unroll == 0),
       "CPU tile VW (UNROLL) must be 4, 8 or 16 and divide head_dim");
  need(!t.cpu || !t.fuse_merge, "CPU tile with a fused merge");
  const DType kt = p.cache.dtype;
  need(kv_nbytes(kt, p.cache.page_stride()) % t.load_bytes == 0 && kv_nbytes(kt, p.cache.token_stride()) % t.load_bytes == 0 &&
           kv_nbytes(kt, p.cache.head_stride()) % t.load_bytes == 0 && kv_nbytes(kt, p.head_dim) % t.load_bytes == 0,
       "LOAD_BYTES does not divide the cache strides");
  need(t.n_hblk == (st.group + t.gmax - 1) / t.gmax, "head blocks != ceil(group / GMAX)");
  need(p.num_work >= 0 && p.num_partials >= 0 && p.num_merges >= 0 && p.num_merges <= p.num_partials,
       "work / partial / merge counts out of range");
  need(p.page_ids_needed >= 0, "page_ids_needed < 0");
}

// Work items and merge entries: every index the kernels follow stays inside q/o, the
// page-id list, the partial states and the merge entries.
void check_vector_table(const DecodePlan& p, const DecodePlanState& st) {
  const std::vector<int32_t>& h = st.host;
  if (st.work_off != 0 || int64_t(st.merge_off) != 8 * int64_t(p.num_work) ||
      int64_t(h.size()) != int64_t(st.sets.base) + int64_t(ops::CounterSets::kSets) * st.sets.per_set)
    bad_vector("table layout does not match num_work / num_merges");
  for (size_t k = size_t(st.sets.base); k < h.size(); ++k)
    if (h[k] != 0) bad_vector("merge counters are not zero");
  const int shift = st.log2_page;
  for (int w = 0; w < p.num_work; ++w) {
    const int32_t* e = &h[size_t(8) * w];
    const std::string at = "work item " + std::to_string(w);
    if (e[0] < 0 || e[0] >= p.batch_size) bad_vector(at + ": request outside the batch");
    if (e[1] < 0 || e[2] < e[1]) bad_vector(at + ": bad key range");
    if (e[3] < -1 || e[3] >= p.num_partials) bad_vector(at + ": partial state outside the workspace");
    if (e[4] < 0 || e[5] < 0 || e[5] >= p.page_size) bad_vector(at + ": bad page base / token offset");
    if (e[2] > e[1]) {
      if (p.cache.num_pages < 1) bad_vector(at + ": keys in a cache of 0 pages");
      const int64_t last = int64_t(e[4]) + ((int64_t(e[5]) + e[2] - 1) >> shift);
      if (last >= p.page_ids_needed) bad_vector(at + ": keys past the page-id list");
    }
    if (e[3] >= 0 && st.fuse && (e[6] < 0 || e[6] >= p.num_merges)) bad_vector(at + ": merge entry out of range");
  }
  for (int m = 0; m < p.num_merges; ++m) {
    const int32_t* e = &h[size_t(st.merge_off) + size_t(4) * m];
    if (e[0] < 0 || e[0] >= p.batch_size || e[1] < 0 || e[2] < 1 || e[2] > kMaxMergeParts ||
        int64_t(e[1]) + e[2] > p.num_partials)
      bad_vector("merge entry " + std::to_string(m) + " out of range");
  }
}


}  // namespace ops::decode

using namespace ops::decode;

std::vector<int64_t> DecodePlan::to_vector() const {
  if (!state_) rt::invalid("DecodePlan::to_vector: empty plan");
  if (state_->fixed) rt::invalid("DecodePlan::to_vector: a fixed-capacity plan's work list lives on the device");
  const DecodePlanState& st = *state_;
  auto fbits = [](float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return int64_t(u);
  };
  std::vector<int64_t> v = {kPlanMagic, kPlanVersion, batch_size, num_qo_heads, num_kv_heads, head_dim, page_size,
                            page_table, page_ids_needed, int64_t(q_dtype), int64_t(o_dtype), cache.num_pages,
                            int64_t(cache.layout), int64_t(cache.dtype), cache.page_stride(), cache.token_stride(),
                            cache.head_stride(), int64_t(cache.scale_dtype), cache.scale_stride_page,
                            cache.scale_stride_token, cache.scale_stride_head, cache.quant_group, num_work, num_partials, num_merges, chunk_tokens, workspace_bytes,
                            tile.wg, tile.tpt, tile.gmax, tile.unroll, tile.load_bytes,
                            tile.head_blocks, variant_code(variant), int64_t(st.fuse), int64_t(st.prefetch), st.group, st.log2_page, fbits(st.q_scale),
                            fbits(st.cap_log2), fbits(st.inv_cap), st.lse_off_floats, st.work_off, st.merge_off,
                            st.sets.base, int64_t(st.host.size())};
  v.insert(v.end(), st.host.begin(), st.host.end());
  return v;
}

DecodePlan DecodePlan::from_vector(const Context& ctx, const std::vector<int64_t>& v, cl_command_queue queue) {
  constexpr size_t kHeader = 46;
  if (v.size() < kHeader || v[0] != kPlanMagic || v[1] != kPlanVersion)
    bad_vector("not a decode plan vector (magic/version mismatch)");
  auto fval = [](int64_t x) {
    uint32_t u = uint32_t(x);
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  };
  size_t i = 2;
  auto next_int = [&](const char* name) { return vec_int(v[i++], name); };
  DecodePlan p;
  p.batch_size = next_int("batch_size"), p.num_qo_heads = next_int("num_qo_heads");
  p.num_kv_heads = next_int("num_kv_heads"), p.head_dim = next_int("head_dim");
  p.page_size = next_int("page_size"), p.page_table = v[i++] != 0, p.page_ids_needed = v[i++];
  p.q_dtype = DType(next_int("q_dtype")), p.o_dtype = DType(next_int("o_dtype"));
  p.cache.num_pages = next_int("num_pages"), p.cache.layout = KVLayout(next_int("layout"));
  p.cache.dtype = DType(next_int("kv dtype"));
  p.cache.stride_page = v[i++], p.cache.stride_token = v[i++], p.cache.stride_head = v[i++];
  p.cache.scale_dtype = DType(next_int("scale dtype"));
  p.cache.scale_stride_page = v[i++], p.cache.scale_stride_token = v[i++], p.cache.scale_stride_head = v[i++];
  p.cache.quant_group = next_int("quant_group");
  p.cache.page_size = p.page_size, p.cache.num_kv_heads = p.num_kv_heads, p.cache.head_dim = p.head_dim;
  p.num_work = next_int("num_work"), p.num_partials = next_int("num_partials");
  p.num_merges = next_int("num_merges"), p.chunk_tokens = next_int("chunk_tokens");
  p.workspace_bytes = v[i++];
  KTile t;
  t.wg = next_int("WG"), t.tpt = next_int("TPT"), t.gmax = next_int("GMAX"), t.unroll = next_int("UNROLL");
  t.load_bytes = next_int("LOAD_BYTES");
  t.n_hblk = next_int("head blocks");
  const int64_t vcode = v[i++];
  if (vcode < 0 || vcode > 5) bad_vector("variant code out of range");
  t.ptx_shfl = vcode == 1;
  t.mma = vcode == 5;
  t.cpu = vcode == 2;
  t.subgroup = vcode == 3 || vcode == 4;
  t.sg_intel = vcode == 3, t.sg_khr = vcode == 4;
  t.fuse_merge = v[i++] != 0;
  t.prefetch = v[i++] != 0;
  auto st = std::make_shared<DecodePlanState>();
  st->fuse = t.fuse_merge != 0;
  st->prefetch = t.prefetch != 0;
  st->group = next_int("group"), st->log2_page = next_int("log2_page");
  st->q_scale = fval(v[i++]), st->cap_log2 = fval(v[i++]), st->inv_cap = fval(v[i++]);
  const int64_t lse_off = v[i++];
  st->work_off = next_int("work_off"), st->merge_off = next_int("merge_off");
  const int64_t counter_base = v[i++];
  const int64_t n = v[i++];
  if (i != kHeader || n < 0 || v.size() - kHeader != uint64_t(n)) bad_vector("table length does not match the vector");
  ops::check_paged_kv(p.cache, "plan cache", true, true);
  check_vector_tile(p, t, *st);
  // The workspace layout and the counter sets are recomputed, not trusted.
  planner::WorkspaceLayout ws = planner::workspace_layout(p.num_partials, p.num_qo_heads, p.head_dim);
  if (ws.bytes != p.workspace_bytes || ws.lse_offset_bytes / 4 != lse_off)
    bad_vector("workspace layout does not match the plan's shape");
  st->lse_off_floats = lse_off;
  st->sets.base = rt::checked::to_i32(int64_t(st->merge_off) + 4 * int64_t(p.num_merges), "merge counters' offset");
  st->sets.per_set =
      st->fuse ? rt::checked::to_i32(int64_t(p.num_merges) * p.num_kv_heads * t.n_hblk, "merge counters") : 0;
  if (counter_base != st->sets.base) bad_vector("merge counters' offset does not match the table layout");
  st->host.reserve(size_t(n));
  for (int64_t k = 0; k < n; ++k) st->host.push_back(int32_t(v[kHeader + size_t(k)]));
  check_vector_table(p, *st);
  st->gmax = t.gmax, st->n_hblk = t.n_hblk, st->wg = size_t(t.wg);
  auto& c = rt::impl(ctx);
  // Speed only (the merge's order is fixed): the device's current entry, not serialised.
  const params::Entry entry = params::lookup(c.profile, "decode", kv_key(p.cache.dtype));
  t.merge_batch = std::clamp(entry.get_or("MERGE_BATCH", 8), 1, 32);
  t.mma_unroll = std::clamp(entry.get_or("MMA_UNROLL", 1), 1, 4);
  // Sub-group size and shuffle form: the device's current entry (the sums are the same bits
  // in every form).
  if (t.subgroup) {
    t.sg_size = entry.get_or("SUBGROUP_SIZE", 0);
    if (t.sg_size < 0 || t.sg_size > 128 || (t.sg_size && !is_pow2(t.sg_size))) t.sg_size = 0;
    t.sg_shuffle = std::clamp(entry.get_or("SUBGROUP_SHUFFLE", -1), -1, 1);
  }
  ops::DecodeCheckCase k;
  k.cache = p.cache, k.group = p.num_qo_heads / std::max(1, p.num_kv_heads), k.q_dtype = p.q_dtype;
  k.o_dtype = p.o_dtype, k.split = p.num_merges > 0;
  const KTile built = build_kernels(ctx, t, p.cache, k, *st, p);
  if (built.wg != t.wg || built.gmax != t.gmax || built.unroll != t.unroll || built.tpt != t.tpt)
    bad_vector("its tile (WG " + std::to_string(t.wg) + ", GMAX " + std::to_string(t.gmax) +
               ") does not fit this device; plan again here");
  st->freeze(p);
  p.table_bytes = st->upload_host(c, queue, "decode plan table");
  p.tile = {t.wg, t.tpt, t.gmax, t.unroll, t.load_bytes, t.n_hblk};
  p.state_ = st;
  return p;
}
}  // namespace clattn
