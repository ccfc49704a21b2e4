// clattn-bench sparse: HSA decode (landmark selection + sparse decode) against dense decode
// at the same context length, and DSA (indexer + sparse MLA decode) against dense MLA
// decode, each against the same-process stream-read limit.
//
// Lines per case: dense decode (K+V of every key), hsa_select alone (the landmark rows it
// reads), hsa_decode alone (bytes = K+V of the selected pages' keys and the window's, each
// read once per selection list, + q + o) and hsa_run (selection + sparse decode), whose
// time is also given as a percentage of the dense decode's. Every request has the same
// length; the cache holds one repeating pattern, so every candidate ties and each list
// selects its first topk candidates (the bytes read do not depend on which).
//
//   clattn-bench sparse                       HSA B=64 S=32k page 64 topk 64 (no window, window
//                                             512, head); DSA B=64 S=32k topk 2048 H=16, 128
//   clattn-bench sparse --dsa                 the DSA cases only
//   clattn-bench sparse --quick               small shapes for CPU devices (PoCL)
//   clattn-bench sparse -B 8 -S 8192 --topk 32 --window 256 --strategy head
#include <algorithm>
#include <cstdio>
#include <numeric>
#include <random>

#include "bench/bench.hpp"
#include "clattn/decode.hpp"
#include "clattn/mla.hpp"
#include "clattn/sparse.hpp"
#include "tools/cli.hpp"

namespace clattn::bench {
namespace {

struct SparseCase {
  int B = 64, S = 32768, Hq = 32, Hkv = 8, D = 128, P = 64, topk = 64, window = 0;
  HsaStrategy strategy = HsaStrategy::Group;
  DType kv = DType::BF16;
};

std::string shape_of(const SparseCase& c) {
  char buf[200];
  std::snprintf(buf, sizeof buf, "B=%d S=%d Hq=%d Hkv=%d D=%d P=%d %s topk=%d W=%d %s", c.B, c.S, c.Hq, c.Hkv, c.D,
                c.P, dtype_name(c.kv), c.topk, c.window, c.strategy == HsaStrategy::Head ? "head" : "group");
  return buf;
}

void run_case(Harness& h, const SparseCase& c) {
  Context& ctx = h.ctx();
  PagedKV cache;
  cache.page_size = c.P, cache.num_kv_heads = c.Hkv, cache.head_dim = c.D, cache.dtype = c.kv;
  const PagedCsr csr = shuffled_csr(c.B, c.S, c.P, 7);
  const std::vector<int32_t>& ids = csr.kv_indices;
  cache.num_pages = int(ids.size());

  DecodeOptions dopt;
  dopt.num_qo_heads = c.Hq, dopt.q_dtype = DType::BF16, dopt.o_dtype = DType::BF16, dopt.validate = false;
  DecodePlan dense = decode_plan(ctx, csr, cache, dopt);
  HsaOptions hopt;
  hopt.num_qo_heads = c.Hq, hopt.topk = c.topk, hopt.strategy = c.strategy, hopt.window_size = c.window;
  hopt.q_dtype = DType::BF16, hopt.o_dtype = DType::BF16, hopt.validate = false;
  HsaPlan sparse = hsa_plan(ctx, csr, cache, hopt);

  const size_t cache_bytes = size_t(cache.required_bytes());
  const size_t qo_bytes = size_t(c.B) * c.Hq * c.D * 2;
  const int nsel = sparse.num_sel_heads;
  DeviceBuffer k(ctx, cache_bytes), v(ctx, cache_bytes), q(ctx, qo_bytes), o(ctx, qo_bytes);
  DeviceBuffer pid(ctx, ids.size() * 4), lse(ctx, size_t(c.B) * c.Hq * 4);
  DeviceBuffer sel(ctx, size_t(c.B) * nsel * c.topk * 4), sc(ctx, size_t(c.B) * nsel * c.topk * 4);
  DeviceBuffer ws(ctx, size_t(std::max(sparse.workspace_bytes, dense.workspace_bytes)));
  pid.write(ctx, ids.data(), ids.size() * 4);
  fill_pattern(ctx, k.get(), cache_bytes, 1);
  fill_pattern(ctx, v.get(), cache_bytes, 2);
  fill_pattern(ctx, q.get(), qo_bytes, 3);
  ctx.finish();

  DecodeBuffers db;
  db.q = q.get(), db.k_cache = k.get(), db.v_cache = v.get(), db.page_ids = pid.get(), db.o = o.get();
  db.lse = lse.get(), db.workspace = dense.workspace_bytes ? ws.get() : nullptr;
  HsaBuffers hb;
  hb.q = q.get(), hb.k_cache = k.get(), hb.v_cache = v.get(), hb.page_ids = pid.get();
  hb.selected_page_ids = sel.get(), hb.selected_scores = sc.get(), hb.o = o.get(), hb.lse = lse.get();
  hb.workspace = ws.get();

  const double es = double(dtype_size(c.kv));
  const double ms_dense = h.time_ms([&] { decode_run(ctx, dense, db); });
  h.report("dense decode", shape_of(c) + " " + dense.variant, ms_dense,
           2.0 * c.B * double(c.S) * c.Hkv * c.D * es + 2.0 * double(qo_bytes), 4.0 * c.B * double(c.S) * c.Hq * c.D);
  // Selection: the landmark rows of every candidate page, once per selection list.
  int64_t cands = 0;
  for (int n : sparse.num_candidates) cands += n;
  const double ms_sel = h.time_ms([&] { hsa_select(ctx, sparse, hb); });
  h.report("hsa_select", shape_of(c), ms_sel, double(cands) * nsel * c.D * es, 2.0 * double(cands) * c.Hq * c.D);
  hsa_select(ctx, sparse, hb);
  ctx.finish();
  // Sparse decode: each list reads its selected pages' keys (topk x P, or the candidates
  // when fewer) and, fused, the window's.
  const int cutoff = c.window > 0 ? std::max(0, c.S - c.window) : c.S;
  const double sel_tokens = double(std::min(c.topk, cutoff / c.P)) * c.P;
  const double win_tokens = c.window > 0 ? double(c.S - cutoff) : 0.0;
  const double rows_sel = double(c.B) * nsel, rows_win = double(c.B) * c.Hkv;
  const double dec_bytes = 2.0 * c.D * es * (rows_sel * sel_tokens + rows_win * win_tokens) + 2.0 * double(qo_bytes);
  const double dec_flops = 4.0 * c.B * c.Hq * c.D * (sel_tokens + win_tokens);
  const double ms_dec = h.time_ms([&] { hsa_decode(ctx, sparse, hb); });
  h.report("hsa_decode", shape_of(c) + " " + sparse.decode_variant, ms_dec, dec_bytes, dec_flops);
  const double ms_run = h.time_ms([&] { hsa_run(ctx, sparse, hb); });
  h.report("hsa_run", shape_of(c), ms_run, dec_bytes + double(cands) * nsel * c.D * es, dec_flops);
  std::printf("#   hsa_run = %.1f %% of dense decode time (%.3f ms vs %.3f ms); plan: %d work items, %d merges\n",
              100.0 * ms_run / ms_dense, ms_run, ms_dense, sparse.num_work, sparse.num_merges);
  std::fflush(stdout);
}

// DSA: the indexer over a bf16 key cache of Di=128 (Hi=64 heads), then sparse MLA decode over
// topk random distinct positions per request (sorted, as the indexer writes them; rows
// scattered over the request's pages: the worst case for DRAM and TLB) and over its first
// topk positions (contiguous rows), against dense MLA decode of the whole request. Sparse
// bytes = the listed latent rows (576 wide) + q + o.
struct DsaCase {
  int B = 64, S = 32768, H = 16, topk = 2048, P = 64;
};

void run_dsa_case(Harness& h, const DsaCase& c, const std::map<std::string, int>& mla_params,
                  const std::map<std::string, int>& index_params) {
  Context& ctx = h.ctx();
  const PagedCsr csr = shuffled_csr(c.B, c.S, c.P, 11);
  const std::vector<int32_t>& ids = csr.kv_indices;
  MlaCache cache;
  cache.num_pages = int(ids.size()), cache.page_size = c.P, cache.dtype = DType::BF16;
  MlaOptions mo;
  mo.num_heads = c.H, mo.sm_scale = 0.0721688f, mo.validate = false;
  MlaPlan dense = mla_decode_plan(ctx, csr, cache, mo);
  MlaOptions so = mo;
  so.params = mla_params;
  MlaPlan sparse = mla_sparse_decode_plan(ctx, csr, cache, so, c.topk);
  PagedKV icache;
  icache.num_pages = cache.num_pages, icache.page_size = c.P, icache.num_kv_heads = 1, icache.head_dim = 128;
  DsaIndexOptions io;
  io.num_index_heads = 64, io.topk = c.topk, io.validate = false, io.params = index_params;
  DsaIndexPlan index = dsa_index_plan(ctx, csr, icache, io);

  const size_t rows = size_t(c.B) * c.H;
  DeviceBuffer ckv(ctx, size_t(cache.ckv_required_bytes())), kpe(ctx, size_t(cache.kpe_required_bytes()));
  DeviceBuffer ik(ctx, size_t(icache.required_bytes())), iq(ctx, size_t(c.B) * 64 * 128 * 2);
  DeviceBuffer iw(ctx, size_t(c.B) * 64 * 4);
  DeviceBuffer qn(ctx, rows * 512 * 2), qp(ctx, rows * 64 * 2), o(ctx, rows * 512 * 2), lse(ctx, rows * 4);
  DeviceBuffer pid(ctx, ids.size() * 4), idx(ctx, size_t(c.B) * c.topk * 4), isc(ctx, size_t(c.B) * c.topk * 4);
  DeviceBuffer ws(ctx, size_t(std::max({dense.workspace_bytes, sparse.workspace_bytes, index.workspace_bytes,
                                        int64_t(4)})));
  for (DeviceBuffer* b : {&ckv, &kpe, &ik, &iq, &qn, &qp}) fill_pattern(ctx, b->get(), b->bytes(), 5);
  iw.fill_bytes(ctx, 0x3c);
  pid.write(ctx, ids.data(), ids.size() * 4);
  // topk distinct random positions per request, ascending.
  std::vector<int32_t> pos(size_t(c.B) * c.topk);
  std::mt19937 rng(3);
  std::vector<int32_t> all(size_t(c.S));
  for (int b = 0; b < c.B; ++b) {
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), rng);
    const int n = std::min(c.topk, c.S);
    std::sort(all.begin(), all.begin() + n);
    for (int j = 0; j < c.topk; ++j) pos[size_t(b) * c.topk + j] = j < n ? all[size_t(j)] : -1;
  }
  idx.write(ctx, pos.data(), pos.size() * 4);
  ctx.finish();

  MlaBuffers mb;
  mb.q_nope = qn.get(), mb.q_pe = qp.get(), mb.ckv = ckv.get(), mb.kpe = kpe.get(), mb.page_ids = pid.get();
  mb.o = o.get(), mb.lse = lse.get(), mb.workspace = ws.get();
  char shape[160];
  std::snprintf(shape, sizeof shape, "B=%d S=%d H=%d P=%d bf16 topk=%d", c.B, c.S, c.H, c.P, c.topk);
  const double qo = double(rows) * (576 + 512) * 2;
  const double ms_dense = h.time_ms([&] { mla_run(ctx, dense, mb); });
  h.report("mla_decode", std::string(shape) + " " + dense.variant, ms_dense, double(c.B) * c.S * 576 * 2 + qo,
           2.0 * c.H * double(c.B) * c.S * (576 + 512));
  const double ms_sparse = h.time_ms([&] { mla_sparse_run(ctx, sparse, mb, idx.get()); });
  const double toks = double(c.B) * std::min(c.topk, c.S);
  h.report("mla_sparse", std::string(shape) + " " + sparse.variant + param_suffix(mla_params), ms_sparse, toks * 576 * 2 + qo,
           2.0 * c.H * toks * (576 + 512));
  DsaIndexBuffers ib;
  ib.q = iq.get(), ib.weights = iw.get(), ib.k_cache = ik.get(), ib.page_ids = pid.get(), ib.indices = idx.get();
  ib.scores = isc.get(), ib.workspace = ws.get();
  const double ms_index = h.time_ms([&] { dsa_index_run(ctx, index, ib); });
  h.report("dsa_index", std::string(shape) + " Hi=64 Di=128 " + index.variant + param_suffix(index_params), ms_index,
           double(c.B) * c.S * 128 * 2, 2.0 * 64 * 128 * double(c.B) * c.S);
  {
    const auto t = h.last_command([&](const Enqueue& e) { dsa_index_run(ctx, index, ib, e); });
    std::printf("#   indexer top-k kernel: %.1f us of a %.1f us call (one call on an idle device)\n", t.last_us,
                t.call_us);
  }
  std::printf("#   indexer + sparse MLA = %.1f %% of dense MLA decode time (%.3f + %.3f ms vs %.3f ms)\n",
              100.0 * (ms_index + ms_sparse) / ms_dense, ms_index, ms_sparse, ms_dense);
  // The indexer's own positions: the pattern-filled cache ties every score, so each request
  // keeps its first topk positions (contiguous rows: the other end from random ones).
  dsa_index_run(ctx, index, ib);
  ctx.finish();
  const double ms_first = h.time_ms([&] { mla_sparse_run(ctx, sparse, mb, idx.get()); });
  h.report("mla_sparse", std::string(shape) + " first-topk " + sparse.variant + param_suffix(mla_params), ms_first,
           toks * 576 * 2 + qo, 2.0 * c.H * toks * (576 + 512));
  std::fflush(stdout);
}

}  // namespace

void register_sparse(CLI::App& app, Harness& h) {
  auto* cmd = app.add_subcommand("sparse", "HSA decode: selection + sparse decode vs dense decode (GB/s vs stream-read)");
  struct Opts {
    SparseCase c;
    std::string kv = "bf16", strategy = "group";
    bool quick = false, custom = false, dsa_only = false;
    std::vector<std::string> mla_params, index_params;
  };
  auto o = std::make_shared<Opts>();
  using cli::at_least;
  using cli::one_of;
  auto shape_opt = [&](const char* name, int& dst, const char* help, int min) {
    cmd->add_option(name, dst, help)->check(at_least(min))->each([o](const std::string&) { o->custom = true; });
  };
  shape_opt("-B,--batch", o->c.B, "one case: requests", 1);
  shape_opt("-S,--seq", o->c.S, "one case: KV length of every request", 1);
  shape_opt("-H,--hq", o->c.Hq, "one case: query heads", 1);
  shape_opt("--hkv", o->c.Hkv, "one case: KV heads (divides the query heads)", 1);
  shape_opt("-D,--dim", o->c.D, "one case: head dim", 1);
  shape_opt("--page", o->c.P, "one case: page size (>= 2: the landmark is the last slot)", 2);
  shape_opt("--topk", o->c.topk, "one case: pages per selection list", 1);
  shape_opt("--window", o->c.window, "one case: dense window tokens (0 = none)", 0);
  cmd->add_option("--kv", o->kv, "KV dtype")->check(one_of({"f32", "f16", "bf16", "e4m3"}));
  cmd->add_option("--strategy", o->strategy, "selection strategy")->check(one_of({"group", "head"}));
  cmd->add_flag("--quick", o->quick, "small sweep for CPU devices");
  cmd->add_option("--mla-param", o->mla_params, "sparse MLA decode parameter override NAME=VALUE (repeatable)");
  cmd->add_option("--index-param", o->index_params, "DSA indexer parameter override NAME=VALUE (repeatable)");
  cmd->add_flag("--dsa", o->dsa_only, "only the DSA cases (indexer + sparse MLA decode vs dense MLA decode)");
  cmd->callback([o, &h] {
    SparseCase base = o->c;
    base.kv = o->kv == "f32" ? DType::F32 : o->kv == "f16" ? DType::F16 : o->kv == "e4m3" ? DType::FP8_E4M3 : DType::BF16;
    base.strategy = o->strategy == "head" ? HsaStrategy::Head : HsaStrategy::Group;
    if (base.Hq % base.Hkv != 0)
      cli::bad_argument("--hkv", std::to_string(base.Hkv) + " does not divide the query heads (" +
                                     std::to_string(base.Hq) + ")");
    const std::map<std::string, int> mla_params = op_params(o->mla_params, {"mla_decode"});
    const std::map<std::string, int> index_params = op_params(o->index_params, {"dsa_index"});
    if (check_args_only()) return;
    std::vector<SparseCase> cases;
    auto with = [&](int B, int S, int topk, int W, HsaStrategy s) {
      SparseCase c = base;
      c.B = B, c.S = S, c.topk = topk, c.window = W, c.strategy = s;
      cases.push_back(c);
    };
    if (o->custom) {
      cases.push_back(base);
    } else if (o->quick) {
      with(4, 4096, 16, 0, HsaStrategy::Group);
      with(4, 4096, 16, 256, HsaStrategy::Group);
    } else {
      with(64, 32768, 64, 0, HsaStrategy::Group);
      with(64, 32768, 64, 512, HsaStrategy::Group);
      with(64, 32768, 64, 0, HsaStrategy::Head);
    }
    note_variant_mode(h);
    h.get_limits();
    if (!o->dsa_only)
      for (auto& c : cases) run_case(h, c);
    if (o->custom && !o->dsa_only) return;
    // DSA: the case (B=64, topk 2048) at H=16 and H=128; --quick: small.
    std::vector<DsaCase> dsa;
    if (o->quick) {
      dsa.push_back({4, 4096, 16, 256, 64});
    } else {
      dsa.push_back({64, 32768, 16, 2048, 64});
      dsa.push_back({64, 32768, 128, 2048, 64});
    }
    for (auto& c : dsa) run_dsa_case(h, c, mla_params, index_params);
  });
}

}  // namespace clattn::bench
