// Extend / prefill / cascade against ref::attention (double precision, plain loops over
// each request's logical sequence) over randomised ragged batches: cached prefixes at and
// around page boundaries, qo_len = 1 (decode semantics) and qo_len = kv_len, causal on and
// off, windows (plain CSR, windowed CSR, page table), tree masks from random trees and
// random packed masks, soft cap, sinks, LSE, GQA groups 1..16, head dims 64..256, every
// q/o and KV dtype (fp8 with scales), NHD/HND and padded strides, ragged K/V; the cascade
// helper against plain extend; rejected calls leave the output untouched.
//
// Tolerances and the harness: extend_cases.hpp.
#include "extend_cases.hpp"

TEST(Extend, PrefixAtPageBoundariesAndFullPrefill) {
  CLATTN_SEED_TRACE();
  for (Meta m : {Meta::Csr, Meta::PageTable}) {
    Case c;
    c.P = 8;
    c.qo = {5, 8, 3, 9, 17, 1, 12};
    c.prefix = {0, 7, 8, 9, 16, 23, 0};  // 0 = qo_len == kv_len
    c.meta = m;
    Batch b = build(c, 10 + int(m));
    DevRun r = run(b);
    EXPECT_EXTEND_OK(b, r);
  }
}

TEST(Extend, SingleQueryRowEqualsDecodeSemantics) {
  CLATTN_SEED_TRACE();
  Case c;
  c.qo = {1, 1, 1, 1};
  c.prefix = {0, 15, 16, 70};
  c.P = 16;
  c.G = 8, c.Hkv = 1;
  c.sinks = true;
  Batch b = build(c, 20);
  DevRun r = run(b);
  EXPECT_EXTEND_OK(b, r);
  // Non-causal with one row is the same thing.
  c.causal = false;
  Batch b2 = build(c, 20);
  DevRun r2 = run(b2);
  EXPECT_EXTEND_OK(b2, r2);
  EXPECT_EQ(r.o_bytes, r2.o_bytes);
}

TEST(Extend, TreeMasksAndRandomMasks) {
  CLATTN_SEED_TRACE();
  for (Mask mk : {Mask::Tree, Mask::Random}) {
    for (bool causal : {true, false}) {
      Case c;
      c.qo = {7, 1, 16, 5};
      c.prefix = {9, 0, 33, 3};
      c.mask = mk;
      c.causal = causal;
      c.P = 4;
      Batch b = build(c, 30 + 2 * int(mk) + causal);
      DevRun r = run(b);
      EXPECT_EXTEND_OK(b, r);
    }
  }
  // Ragged with a tree mask.
  Case c;
  c.qo = {6, 11};
  c.prefix = {20, 2};
  c.mask = Mask::Tree;
  c.meta = Meta::Ragged;
  Batch b = build(c, 39);
  DevRun r = run(b);
  EXPECT_EXTEND_OK(b, r);
}

TEST(Extend, WindowsCapSinksAndMetadataForms) {
  CLATTN_SEED_TRACE();
  const Meta metas[] = {Meta::Csr, Meta::WindowedCsr, Meta::PageTable, Meta::Ragged};
  for (int i = 0; i < 4; ++i) {
    Case c;
    c.qo = {9, 1, 30, 4};
    c.prefix = {40, 17, 3, 0};
    c.window = i == 3 ? 0 : 5 + 7 * i;
    c.meta = metas[i];
    c.cap = i % 2 ? 20.0 : 0.0;
    c.sinks = i >= 2;
    c.P = 8;
    Batch b = build(c, 40 + i);
    DevRun r = run(b);
    EXPECT_EXTEND_OK(b, r);
  }
}

TEST(Extend, RandomBatches) {
  CLATTN_SEED_TRACE();
  // Kernel builds dominate on PoCL: random cases draw from a fixed set of programs
  // (head dim, KV dtype) and sample the rest of the feature cross product.
  struct Prog {
    int D;
    DType kv;
    int G, Hkv;
  };
  const Prog progs[] = {{128, DType::BF16, 4, 2}, {64, DType::F16, 1, 3},      {80, DType::F32, 2, 2},
                        {96, DType::FP8_E4M3, 8, 1}, {192, DType::FP8_E5M2, 3, 1}, {256, DType::BF16, 16, 1},
                        {80, DType::F16, 2, 1}};
  const int kProgs = sizeof progs / sizeof progs[0];
  const int pages[] = {1, 4, 16, 32};
  const DType io[] = {DType::F32, DType::F16, DType::BF16};
  test::Rng rng(50);
  const int kCases = 2 * kProgs;
  for (int n = 0; n < kCases; ++n) {
    Case c;
    const Prog& p = progs[size_t(n % kProgs)];
    // Tensor-core kernel: every program once with register staging, once with cp.async
    // stages (16-bit KV; fp8 always stages through registers).
    c.params["MMA_ASYNC"] = n / kProgs;
    c.D = p.D, c.kv = p.kv, c.G = p.G, c.Hkv = p.Hkv;
    c.P = pages[rng.uniform_int(0, 3)];
    c.qd = io[rng.uniform_int(0, 2)], c.od = io[rng.uniform_int(0, 2)];
    c.layout = rng.uniform_int(0, 1) ? KVLayout::HND : KVLayout::NHD;
    random_requests(rng, c, 4, 24, 48);
    c.causal = rng.uniform_int(0, 3) != 0;
    c.window = rng.uniform_int(0, 3) == 0 ? rng.uniform_int(0, 20) : -1;
    c.cap = rng.uniform_int(0, 3) == 0 ? 15.0 : 0.0;
    c.sinks = rng.uniform_int(0, 3) == 0;
    c.lse = rng.uniform_int(0, 4) != 0;
    c.mask = rng.uniform_int(0, 3) == 0 ? Mask::Tree : Mask::None;
    const int m = rng.uniform_int(0, 3);
    c.meta = Meta(m);
    if (c.meta == Meta::WindowedCsr && (c.window < 0 || c.mask != Mask::None)) c.meta = Meta::Csr;
    if (c.kv == DType::FP8_E4M3 || c.kv == DType::FP8_E5M2) c.k_scale = 0.5, c.v_scale = 2.0;
    if (rng.uniform_int(0, 3) == 0) c.head_pad = 8;
    if (rng.uniform_int(0, 4) == 0) c.sm_scale = 0.07;
    if (!test::row_runs_case(n)) continue;
    Batch b = build(c, 500 + n);
    DevRun r = run(b);
    EXPECT_EXTEND_OK(b, r);
  }
}

namespace {
// One random nv_wgmma case: n picks the warps (4 / 8 / 12), keys per tile, head dim and KV
// dtype; the page size comes from `pages`; query tokens (first case: first_qo) up to
// max_qo and cached prefixes up to max_prefix per request; masks, windows, soft cap, sinks at random.
Case wgmma_case(test::Rng& rng, int n, const std::vector<int>& pages, int first_qo, int max_qo, int max_prefix) {
  const DType io[] = {DType::F32, DType::F16, DType::BF16};
  Case c;
  c.variant = "nv_wgmma";
  c.params["MMA_ASYNC"] = 1;
  c.params["MMA_WARPS"] = n % 3 == 2 ? 4 : n % 3 == 1 ? 12 : 8;
  c.params["MMA_KEYS"] = n % 4 == 3 ? 64 : 32;  // 64 fits the stages at D = 64 only
  c.D = n % 2 ? 64 : 128;
  c.kv = n % 4 < 2 ? DType::BF16 : DType::F16;
  c.G = 1 + rng.uniform_int(0, 7), c.Hkv = 1 + rng.uniform_int(0, 1);
  c.P = pages[size_t(rng.uniform_int(0, int(pages.size()) - 1))];
  c.qd = io[rng.uniform_int(0, 2)], c.od = io[rng.uniform_int(0, 2)];
  c.layout = rng.uniform_int(0, 1) ? KVLayout::HND : KVLayout::NHD;
  const int B = rng.uniform_int(1, 3);
  for (int i = 0; i < B; ++i) {
    c.qo.push_back(n == 0 ? first_qo : rng.uniform_int(0, 4) == 0 ? 1 : rng.uniform_int(1, max_qo));
    c.prefix.push_back(rng.uniform_int(0, 2) == 0 ? 0 : rng.uniform_int(0, max_prefix));
  }
  c.causal = n == 0 || rng.uniform_int(0, 3) != 0;
  c.window = rng.uniform_int(0, 3) == 0 ? rng.uniform_int(0, 40) : -1;
  c.cap = rng.uniform_int(0, 3) == 0 ? 15.0 : 0.0;
  c.sinks = rng.uniform_int(0, 3) == 0;
  c.lse = rng.uniform_int(0, 4) != 0;
  c.mask = rng.uniform_int(0, 3) == 0 ? Mask::Tree : Mask::None;
  return c;
}
}  // namespace

#define SKIP_WITHOUT_WGMMA()                                                   \
  for (const auto& v : clattn::variants(ctx().profile()))                      \
    if (v.name == "nv_wgmma" && !v.available) GTEST_SKIP() << "nv_wgmma: " << v.reason

// The Hopper warpgroup-MMA form (nv_wgmma: head dims 64 and 128, 16-bit KV, MMA_ASYNC
// stages, 32 or 64 keys per tile) over the feature cross product; tolerance as nv_mma_sync
// (same roundings of q and P). Skipped where the device has no sm_90a.
TEST(Extend, WarpgroupMmaMatchesReference) {
  CLATTN_SEED_TRACE();
  SKIP_WITHOUT_WGMMA();
  test::Rng rng(70);
  for (int n = 0; n < 12; ++n) {
    Case c = wgmma_case(rng, n, {1, 4, 16, 32}, 160, 40, 80);
    c.meta = Meta(rng.uniform_int(0, 3));
    if (c.meta == Meta::WindowedCsr && (c.window < 0 || c.mask != Mask::None)) c.meta = Meta::Csr;
    Batch b = build(c, 700 + n);
    DevRun r = run(b);
    EXPECT_EQ(r.plan.variant, "nv_wgmma") << c.describe();
    EXPECT_EXTEND_OK(b, r);
  }
}

// nv_wgmma fed by TMA tensor copies (MMA_TMA, with and without warpgroup turns): pages of 16 /
// 32 / 48 / 64 keys and ragged KV (the boxes of 16 keys never cross a page), NHD and HND (the
// map's slot and head dims swap), unused cache slots NaN (the V rows past kv_len are zeroed
// in the stage). Page sizes that are not multiples of 16 keep the cp.async feed. Page ids in
// runs (computed from the first) and broken runs (looked up).
TEST(Extend, WarpgroupMmaTmaMatchesReference) {
  CLATTN_SEED_TRACE();
  SKIP_WITHOUT_WGMMA();
  const Meta metas[] = {Meta::Csr, Meta::PageTable, Meta::Ragged};
  test::Rng rng(71);
  for (int n = 0; n < 10; ++n) {
    Case c = wgmma_case(rng, n, {16, 32, 48, 64}, 200, 60, 130);
    c.params["MMA_TMA"] = 1, c.params["MMA_PINGPONG"] = n % 3 != 1;
    if (n == 9) c.P = 4;
    if (n == 3 || n == 4) c.params["MMA_TMA_PAGES"] = 3;  // ranges past the local page-id table
    // Page ids computed from a group's single run, or looked up (every order with each meta).
    // (Csr: n = 0, 3, 6, 9; PageTable: n = 1, 4, 7; Ragged has no page ids.)
    const PageOrder orders[] = {PageOrder::Shuffled, PageOrder::BrokenRuns, PageOrder::Shuffled, PageOrder::Runs,
                                PageOrder::Shuffled, PageOrder::Shuffled,   PageOrder::BrokenRuns, PageOrder::Runs,
                                PageOrder::Shuffled, PageOrder::Runs};
    c.page_order = orders[n];
    c.layout = n % 2 ? KVLayout::HND : KVLayout::NHD;
    c.meta = metas[n % 3];
    Batch b = build(c, 720 + n);
    DevRun r = run(b);
    EXPECT_EQ(r.plan.variant, "nv_wgmma") << c.describe();
    const bool tma = r.plan.kernel_options.find("-DTMA=1") != std::string::npos;
    EXPECT_EQ(tma, c.P % 16 == 0 || c.meta == Meta::Ragged) << c.describe() << " " << r.plan.kernel_options;
    EXPECT_EXTEND_OK(b, r);
  }
}

TEST(Extend, GenericVariantCanBeForced) {
  CLATTN_SEED_TRACE();
  Case c;
  c.qo = {20, 3};
  c.prefix = {12, 40};
  c.kv = DType::F16, c.qd = DType::F16, c.od = DType::F32;
  c.variant = "generic";
  Batch b = build(c, 60);
  DevRun r = run(b);
  EXPECT_EQ(r.plan.variant, "generic");
  EXPECT_EXTEND_OK(b, r);
}

// The portable kernel over the shapes of its tile parameters (cl_kernels/extend.cl): 8 rows
// per work-item, head-dim chunks that must shrink to divide 80 and 96, V chunks of 8 keys,
// 64-key tiles, a grid narrower than a sub-group, unroll counts below the full loop, Q
// staged per chunk (QRES 0) as well as resident.
TEST(Extend, GenericTileParameters) {
  CLATTN_SEED_TRACE();
  const std::vector<std::map<std::string, int>> tiles = {
      {{"WG", 64}, {"ROWS", 32}, {"KEYS", 32}, {"TM", 8}, {"DC", 16}, {"VC", 8}},
      {{"WG", 128}, {"ROWS", 32}, {"KEYS", 64}, {"TM", 4}, {"DC", 32}, {"VC", 16}, {"SUNROLL", 2}, {"PUNROLL", 4}},
      {{"WG", 16}, {"ROWS", 16}, {"KEYS", 16}, {"TM", 4}, {"DC", 64}, {"VC", 16}, {"QRES", 0}},
  };
  const int dims[] = {96, 80, 128};
  for (size_t n = 0; n < tiles.size(); ++n) {
    Case c;
    c.variant = "generic";
    for (const auto& kv : tiles[n]) c.params[kv.first] = kv.second;
    if (n == 1) c.params.erase("DC");  // the default chunk (32), lowered to 20 to divide 80
    c.D = dims[n], c.G = 2, c.Hkv = 2, c.P = n == 1 ? 16 : 4;
    c.kv = n == 0 ? DType::BF16 : DType::F16, c.qd = DType::F16, c.od = DType::F32;
    c.qo = {37, 5}, c.prefix = {29, 70};
    c.causal = n != 2, c.lse = true, c.sinks = n == 1;
    Batch b = build(c, 70 + int(n));
    DevRun r = run(b);
    EXPECT_EQ(r.plan.variant, "generic");
    EXPECT_EXTEND_OK(b, r);
  }
}

// The CPU kernel (cl_kernels/extend_cpu.cl, variant "cpu", forced so that it runs on every
// device) over its tile parameters and the features it masks per block: every KV dtype and
// head dim, vector widths 4 / 8 / 16, one to three row vectors, key blocks of 8 to 64 with
// micro-tiles that split them, causal and not, windows, soft cap, sinks, custom masks, the
// metadata forms and HND caches; several key blocks per work item and rows past a request's
// end (qo_len x G not a multiple of the tile's rows).
TEST(Extend, CpuVariantMatchesTheReference) {
  CLATTN_SEED_TRACE();
  struct Prog {
    int D;
    DType kv;
    int G, Hkv;
    std::map<std::string, int> tile;
  };
  const Prog progs[] = {
      {128, DType::BF16, 4, 2, {}},
      {64, DType::F16, 1, 3, {{"VW", 4}, {"RV", 3}, {"BK", 8}, {"SK", 4}, {"PD", 2}}},
      {80, DType::F32, 2, 2, {{"VW", 16}, {"RV", 1}, {"BK", 64}, {"SK", 16}, {"PD", 16}}},
      {96, DType::FP8_E4M3, 8, 1, {{"VW", 8}, {"BK", 24}, {"SK", 6}, {"PD", 4}}},
      {192, DType::FP8_E5M2, 3, 1, {{"VW", 8}, {"RV", 1}, {"BK", 16}}},
      {256, DType::BF16, 16, 1, {{"RV", 1}, {"BK", 16}, {"SK", 4}, {"PD", 8}}},
  };
  const DType io[] = {DType::F32, DType::F16, DType::BF16};
  test::Rng rng(95);
  for (size_t n = 0; n < 2 * (sizeof progs / sizeof progs[0]); ++n) {
    const Prog& p = progs[n % (sizeof progs / sizeof progs[0])];
    Case c;
    c.variant = "cpu";
    c.params = p.tile;
    c.D = p.D, c.kv = p.kv, c.G = p.G, c.Hkv = p.Hkv;
    c.P = 1 << rng.uniform_int(0, 5);
    c.qd = io[rng.uniform_int(0, 2)], c.od = io[rng.uniform_int(0, 2)];
    c.layout = rng.uniform_int(0, 1) ? KVLayout::HND : KVLayout::NHD;
    random_requests(rng, c, 3, 40, 90);
    c.causal = n % 4 != 3;
    c.window = n % 3 == 1 ? rng.uniform_int(0, 30) : -1;
    c.cap = n % 5 == 2 ? 15.0 : 0.0;
    c.sinks = n % 4 == 1;
    c.lse = n % 6 != 5;
    c.mask = n % 4 == 2 ? Mask::Random : n % 7 == 3 ? Mask::Tree : Mask::None;
    c.meta = Meta(n % 4);
    if (c.meta == Meta::WindowedCsr && (c.window < 0 || c.mask != Mask::None)) c.meta = Meta::Csr;
    if (c.kv == DType::FP8_E4M3 || c.kv == DType::FP8_E5M2) c.k_scale = 0.5, c.v_scale = 2.0;
    Batch b = build(c, 950 + int(n));
    DevRun r = run(b);
    EXPECT_EQ(r.plan.variant, "cpu") << c.describe();
    EXPECT_EQ(r.plan.tile.wg, 1) << c.describe();
    EXPECT_EXTEND_OK(b, r);
  }
}

// Many key tiles per work-group (the other cases stay within one or two): the tensor-core
// kernel's staging pipeline, causal tile skipping per warp, interior tiles without masks,
// and the row-max rescale across tiles; head dims of every staging layout (80: padded K
// rows and an odd k-step count; 256: 32-key tiles), page sizes that do not divide a tile.
TEST(Extend, LongSequencesManyTiles) {
  CLATTN_SEED_TRACE();
  {
    Case c;  // causal prefill + prefix, f16 everywhere, GQA 2
    c.qo = {150, 37};
    c.prefix = {300, 0};
    c.Hkv = 2, c.G = 2, c.D = 128, c.P = 16;
    c.kv = c.qd = c.od = DType::F16;
    Batch b = build(c, 110);
    DevRun r = run(b);
    EXPECT_EXTEND_OK(b, r);
  }
  {
    Case c;  // D = 80, non-causal with a window, page table, page size 12
    c.qo = {70};
    c.prefix = {200};
    c.Hkv = 2, c.G = 1, c.D = 80, c.P = 12;
    c.causal = false, c.window = 90;
    c.meta = Meta::PageTable;
    Batch b = build(c, 111);
    DevRun r = run(b);
    EXPECT_EXTEND_OK(b, r);
  }
  {
    Case c;  // D = 64, fp8 KV with scales, tree mask, soft cap, sinks, HND
    c.qo = {130};
    c.prefix = {129};
    c.Hkv = 1, c.G = 4, c.D = 64, c.P = 32;
    c.kv = DType::FP8_E4M3, c.qd = DType::F32, c.od = DType::F32;
    c.k_scale = 0.5, c.v_scale = 2.0;
    c.mask = Mask::Tree, c.cap = 30.0, c.sinks = true;
    c.layout = KVLayout::HND;
    Batch b = build(c, 112);
    DevRun r = run(b);
    EXPECT_EXTEND_OK(b, r);
  }
  {
    Case c;  // D = 256 (32-key tiles), ragged, bf16, padded head stride
    c.qo = {40, 90};
    c.prefix = {100, 33};
    c.Hkv = 1, c.G = 2, c.D = 256;
    c.meta = Meta::Ragged, c.head_pad = 8;
    Batch b = build(c, 113);
    DevRun r = run(b);
    EXPECT_EXTEND_OK(b, r);
  }
}

// Where a device bounds a work-item's loops (rusticl's llvmpipe; CLATTN_DEVICE_LIMITS=
// loop_trips=N anywhere: the test_extend.loop_trips ctest at 16384), long requests are split by key and
// their parts merged: the plan has a workspace for the partial states and the result is the
// reference's, for the portable and the cpu kernel, causal and not, with a window and sinks.
TEST(Extend, KeySplitWhereLoopsAreBounded) {
  CLATTN_SEED_TRACE();
  if (ctx().profile().loop_trip_limit == 0)
    GTEST_SKIP() << "runs where a device bounds a work-item's loops (CLATTN_DEVICE_LIMITS=loop_trips=16384)";
  for (const char* variant : {"generic", "cpu"})
    for (int k = 0; k < 2; ++k) {
      Case c;
      c.qo = {40, 3};
      c.prefix = {k ? 1500 : 900, 2100};
      c.Hkv = 2, c.G = 2, c.D = 64, c.P = 16;
      c.kv = DType::F16, c.qd = DType::F32, c.od = DType::F32;
      c.variant = variant;
      c.causal = k == 0, c.sinks = k == 1;
      if (k == 1) c.window = 700;
      Batch b = build(c, 130 + uint64_t(k));
      DevRun r = run(b);
      EXPECT_EQ(r.plan.variant, variant);
      // At the ctest's bound every tile splits the 2100-key request; at llvmpipe's 65535 the GPU
      // rows' tiles cover it whole (the result is still checked).
      if (ctx().profile().loop_trip_limit <= 16384)
        EXPECT_GT(r.plan.workspace_bytes, 0) << c.describe() << ": no key split";
      EXPECT_EXTEND_OK(b, r);
    }
}

TEST(Extend, EmptyRequestsAndNoWork) {
  CLATTN_SEED_TRACE();
  Case c;
  c.qo = {0, 3, 0};
  c.prefix = {5, 2, 0};
  c.sinks = true;
  Batch b = build(c, 70);
  DevRun r = run(b);
  EXPECT_EXTEND_OK(b, r);
  Case e;
  e.qo = {0};
  e.prefix = {4};
  Batch be = build(e, 71);
  DevRun re = run(be);
  EXPECT_EQ(re.plan.num_tiles, 0);
}

// ---------------------------------------------------------------------------- cascade
TEST(Extend, CascadeEqualsExtend) {
  CLATTN_SEED_TRACE();
  for (int variant = 0; variant < 2; ++variant) {
    test::Rng rng(80 + variant);
    const int P = 8, Hkv = 2, G = 2, D = 64, Hq = Hkv * G;
    const int prefix_pages = variant ? 1 : 3;  // variant 1: more query rows than prefix keys
    const std::vector<int> suffix = {5, 12, 1, 9}, qo = {5, 4, 1, 9};
    const int B = int(suffix.size());
    // Full requests: prefix pages (shared ids) + own pages, the suffix starting on a page.
    Case c;
    c.P = P, c.Hkv = Hkv, c.G = G, c.D = D, c.kv = DType::F16, c.qd = DType::F16, c.od = DType::F32;
    c.sinks = variant == 1;
    for (int i = 0; i < B; ++i) c.qo.push_back(qo[size_t(i)]), c.prefix.push_back(prefix_pages * P + suffix[size_t(i)] - qo[size_t(i)]);
    Batch b = build(c, 90 + variant);
    // Make every request's first prefix_pages pages the same physical pages with the same
    // contents: copy request 0's prefix into the others and redo the reference.
    // Simpler: rebuild page lists so all share request 0's prefix pages.
    for (int i = 1; i < B; ++i)
      for (int p = 0; p < prefix_pages; ++p) b.pages[size_t(i)][size_t(p)] = b.pages[0][size_t(p)];
    // Recompute the reference and the CSR from the shared page lists.
    const int64_t ps = b.cache.page_stride(), ts = b.cache.token_stride(), hs = b.cache.head_stride();
    b.csr.kv_indices.clear();
    b.csr.kv_indptr = {0};
    ref::AttnOptions ro;
    ro.sm_scale = 1.0 / std::sqrt(double(D));
    ro.sinks = c.sinks ? b.sinks.data() : nullptr;
    for (int i = 0; i < B; ++i) {
      for (auto id : b.pages[size_t(i)]) b.csr.kv_indices.push_back(id);
      b.csr.kv_indptr.push_back(int32_t(b.csr.kv_indices.size()));
      const int L = b.kv_len(i);
      std::vector<double> kk(size_t(L) * Hkv * D), vv(kk.size());
      for (int t = 0; t < L; ++t)
        for (int h = 0; h < Hkv; ++h)
          for (int d = 0; d < D; ++d) {
            const size_t o = size_t(b.pages[size_t(i)][size_t(t / P)] * ps + (t % P) * ts + h * hs + d);
            kk[(size_t(t) * Hkv + h) * D + d] = b.kval[o];
            vv[(size_t(t) * Hkv + h) * D + d] = b.vval[o];
          }
      const size_t q0 = size_t(b.qo_indptr[size_t(i)]);
      ref::attention(&b.q[q0 * Hq * D], kk.data(), vv.data(), qo[size_t(i)], L, Hq, Hkv, D, D, ro,
                     &b.o_ref[q0 * Hq * D], &b.lse_ref[q0 * Hq]);
    }
    // Plain extend over prefix + suffix.
    DevRun full = run(b);
    EXPECT_EXTEND_OK(b, full);
    // Cascade: shared CSR (one request) + unique CSR (own pages only).
    PagedCsr shared, unique;
    shared.page_size = unique.page_size = P;
    shared.kv_indptr = {0, prefix_pages};
    shared.kv_indices.assign(b.pages[0].begin(), b.pages[0].begin() + prefix_pages);
    shared.kv_last_page_len = {P};
    unique.kv_indptr = {0};
    unique.qo_indptr = b.qo_indptr;
    for (int i = 0; i < B; ++i) {
      unique.kv_indices.insert(unique.kv_indices.end(), b.pages[size_t(i)].begin() + prefix_pages,
                               b.pages[size_t(i)].end());
      unique.kv_indptr.push_back(int32_t(unique.kv_indices.size()));
      unique.kv_last_page_len.push_back(b.csr.kv_last_page_len[size_t(i)]);
    }
    ExtendOptions o = options_of(b);
    CascadePlan cp = cascade_plan(ctx(), shared, unique, b.cache, o);
    DevRun cr;
    upload_inputs(b, cr);
    DeviceBuffer sids = test::upload(shared.kv_indices), uids = test::upload(unique.kv_indices);
    DeviceBuffer tmp_o(ctx(), size_t(cp.tmp_o_bytes)), tmp_l(ctx(), size_t(cp.tmp_lse_bytes));
    DeviceBuffer cws(ctx(), size_t(std::max<int64_t>(16, cp.workspace_bytes)));
    CascadeBuffers cb;
    cb.q = cr.q.get(), cb.k_cache = cr.k.get(), cb.v_cache = cr.v.get();
    cb.shared_page_ids = sids.get(), cb.unique_page_ids = uids.get();
    cb.o = cr.o.get(), cb.lse = cr.lse.get(), cb.tmp_o = tmp_o.get(), cb.tmp_lse_shared = tmp_l.get();
    cb.sinks = c.sinks ? cr.sinks.get() : nullptr;
    cb.workspace = cws.get();
    cascade_run(ctx(), cp, cb);
    cr.plan = cp.unique;
    download(b, cr);
    EXPECT_EXTEND_OK(b, cr);
    auto a = cr.o_vals(), f = full.o_vals();
    // Same kernel, different split of the keys: f32 rounding only, or the tensor-core
    // kernel's P rounding per level (tolerance as for the reference).
    const double tc = cp.unique.variant != "generic" ? tolerance(cp.unique).o : 1e-5;
    EXPECT_TRUE(test::all_close(a, f, tc, tc, "cascade vs extend"));
  }
}

// ---------------------------------------------------------------------------- errors
TEST(Extend, RejectedCallsLeaveOutputUntouched) {
  CLATTN_SEED_TRACE();
  Case c;
  c.qo = {4, 6};
  c.prefix = {3, 10};
  c.mask = Mask::Tree;
  Batch b = build(c, 100);
  DevRun r;
  upload_inputs(b, r);
  const size_t rows = size_t(b.T()) * b.Hq();
  const auto sentinel = test::download<uint8_t>(r.o, rows * c.D * 2);
  ExtendOptions o = options_of(b);

  {  // mask_indptr with the wrong count and with a wrong segment size
    ExtendOptions bad = o;
    bad.mask_indptr.pop_back();
    EXPECT_TRUE(test::throws_error([&] { make_plan(b, bad); }, Status::InvalidArgument, "mask_indptr"));
    bad = o;
    bad.mask_indptr[2] += 1;
    EXPECT_TRUE(test::throws_error([&] { make_plan(b, bad); }, Status::InvalidArgument, "request 1"));
  }
  {  // qo_len > kv_len
    Batch bb = b;
    bb.csr.qo_indptr = {0, 4, 4 + 17};
    ExtendOptions oo = o;
    oo.mask_indptr.clear();
    EXPECT_TRUE(test::throws_error([&] { extend_plan(ctx(), bb.csr, bb.cache, oo); }, Status::InvalidArgument,
                                   "request 1"));
    oo.validate = false;
    EXPECT_TRUE(test::throws_error([&] { extend_plan(ctx(), bb.csr, bb.cache, oo); }, Status::InvalidArgument,
                                   "request 1"));
    EXPECT_TRUE(test::throws_error([&] { prefill_plan(ctx(), {0, 4, 21}, {0, 7, 23}, RaggedKV{23, 2, 128}, oo); },
                                   Status::InvalidArgument, "request 1"));
  }
  {  // portable tile parameters the kernel cannot take: rejected at plan time, naming them
    ExtendOptions oo = o;
    oo.variant = "generic";
    oo.params = {{"TM", 3}};
    EXPECT_TRUE(test::throws_error([&] { extend_plan(ctx(), b.csr, b.cache, oo); }, Status::InvalidArgument, "TM"));
    oo.params = {{"SUB_TX", 6}};
    EXPECT_TRUE(
        test::throws_error([&] { extend_plan(ctx(), b.csr, b.cache, oo); }, Status::InvalidArgument, "SUB_TX = 6"));
    oo.params = {{"PUNROLL", 0}};
    EXPECT_TRUE(
        test::throws_error([&] { extend_plan(ctx(), b.csr, b.cache, oo); }, Status::InvalidArgument, "PUNROLL = 0"));
  }
  {  // metadata validation: page id out of range
    Batch bb = b;
    bb.csr.kv_indices[0] = bb.cache.num_pages + 5;
    EXPECT_TRUE(test::throws_error([&] { extend_plan(ctx(), bb.csr, bb.cache, o); }, Status::InvalidArgument,
                                   "kv_indices"));
  }
  {  // unsupported head dim, bad head counts, missing qo_indptr
    PagedKV k = b.cache;
    k.head_dim = 72;
    EXPECT_TRUE(test::throws_error([&] { extend_plan(ctx(), b.csr, k, o); }, Status::Unsupported, "head_dim"));
    ExtendOptions oo = o;
    oo.num_qo_heads = 5;
    EXPECT_TRUE(test::throws_error([&] { extend_plan(ctx(), b.csr, b.cache, oo); }, Status::InvalidArgument,
                                   "num_qo_heads"));
    PagedCsr cc = b.csr;
    cc.qo_indptr.clear();
    EXPECT_TRUE(test::throws_error([&] { extend_plan(ctx(), cc, b.cache, o); }, Status::InvalidArgument,
                                   "qo_indptr"));
  }
  {  // run: buffers too small (o, q, mask), missing mask, bad scale
    ExtendPlan p = make_plan(b, o);
    ExtendBuffers eb = buffers_of(b, r);
    DeviceBuffer small(ctx(), 64);
    ExtendBuffers e1 = eb;
    e1.o = small.get();
    EXPECT_TRUE(test::throws_error([&] { extend_run(ctx(), p, e1); }, Status::InvalidArgument, "o:"));
    ExtendBuffers e2 = eb;
    e2.q = small.get();
    EXPECT_TRUE(test::throws_error([&] { extend_run(ctx(), p, e2); }, Status::InvalidArgument, "q:"));
    ExtendBuffers e3 = eb;
    e3.custom_mask = nullptr;
    EXPECT_TRUE(test::throws_error([&] { extend_run(ctx(), p, e3); }, Status::InvalidArgument, "custom_mask"));
    DeviceBuffer tiny(ctx(), 1);
    e3.custom_mask = tiny.get();
    EXPECT_TRUE(test::throws_error([&] { extend_run(ctx(), p, e3); }, Status::InvalidArgument, "custom_mask"));
    ExtendBuffers e4 = eb;
    e4.k_scale = 0.0f;
    EXPECT_TRUE(test::throws_error([&] { extend_run(ctx(), p, e4); }, Status::InvalidArgument, "k_scale"));
    ExtendBuffers e5 = eb;
    e5.page_ids = tiny.get();
    EXPECT_TRUE(test::throws_error([&] { extend_run(ctx(), p, e5); }, Status::InvalidArgument, "page_ids"));
  }
  {  // cascade rejects windows and masks
    PagedCsr sh;
    sh.page_size = c.P, sh.kv_indptr = {0, 1}, sh.kv_indices = {0}, sh.kv_last_page_len = {c.P};
    ExtendOptions oo = o;
    EXPECT_TRUE(test::throws_error([&] { cascade_plan(ctx(), sh, b.csr, b.cache, oo); }, Status::InvalidArgument,
                                   "mask"));
    oo.mask_indptr.clear();
    oo.window_left = 3;
    EXPECT_TRUE(test::throws_error([&] { cascade_plan(ctx(), sh, b.csr, b.cache, oo); }, Status::InvalidArgument,
                                   "window_left"));
  }
  ctx().finish();
  EXPECT_EQ(test::download<uint8_t>(r.o, rows * c.D * 2), sentinel) << "a rejected call wrote to o";
}
