// Paged decode against ref::attention (double precision, plain loops over each request's
// logical sequence) over randomised batches: every KV dtype, q/o dtype, head dim, page
// size, layout, GQA group (1..32), soft cap, window, sinks, LSE, CSR / windowed CSR / page
// table, split-K on and off, deterministic mode; plus bitwise properties (deterministic
// mode is independent of batch mates, CSR == page table) and rejected calls that leave
// the outputs untouched.
//
// Tolerances: the kernel sees exactly the values the reference sees (q, K and V are
// quantised to their dtypes first, fp8 included, and the reference reads the dequantised
// values), so the only differences are f32 arithmetic (dot products, exp2, the scale
// folded into q) and the final rounding of o to its dtype: f32 5e-5, f16 2e-3, bf16 1e-2
// absolute+relative on outputs of magnitude <= ~1, and 2e-4 on lse. fp8 KV needs no
// looser bound for that reason; the quantisation error itself is the caller's choice.
//
// Every unused cache slot (tails of last pages, unused pages, stride padding, keys before
// a window's first page offset) holds NaN, so any read outside a request's keys shows.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

#include "support/test_support.hpp"

using namespace clattn;
using test::ctx;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

enum class Meta { Csr, WindowedCsr, PageTable };

struct Case {
  std::vector<int> lens;
  int Hkv = 2, G = 4, D = 128, P = 16;
  DType kv = DType::BF16, qd = DType::BF16, od = DType::BF16;
  KVLayout layout = KVLayout::NHD;
  bool lse = true, sinks = false;
  double cap = 0.0, sm_scale = 0.0;
  int window = -1;
  Meta meta = Meta::Csr;
  int shared_prefix_pages = 0;
  double k_scale = 1.0, v_scale = 1.0;
  int64_t head_pad = 0;  // > 0: custom strides with padding after each head row
  DecodeOptions opt;     // split / deterministic / params; shapes and features filled in
  std::string describe() const {
    std::string s = "B=" + std::to_string(lens.size()) + " lens={";
    for (size_t i = 0; i < lens.size(); ++i) s += (i ? "," : "") + std::to_string(lens[i]);
    s += "} Hkv=" + std::to_string(Hkv) + " G=" + std::to_string(G) + " D=" + std::to_string(D) +
         " P=" + std::to_string(P) + " kv=" + dtype_name(kv) + " q=" + dtype_name(qd) + " o=" + dtype_name(od) +
         (layout == KVLayout::NHD ? " NHD" : " HND") + " lse=" + std::to_string(lse) +
         " sinks=" + std::to_string(sinks) + " cap=" + std::to_string(cap) + " window=" + std::to_string(window) +
         " meta=" + std::to_string(int(meta)) + " prefix=" + std::to_string(shared_prefix_pages) +
         " pad=" + std::to_string(head_pad) + " det=" + std::to_string(opt.deterministic) +
         " max_splits=" + std::to_string(opt.max_splits);
    for (auto& [k, v] : opt.params) s += " " + k + "=" + std::to_string(v);
    return s;
  }
};

// Host side of one batch: the cache (values and bytes), metadata and the reference result.
struct Batch {
  Case c;
  PagedKV cache;
  std::vector<std::vector<int32_t>> pages;
  std::vector<double> kval, vval;  // per physical element, dequantised; NaN where unused
  std::vector<double> q, sinks;
  PagedCsr csr;
  PageTable table;
  std::vector<double> o_ref, lse_ref;

  int B() const { return int(c.lens.size()); }
  int Hq() const { return c.Hkv * c.G; }
};

double o_tol(DType t) { return t == DType::F32 ? 5e-5 : t == DType::F16 ? 2e-3 : 1e-2; }

Batch build(const Case& c, uint64_t salt) {
  test::Rng rng(salt);
  Batch b;
  b.c = c;
  const int B = b.B(), P = c.P, D = c.D, Hq = b.Hq();
  PagedKV& k = b.cache;
  k = test::cache_geometry(P, c.Hkv, D, c.layout, c.kv, c.head_pad);
  // Pages: a shared prefix (full pages) for requests long enough, then private pages.
  int shared = c.shared_prefix_pages;
  int total = shared;
  std::vector<int> npages(static_cast<size_t>(B));
  for (int i = 0; i < B; ++i) {
    npages[size_t(i)] = (c.lens[size_t(i)] + P - 1) / P;
    bool uses_prefix = shared > 0 && c.lens[size_t(i)] > shared * P;
    total += npages[size_t(i)] - (uses_prefix ? shared : 0);
  }
  k.num_pages = total + 3;  // a few pages nobody uses
  std::vector<int32_t> ids(size_t(k.num_pages));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng.gen);
  size_t next = 0;
  std::vector<int32_t> prefix(ids.begin(), ids.begin() + shared);
  next = size_t(shared);
  b.pages.resize(size_t(B));
  for (int i = 0; i < B; ++i) {
    bool uses_prefix = shared > 0 && c.lens[size_t(i)] > shared * P;
    for (int p = 0; p < npages[size_t(i)]; ++p)
      b.pages[size_t(i)].push_back(uses_prefix && p < shared ? prefix[size_t(p)] : ids[next++]);
  }
  // Cache values: NaN everywhere, random values in every slot some request owns.
  const size_t elems = size_t(k.required_bytes()) / dtype_size(k.dtype);
  b.kval.assign(elems, kNaN);
  b.vval.assign(elems, kNaN);
  auto off = [&](int32_t page, int t, int h, int d) {
    return size_t(page * k.page_stride() + t * k.token_stride() + h * k.head_stride() + d);
  };
  for (int i = 0; i < B; ++i)
    for (int t = 0; t < c.lens[size_t(i)]; ++t) {
      int32_t page = b.pages[size_t(i)][size_t(t / P)];
      for (int h = 0; h < c.Hkv; ++h)
        for (int d = 0; d < D; ++d) {
          size_t o = off(page, t % P, h, d);
          if (std::isnan(b.kval[o])) {  // shared pages: first writer wins, all see the same value
            b.kval[o] = test::quantize({rng.uniform(-1, 1)}, c.kv, c.k_scale)[0];
            b.vval[o] = test::quantize({rng.uniform(-1, 1)}, c.kv, c.v_scale)[0];
          }
        }
    }
  b.q = test::quantize(rng.vec(size_t(B) * Hq * D, -2, 2), c.qd);
  if (c.sinks) {
    b.sinks = rng.vec(size_t(Hq), -2, 4);
    for (auto& s : b.sinks) s = double(float(s));
  }

  // Metadata.
  b.csr.page_size = P;
  b.csr.kv_indptr = {0};
  for (int i = 0; i < B; ++i) {
    int L = c.lens[size_t(i)];
    int first_page = 0, start = 0;
    if (c.meta == Meta::WindowedCsr && c.window >= 0 && L > 0) {
      int first = std::max(0, L - 1 - c.window);
      first_page = first / P, start = first % P;
    }
    for (size_t p = size_t(first_page); p < b.pages[size_t(i)].size(); ++p)
      b.csr.kv_indices.push_back(b.pages[size_t(i)][p]);
    b.csr.kv_indptr.push_back(int32_t(b.csr.kv_indices.size()));
    b.csr.kv_last_page_len.push_back(L == 0 ? 0 : L - (npages[size_t(i)] - 1) * P);
    if (c.meta == Meta::WindowedCsr) b.csr.kv_start_offset.push_back(start);
  }
  b.table = test::page_table(b.pages, P, std::vector<int32_t>(c.lens.begin(), c.lens.end()));

  // Reference, request by request over the logical sequence.
  b.o_ref.assign(size_t(B) * Hq * D, 0.0);
  b.lse_ref.assign(size_t(B) * Hq, 0.0);
  ref::AttnOptions ro;
  ro.sm_scale = c.sm_scale != 0.0 ? double(float(c.sm_scale)) : 1.0 / std::sqrt(double(D));
  ro.logits_soft_cap = c.cap;
  ro.window_left = c.window;
  ro.sinks = c.sinks ? b.sinks.data() : nullptr;
  for (int i = 0; i < B; ++i) {
    int L = c.lens[size_t(i)];
    std::vector<double> kk(size_t(L) * c.Hkv * D), vv(kk.size());
    for (int t = 0; t < L; ++t)
      for (int h = 0; h < c.Hkv; ++h)
        for (int d = 0; d < D; ++d) {
          size_t o = off(b.pages[size_t(i)][size_t(t / P)], t % P, h, d);
          kk[(size_t(t) * c.Hkv + h) * D + d] = b.kval[o];
          vv[(size_t(t) * c.Hkv + h) * D + d] = b.vval[o];
        }
    ref::attention(&b.q[size_t(i) * Hq * D], kk.data(), vv.data(), 1, L, Hq, c.Hkv, D, D, ro,
                   &b.o_ref[size_t(i) * Hq * D], &b.lse_ref[size_t(i) * Hq]);
  }
  return b;
}

DecodeOptions options_of(const Batch& b) {
  DecodeOptions o = b.c.opt;
  o.num_qo_heads = b.Hq();
  o.q_dtype = b.c.qd, o.o_dtype = b.c.od;
  o.sm_scale = float(b.c.sm_scale);
  o.logits_soft_cap = float(b.c.cap);
  o.window_left = b.c.window;
  return o;
}

// Device copies of a batch and the results of one run.
struct DevRun {
  DeviceBuffer kc, vc, ids, q, o, lse, ws, sinks;
  DecodePlan plan;
  std::vector<uint8_t> o_bytes;
  std::vector<float> lse_out;
  std::vector<double> o_vals() const { return test::unpack(o_bytes, plan.o_dtype); }
};

DecodePlan make_plan(const Batch& b, const DecodeOptions& opt) {
  return b.c.meta == Meta::PageTable ? decode_plan(ctx(), b.table, b.cache, opt)
                                     : decode_plan(ctx(), b.csr, b.cache, opt);
}

void upload_inputs(const Batch& b, DevRun& r) {
  r.kc = test::upload(test::pack(b.kval, b.c.kv, b.c.k_scale));
  r.vc = test::upload(test::pack(b.vval, b.c.kv, b.c.v_scale));
  const auto& ids = b.c.meta == Meta::PageTable ? b.table.page_table : b.csr.kv_indices;
  r.ids = ids.empty() ? DeviceBuffer(ctx(), 4) : test::upload(ids);
  r.q = test::upload(test::pack(b.q, b.c.qd));
  if (b.c.sinks) {
    std::vector<float> s(b.sinks.begin(), b.sinks.end());
    r.sinks = test::upload(s);
  }
}

DecodeBuffers buffers_of(const Batch& b, DevRun& r) {
  DecodeBuffers db;
  db.q = r.q.get(), db.k_cache = r.kc.get(), db.v_cache = r.vc.get(), db.page_ids = r.ids.get();
  db.o = r.o.get(), db.lse = b.c.lse ? r.lse.get() : nullptr;
  db.workspace = r.plan.workspace_bytes ? r.ws.get() : nullptr;
  db.sinks = b.c.sinks ? r.sinks.get() : nullptr;
  db.k_scale = float(b.c.k_scale), db.v_scale = float(b.c.v_scale);
  return db;
}

DevRun run(const Batch& b, const DecodeOptions& opt) {
  DevRun r;
  upload_inputs(b, r);
  const size_t rows = size_t(b.B()) * b.Hq();
  r.o = DeviceBuffer(ctx(), std::max<size_t>(1, rows * b.c.D * dtype_size(b.c.od)));
  r.lse = DeviceBuffer(ctx(), std::max<size_t>(4, rows * 4));
  r.o.fill_bytes(ctx(), 0x7b);
  r.lse.fill_bytes(ctx(), 0x7b);
  r.plan = make_plan(b, opt);
  if (r.plan.workspace_bytes) r.ws = DeviceBuffer(ctx(), size_t(r.plan.workspace_bytes));
  decode_run(ctx(), r.plan, buffers_of(b, r));
  ctx().finish();
  r.o_bytes = test::download<uint8_t>(r.o, rows * b.c.D * dtype_size(b.c.od));
  r.lse_out = test::download<float>(r.lse, rows);
  return r;
}

::testing::AssertionResult check(const Batch& b, const DevRun& r) {
  auto o = r.o_vals();
  double t = o_tol(b.c.od);
  auto res = test::all_close(o, b.o_ref, t, t, "o");
  if (!res) return res;
  if (b.c.lse) {
    std::vector<double> l(r.lse_out.begin(), r.lse_out.end());
    res = test::all_close(l, b.lse_ref, 2e-4, 2e-5, "lse");
  }
  return res;
}

#define EXPECT_DECODE_OK(b, r)                                                                           \
  EXPECT_TRUE(check(b, r)) << (b).c.describe() << "\n  plan: variant=" << (r).plan.variant                  \
                           << " work=" << (r).plan.num_work << " partials=" << (r).plan.num_partials \
                           << " chunk=" << (r).plan.chunk_tokens << " opts=" << (r).plan.kernel_options

// Split-K forced on small inputs: chunks of >= 16 tokens, as many as the planner likes.
std::map<std::string, int> force_split() { return {{"MIN_CHUNK", 16}, {"WGS_PER_CU", 4096}}; }

}  // namespace

TEST(PagedDecode, EmptyOneTokenAndPageBoundaryLengths) {
  CLATTN_SEED_TRACE();
  for (Meta m : {Meta::Csr, Meta::PageTable}) {
    Case c;
    c.P = 8;
    c.lens = {0, 1, 7, 8, 9, 16, 23, 100};
    c.meta = m;
    c.shared_prefix_pages = 1;
    Batch b = build(c, 100 + int(m));
    DevRun r = run(b, options_of(b));
    EXPECT_DECODE_OK(b, r);
    auto o = r.o_vals();
    for (int h = 0; h < b.Hq(); ++h) {
      EXPECT_EQ(r.lse_out[size_t(h)], -std::numeric_limits<float>::infinity()) << "empty request lse";
      for (int d = 0; d < c.D; ++d) EXPECT_EQ(o[size_t(h) * c.D + d], 0.0) << "empty request o";
    }
  }
  // With sinks an empty request has lse = sink and o = 0; split-K on the rest.
  Case c;
  c.P = 16;
  c.lens = {0, 1, 15, 16, 17, 300};
  c.sinks = true;
  c.opt.params = force_split();
  Batch b = build(c, 103);
  DevRun r = run(b, options_of(b));
  EXPECT_DECODE_OK(b, r);
  EXPECT_GT(r.plan.num_partials, 0);
  for (int h = 0; h < b.Hq(); ++h) EXPECT_FLOAT_EQ(r.lse_out[size_t(h)], float(b.sinks[size_t(h)]));
}

TEST(PagedDecode, RandomBatches) {
  CLATTN_SEED_TRACE();
  // Kernel builds are the expensive part on PoCL, so the random cases draw from a fixed set
  // of (head dim, KV dtype, group, KV heads): each is one program per vendor.
  struct Prog {
    int D;
    DType kv;
    int G, Hkv;
  };
  const Prog progs[] = {{128, DType::BF16, 4, 2},     {64, DType::F16, 1, 3},       {80, DType::F32, 2, 2},
                        {96, DType::FP8_E4M3, 8, 1},  {192, DType::FP8_E5M2, 3, 2}, {256, DType::BF16, 16, 1},
                        {128, DType::FP8_E4M3, 4, 2}, {64, DType::BF16, 32, 1},     {128, DType::F32, 5, 1}};
  const int pages[] = {1, 8, 16, 32, 64, 128};
  const DType io[] = {DType::F32, DType::F16, DType::BF16};
  test::Rng rng(200);
  const int kCases = 27;
  for (int i = 0; i < kCases; ++i) {
    Case c;
    const Prog& p = progs[size_t(i) % (sizeof progs / sizeof progs[0])];
    c.D = p.D, c.kv = p.kv, c.G = p.G, c.Hkv = p.Hkv;
    c.P = pages[rng.uniform_int(0, 5)];
    c.qd = io[rng.uniform_int(0, 2)];
    c.od = io[rng.uniform_int(0, 2)];
    c.layout = rng.uniform_int(0, 1) ? KVLayout::NHD : KVLayout::HND;
    int B = rng.uniform_int(1, 5);
    for (int j = 0; j < B; ++j) {
      int kind = rng.uniform_int(0, 9);
      int L = kind == 0 ? rng.uniform_int(0, 1)
              : kind == 1 ? c.P * rng.uniform_int(1, 4) + rng.uniform_int(-1, 1)
              : kind == 2 ? rng.uniform_int(800, 2000)
                          : rng.uniform_int(2, 400);
      c.lens.push_back(std::max(0, L));
    }
    c.lse = rng.uniform_int(0, 3) != 0;
    c.sinks = rng.uniform_int(0, 3) == 0;
    c.cap = rng.uniform_int(0, 3) == 0 ? rng.uniform(5.0, 30.0) : 0.0;
    c.sm_scale = rng.uniform_int(0, 1) ? 0.0 : rng.uniform(0.3, 1.0);
    if (rng.uniform_int(0, 2) == 0) c.window = rng.uniform_int(0, 300);
    int meta = rng.uniform_int(0, 2);
    c.meta = meta == 0 ? Meta::Csr : meta == 1 ? Meta::PageTable : (c.window >= 0 ? Meta::WindowedCsr : Meta::Csr);
    if (c.P > 1 && rng.uniform_int(0, 2) == 0) c.shared_prefix_pages = rng.uniform_int(1, 3);
    if (c.kv == DType::FP8_E4M3 || c.kv == DType::FP8_E5M2) {
      c.k_scale = rng.uniform(0.05, 0.6);
      c.v_scale = rng.uniform(0.05, 0.6);
    }
    if (rng.uniform_int(0, 4) == 0) c.head_pad = 16;
    int split = rng.uniform_int(0, 3);
    if (split == 0) c.opt.max_splits = 1;
    if (split == 1) c.opt.params = force_split();
    if (split == 2) {
      c.opt.deterministic = true;
      c.opt.split_tokens = 16 * rng.uniform_int(1, 12);
    }
    if (!test::row_runs_case(i)) continue;
    Batch b = build(c, 1000 + uint64_t(i));
    DevRun r = run(b, options_of(b));
    EXPECT_DECODE_OK(b, r) << " (case " << i << ")";
  }
}

TEST(PagedDecode, ButterflyAndHeadBlocksInEveryRun) {
  // Force lanes-per-token > 1 (the butterfly, via local memory off NVIDIA) and small query
  // head blocks, whatever the vendor's parameters would pick.
  CLATTN_SEED_TRACE();
  Case c;
  c.D = 128, c.G = 4, c.Hkv = 2, c.P = 16;
  c.lens = {1, 33, 250, 777};
  c.opt.params = {{"TPT", 4}, {"GMAX", 2}, {"UNROLL", 2}, {"CPU_KERNEL", 0}};
  Batch b = build(c, 300);
  DevRun r = run(b, options_of(b));
  EXPECT_DECODE_OK(b, r);
  EXPECT_EQ(r.plan.tile.tpt, 4);
  EXPECT_EQ(r.plan.tile.head_blocks, 2);
  c.opt.params = {{"TPT", 16}, {"LOAD_BYTES", 8}, {"CPU_KERNEL", 0}};
  for (auto& kv : force_split()) c.opt.params.insert(kv);
  b = build(c, 301);
  r = run(b, options_of(b));
  EXPECT_DECODE_OK(b, r);
}

TEST(PagedDecode, Fp8FastAndExactDecodeAgree) {
  // FP8_FAST reads fp8 rows through f32 denormals (bit moves, powers of two folded into q
  // and the softmax weights); FP8_FAST=0 is the exact select-based decode. Small scales put
  // many stored values among the fp8 subnormals.
  // A device that flushes f32 denormals (CL_FP_DENORM absent: rusticl's llvmpipe) never takes
  // the fast form: asked for, it builds the exact one.
  CLATTN_SEED_TRACE();
  cl_device_fp_config fp = 0;
  clGetDeviceInfo(ctx().cl_device(), CL_DEVICE_SINGLE_FP_CONFIG, sizeof fp, &fp, nullptr);
  const bool denorms = (fp & CL_FP_DENORM) != 0;
  for (DType kv : {DType::FP8_E4M3, DType::FP8_E5M2}) {
    Case c;
    c.D = 64, c.G = 2, c.Hkv = 2, c.P = 32, c.kv = kv, c.od = DType::F32;
    c.lens = {5, 130, 401};
    c.k_scale = kv == DType::FP8_E4M3 ? 4.0 : 0.001;
    c.v_scale = kv == DType::FP8_E4M3 ? 8.0 : 0.0005;
    c.sinks = true;
    Batch b = build(c, 350 + int(kv));
    std::vector<uint8_t> prev;
    for (int fast : {0, 1}) {
      DecodeOptions o = options_of(b);
      o.params = {{"FP8_FAST", fast}};
      DevRun r = run(b, o);
      EXPECT_DECODE_OK(b, r);
      EXPECT_NE(r.plan.kernel_options.find("-DFP8_FAST=" + std::to_string(fast && denorms)), std::string::npos);
      if (!prev.empty()) EXPECT_TRUE(test::all_close(r.o_vals(), test::unpack(prev, DType::F32), 1e-6, 1e-5, "fast"));
      prev = r.o_bytes;
    }
  }
}

TEST(PagedDecode, SplitAndNoSplitAgree) {
  CLATTN_SEED_TRACE();
  Case c;
  c.lens = {1500, 3, 640};
  c.sinks = true;
  c.od = DType::F32;
  c.opt.max_splits = 1;
  Batch b = build(c, 400);
  DevRun whole = run(b, options_of(b));
  // (A device that bounds a work-item's loops splits long requests whatever max_splits says.)
  if (ctx().profile().loop_trip_limit == 0) EXPECT_EQ(whole.plan.num_partials, 0);
  EXPECT_DECODE_OK(b, whole);
  DecodeOptions o = options_of(b);
  o.max_splits = 0;
  o.params = force_split();
  DevRun split = run(b, o);
  EXPECT_GT(split.plan.num_merges, 0);
  EXPECT_GT(split.plan.workspace_bytes, 0);
  EXPECT_DECODE_OK(b, split);
  EXPECT_TRUE(test::all_close(split.o_vals(), whole.o_vals(), 2e-5, 2e-5, "split vs whole"));
  // The fused merge's load batching (MERGE_BATCH) changes no bit: parts add in index order.
  o.params["MERGE_BATCH"] = 3;
  DevRun batched = run(b, o);
  EXPECT_EQ(batched.plan.num_partials, split.plan.num_partials);
  EXPECT_EQ(batched.o_vals(), split.o_vals());
  EXPECT_EQ(batched.lse_out, split.lse_out);
}

TEST(PagedDecode, DeterministicModeIsBitwiseIndependentOfBatchMates) {
  CLATTN_SEED_TRACE();
  // The same request (same q row, same keys) in two batches with different mates, at a
  // different position: its o and lse bits must match.
  Case base;
  base.P = 16;
  base.sinks = true;
  base.od = DType::F32;
  base.opt.deterministic = true;
  base.opt.split_tokens = 96;
  Case a = base, bcase = base;
  a.lens = {700, 50};
  bcase.lens = {3000, 1, 700, 12, 5};
  Batch ba = build(a, 500);
  Batch bb = build(bcase, 501);
  // Copy request 0 of batch a into request 2 of batch b: q row and its key/value rows.
  const int Hq = ba.Hq(), D = ba.c.D;
  std::copy(ba.q.begin(), ba.q.begin() + Hq * D, bb.q.begin() + 2 * Hq * D);
  bb.sinks = ba.sinks;
  auto copy_rows = [&](const std::vector<double>& src, std::vector<double>& dst) {
    for (int t = 0; t < 700; ++t)
      for (int h = 0; h < ba.c.Hkv; ++h)
        for (int d = 0; d < D; ++d) {
          auto off = [&](const Batch& x, int req) {
            int32_t page = x.pages[size_t(req)][size_t(t / x.c.P)];
            return size_t(page * x.cache.page_stride() + (t % x.c.P) * x.cache.token_stride() +
                          h * x.cache.head_stride() + d);
          };
          dst[off(bb, 2)] = src[off(ba, 0)];
        }
  };
  copy_rows(ba.kval, bb.kval);
  copy_rows(ba.vval, bb.vval);
  // Different device fill from the planner: also vary the non-deterministic knobs.
  DecodeOptions oa = options_of(ba), ob = options_of(bb);
  ob.params = force_split();
  DevRun ra = run(ba, oa), rb = run(bb, ob);
  EXPECT_GT(ra.plan.num_partials, 0);
  const size_t row = size_t(Hq) * D * 4;
  EXPECT_EQ(0, std::memcmp(ra.o_bytes.data(), rb.o_bytes.data() + 2 * row, row)) << "o bits differ";
  EXPECT_EQ(0, std::memcmp(ra.lse_out.data(), rb.lse_out.data() + 2 * Hq, size_t(Hq) * 4)) << "lse bits differ";
  EXPECT_DECODE_OK(ba, ra);
}

TEST(PagedDecode, CsrPageTableAndWindowedCsrAgree) {
  CLATTN_SEED_TRACE();
  Case c;
  c.P = 8;
  c.lens = {1, 9, 64, 300, 301};
  c.window = 40;
  c.cap = 20.0;
  c.od = DType::F32;
  c.opt.max_splits = 1;
  Batch b = build(c, 600);
  DevRun csr = run(b, options_of(b));
  EXPECT_DECODE_OK(b, csr);
  b.c.meta = Meta::PageTable;
  DevRun pt = run(b, options_of(b));
  EXPECT_EQ(csr.o_bytes, pt.o_bytes) << "CSR and page table differ";
  Case w = c;
  w.meta = Meta::WindowedCsr;  // pages before the window dropped, kv_start_offset set
  Batch bw = build(w, 600);
  DevRun rw = run(bw, options_of(bw));
  EXPECT_DECODE_OK(bw, rw);
}

TEST(PagedDecode, PlanRoundTripsThroughItsVector) {
  CLATTN_SEED_TRACE();
  Case c;
  c.lens = {400, 17, 0};
  c.sinks = true;
  c.opt.params = force_split();
  Batch b = build(c, 700);
  DevRun r = run(b, options_of(b));
  std::vector<int64_t> v = r.plan.to_vector();
  DecodePlan p2 = DecodePlan::from_vector(ctx(), v);
  EXPECT_EQ(p2.to_vector(), v);
  EXPECT_EQ(p2.workspace_bytes, r.plan.workspace_bytes);
  EXPECT_EQ(p2.variant, r.plan.variant);
  r.o.fill_bytes(ctx(), 0);
  r.plan = p2;
  decode_run(ctx(), p2, buffers_of(b, r));
  ctx().finish();
  EXPECT_EQ(test::download<uint8_t>(r.o, r.o_bytes.size()), r.o_bytes);
  v[0] = 1;
  EXPECT_TRUE(test::throws_error([&] { DecodePlan::from_vector(ctx(), v); }, Status::InvalidArgument, "magic"));
}

TEST(PagedDecode, CallerQueueEventsAndNoBlocking) {
  CLATTN_SEED_TRACE();
  Case c;
  c.lens = {200, 90};
  c.opt.params = force_split();
  Batch b = build(c, 800);
  DevRun r;
  upload_inputs(b, r);
  const size_t rows = size_t(b.B()) * b.Hq();
  r.o = DeviceBuffer(ctx(), rows * c.D * 2);
  r.lse = DeviceBuffer(ctx(), rows * 4);
  cl_int err = CL_SUCCESS;
  cl_command_queue q2 = clCreateCommandQueueWithProperties(ctx().cl_ctx(), ctx().cl_device(), nullptr, &err);
  ASSERT_EQ(err, CL_SUCCESS);
  r.plan = decode_plan(ctx(), b.csr, b.cache, options_of(b), q2);
  if (r.plan.workspace_bytes) r.ws = DeviceBuffer(ctx(), size_t(r.plan.workspace_bytes));
  cl_event gate = clCreateUserEvent(ctx().cl_ctx(), &err), done = nullptr;
  ASSERT_EQ(err, CL_SUCCESS);
  Enqueue e;
  e.queue = q2, e.num_wait = 1, e.wait = &gate, e.event = &done;
  decode_run(ctx(), r.plan, buffers_of(b, r), e);  // must return while the gate is closed
  ASSERT_NE(done, nullptr);
  cl_int status = 0;
  clGetEventInfo(done, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof status, &status, nullptr);
  EXPECT_NE(status, CL_COMPLETE);
  clSetUserEventStatus(gate, CL_COMPLETE);
  ASSERT_EQ(clWaitForEvents(1, &done), CL_SUCCESS);
  clReleaseEvent(done);
  clReleaseEvent(gate);
  clReleaseCommandQueue(q2);
  r.o_bytes = test::download<uint8_t>(r.o, rows * c.D * 2);
  r.lse_out = test::download<float>(r.lse, rows);
  EXPECT_DECODE_OK(b, r);
}

TEST(PagedDecode, RejectsBadInputsWithoutWriting) {
  Case c;
  c.lens = {300, 20};
  c.opt.params = force_split();
  Batch b = build(c, 900);
  DevRun r;
  upload_inputs(b, r);
  const size_t rows = size_t(b.B()) * b.Hq(), obytes = rows * c.D * 2;
  r.o = DeviceBuffer(ctx(), obytes);
  r.lse = DeviceBuffer(ctx(), rows * 4);
  r.o.fill_bytes(ctx(), 0x7b);
  r.lse.fill_bytes(ctx(), 0x7b);
  DecodeOptions opt = options_of(b);
  auto plan_err = [&](auto mutate, Status st, const std::string& needle) {
    Batch bb = b;
    DecodeOptions o = opt;
    mutate(bb, o);
    return test::throws_error([&] { decode_plan(ctx(), bb.csr, bb.cache, o); }, st, needle);
  };
  EXPECT_TRUE(plan_err([](Batch&, DecodeOptions& o) { o.num_qo_heads = 7; }, Status::InvalidArgument, "num_kv_heads"));
  EXPECT_TRUE(plan_err([](Batch& x, DecodeOptions&) { x.cache.head_dim = 100; }, Status::Unsupported, "head_dim"));
  EXPECT_TRUE(plan_err([](Batch& x, DecodeOptions&) { x.cache.page_size = 12, x.csr.page_size = 12; },
                       Status::Unsupported, "page_size"));
  EXPECT_TRUE(plan_err([](Batch& x, DecodeOptions&) { x.cache.page_size = 8; }, Status::InvalidArgument, "page_size"));
  EXPECT_TRUE(plan_err([](Batch& x, DecodeOptions&) { x.cache.dtype = DType::I32; }, Status::Unsupported, "dtype"));
  EXPECT_TRUE(plan_err([](Batch&, DecodeOptions& o) { o.q_dtype = DType::FP8_E4M3; }, Status::Unsupported, "q_dtype"));
  EXPECT_TRUE(plan_err([](Batch&, DecodeOptions& o) { o.window_left = -5; }, Status::InvalidArgument, "window_left"));
  EXPECT_TRUE(plan_err([](Batch& x, DecodeOptions&) { x.csr.kv_indices[3] = x.cache.num_pages; },
                       Status::InvalidArgument, "kv_indices"));
  EXPECT_TRUE(plan_err([](Batch& x, DecodeOptions&) { x.csr.kv_last_page_len[1] = 0; }, Status::InvalidArgument,
                       "kv_last_page_len[1]"));
  EXPECT_TRUE(plan_err([](Batch& x, DecodeOptions&) { x.csr.kv_indptr.pop_back(); }, Status::InvalidArgument,
                       "kv_indptr"));
  {
    PageTable t = b.table;
    t.seq_lens[1] = t.max_pages * t.page_size + 1;  // needs more pages than a row holds
    EXPECT_TRUE(test::throws_error([&] { decode_plan(ctx(), t, b.cache, opt); }, Status::InvalidArgument, "1"));
  }
  // DevRun-time checks against a good plan.
  r.plan = decode_plan(ctx(), b.csr, b.cache, opt);
  ASSERT_GT(r.plan.workspace_bytes, 0);
  r.ws = DeviceBuffer(ctx(), size_t(r.plan.workspace_bytes));
  DeviceBuffer tiny(ctx(), 16);
  auto run_err = [&](auto mutate, const std::string& needle) {
    DecodeBuffers db = buffers_of(b, r);
    mutate(db);
    return test::throws_error([&] { decode_run(ctx(), r.plan, db); }, Status::InvalidArgument, needle);
  };
  EXPECT_TRUE(run_err([&](DecodeBuffers& d) { d.o = tiny.get(); }, "o:"));
  EXPECT_TRUE(run_err([&](DecodeBuffers& d) { d.q = tiny.get(); }, "q:"));
  EXPECT_TRUE(run_err([&](DecodeBuffers& d) { d.lse = tiny.get(); }, "lse"));
  EXPECT_TRUE(run_err([&](DecodeBuffers& d) { d.workspace = tiny.get(); }, "workspace"));
  EXPECT_TRUE(run_err([&](DecodeBuffers& d) { d.workspace = nullptr; }, "workspace"));
  EXPECT_TRUE(run_err([&](DecodeBuffers& d) { d.k_cache = tiny.get(); }, "k_cache"));
  EXPECT_TRUE(run_err([&](DecodeBuffers& d) { d.page_ids = tiny.get(); }, "page_ids"));
  EXPECT_TRUE(run_err([&](DecodeBuffers& d) { d.sinks = tiny.get(); }, "sinks"));
  EXPECT_TRUE(run_err([&](DecodeBuffers& d) { d.k_scale = 0.0f; }, "k_scale"));
  EXPECT_TRUE(test::throws_error([&] { decode_run(ctx(), DecodePlan{}, buffers_of(b, r)); }, Status::InvalidArgument,
                                 "empty plan"));
  ctx().finish();
  for (auto x : test::download<uint8_t>(r.o, obytes)) ASSERT_EQ(x, 0x7b);
  for (auto x : test::download<uint8_t>(r.lse, rows * 4)) ASSERT_EQ(x, 0x7b);
}

// A decode CSR may carry qo_indptr (one row per request, FlashInfer's form): an empty
// request's row is still one row, not an extend row past its keys.
TEST(PagedDecode, QoIndptrWithAnEmptyRequest) {
  Case c;
  c.lens = {5, 0, 17};
  Batch b = build(c, 1001);
  b.csr.qo_indptr = {0, 1, 2, 3};
  EXPECT_NO_THROW(decode_plan(ctx(), b.csr, b.cache, options_of(b)));
  b.csr.qo_indptr = {0, 1, 3, 4};
  try {
    decode_plan(ctx(), b.csr, b.cache, options_of(b));
    ADD_FAILURE() << "two query rows for one decode request accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("qo_indptr"), std::string::npos) << e.what();
  }
}

TEST(PagedDecode, EmptyBatch) {
  Case c;
  c.lens = {};
  Batch b = build(c, 1000);
  DecodePlan p = decode_plan(ctx(), b.csr, b.cache, options_of(b));
  EXPECT_EQ(p.num_work, 0);
  DecodeBuffers db;
  cl_event ev = nullptr;
  Enqueue e;
  e.event = &ev;
  decode_run(ctx(), p, db, e);
  ASSERT_NE(ev, nullptr);
  EXPECT_EQ(clWaitForEvents(1, &ev), CL_SUCCESS);
  clReleaseEvent(ev);
}

// Where the device runs the NVIDIA shfl variant and the parameters ask for it, plans use it:
// a broken PTX build must fail here, not hide behind the generic kernel.
TEST(PagedDecode, UsesTheShflVariantWhereTheDeviceHasIt) {
  Case c;
  c.lens = {40, 7};
  Batch b = build(c, 1100);
  DecodeOptions o = options_of(b);
  o.params = {{"PTX_SHFL", 1}, {"TPT", 8}, {"CPU_KERNEL", 0}};
  const DecodePlan p = decode_plan(ctx(), b.csr, b.cache, o);
  bool available = false;
  for (const auto& v : variants(ctx().profile()))
    if (v.name == "nv_ptx_shfl") available = v.available;
  EXPECT_EQ(p.variant, available ? "nv_ptx_shfl" : "generic");
}

// The CPU variant (decode_cpu.cl) runs wherever the parameters ask for it (the cpu rows do
// on CPU devices): every KV dtype, each vector width, GQA groups split into head blocks,
// split-K with the merge pass, soft cap, sinks, windows and the HND layout.
TEST(PagedDecode, CpuVariantMatchesTheReference) {
  CLATTN_SEED_TRACE();
  test::Rng rng(2026112601);
  const DType kvs[] = {DType::F32, DType::F16, DType::BF16, DType::FP8_E4M3, DType::FP8_E5M2};
  const int vws[] = {4, 8, 16};
  int i = 0;
  for (DType kv : kvs)
    for (int vw : vws) {
      Case c;
      c.kv = kv;
      c.D = (i % 3 == 0) ? 64 : (i % 3 == 1 ? 128 : 96);
      c.G = rng.uniform_int(1, 6), c.Hkv = rng.uniform_int(1, 2);
      c.P = 1 << rng.uniform_int(0, 5);
      const int B = rng.uniform_int(1, 4);
      for (int r = 0; r < B; ++r) c.lens.push_back(rng.uniform_int(0, 300));
      c.layout = rng.uniform_int(0, 1) ? KVLayout::NHD : KVLayout::HND;
      c.sinks = rng.uniform_int(0, 3) == 0;
      if (rng.uniform_int(0, 3) == 0) c.cap = 30.0;
      if (rng.uniform_int(0, 3) == 0) c.window = rng.uniform_int(0, 100);
      if (kv == DType::FP8_E4M3 || kv == DType::FP8_E5M2) c.k_scale = 0.3, c.v_scale = 0.2;
      c.opt.params = {{"CPU_KERNEL", 1}, {"VW", vw}};
      if (c.G > 2 && rng.uniform_int(0, 1)) c.opt.params["GMAX_CAP"] = 2;
      if (i % 2) for (auto& kvp : force_split()) c.opt.params.insert(kvp);
      if (!test::row_runs_case(i)) {
        ++i;
        continue;
      }
      Batch b = build(c, 2000 + uint64_t(i));
      DevRun r = run(b, options_of(b));
      EXPECT_DECODE_OK(b, r) << " (case " << i << ")";
      EXPECT_EQ(r.plan.variant, "cpu") << c.describe();
      EXPECT_EQ(r.plan.tile.unroll, c.D % vw == 0 ? vw : vw / 2) << c.describe();
      ++i;
    }
}

// The sub-group variants (intel_subgroups under the intel rows, khr_subgroups under the amd
// rows) where the device runs them, natively or through their emulation (CLATTN_EMULATE:
// the test_decode_subgroups.* ctests, where PoCL runs decode.cl's own sub-group text with
// subgroups_emul.clh): head dims 64/128/256 x GQA groups 1/4/8, page sizes 1 and 16, split and
// unsplit, lse, the intel runs over bf16 and f32 caches, the khr runs over f16 and fp8 (the
// KV load layer is the variants' shared code; each emulated build costs PoCL seconds), so the
// two together take every KV dtype x head dim pair once; the khr runs alternate the
// shuffle and the sub_group_barrier forms. The plan must name the variant: a broken build
// must fail here, not fall back to the generic kernel.
TEST(PagedDecodeSubgroups, MatchTheReference) {
  CLATTN_SEED_TRACE();
  const DeviceProfile& prof = ctx().profile();
  auto available = [&](const std::string& name) {
    for (const auto& v : variants(prof))
      if (v.name == name) return v.available;
    return false;
  };
  std::string want;
  if (prof.param_vendor() == "intel" && available("intel_subgroups")) want = "intel_subgroups";
  else if (prof.param_vendor() == "amd" && available("khr_subgroups")) want = "khr_subgroups";
  if (want.empty()) GTEST_SKIP() << "no sub-group variant under these rows (CLATTN_EMULATE, CLATTN_FORCE_VENDOR)";
  const bool emulated = !prof.emulated.empty();
  const DType kvs[] = {DType::BF16, DType::F16, DType::F32, DType::FP8_E4M3};
  const int dims[] = {64, 128, 256}, groups[] = {1, 4, 8};
  test::Rng rng(2026120101);
  for (int i = 0; i < 12; ++i) {
    if (i % 2 != (want == "intel_subgroups" ? 0 : 1)) continue;
    Case c;
    c.kv = kvs[i % 4], c.D = dims[(i / 4) % 3], c.G = groups[i % 3];
    c.Hkv = c.G == 8 ? 1 : 2;
    c.P = (i / 2 + i / 4) % 2 ? 16 : 1;
    c.qd = c.od = c.kv == DType::F32 ? DType::F32 : DType::BF16;
    c.lse = true;
    c.lens = {rng.uniform_int(1, 40), rng.uniform_int(100, 300)};
    if (c.kv == DType::FP8_E4M3) c.k_scale = 0.3, c.v_scale = 0.2;
    c.opt.params = {{"CPU_KERNEL", 0}};
    if ((i / 2) % 2) {
      for (auto& kv : force_split()) c.opt.params.insert(kv);
    } else {
      c.opt.max_splits = 1;
    }
    // Intel: D 256 tiles of 4+ heads take 32 lanes per token, so sub-groups of 32 there
    // (emulated or required); 16 elsewhere (the row).
    if (want == "intel_subgroups" && c.D == 256 && c.G >= 4) c.opt.params["SUBGROUP_SIZE"] = 32;
    if (want == "khr_subgroups" && emulated) c.opt.params["SUBGROUP_SHUFFLE"] = (i + i / 4) % 2;
    Batch b = build(c, 5000 + uint64_t(i));
    DevRun r = run(b, options_of(b));
    EXPECT_DECODE_OK(b, r) << " (case " << i << ")";
    EXPECT_EQ(r.plan.variant, want) << c.describe();
    EXPECT_GT(r.plan.tile.tpt, 1) << c.describe();
    if ((i / 2) % 2) EXPECT_GT(r.plan.num_partials, 0) << c.describe();
    else EXPECT_EQ(r.plan.num_partials, 0) << c.describe();
  }
  // A token's lanes wider than the sub-group: the plan keeps the generic butterfly.
  if (emulated) {
    Case c;
    c.lens = {50};
    c.opt.params = {{"CPU_KERNEL", 0}, {"TPT", 16}, {"SUBGROUP_SIZE", 8}};
    // khr: work-groups of 16 against emulated sub-groups of 32 (not all full).
    if (want == "khr_subgroups") c.opt.params = {{"CPU_KERNEL", 0}, {"TPT", 8}, {"WG", 16}};
    Batch b = build(c, 5100);
    DevRun r = run(b, options_of(b));
    EXPECT_DECODE_OK(b, r);
    EXPECT_EQ(r.plan.variant, "generic") << c.describe();
  }
}
