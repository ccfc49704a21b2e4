// MLA decode / extend / append_latent against the double-precision reference
// (ref::mla_attention: plain loops over each request's logical sequence) over random
// batches: page sizes 1/16/32/64, latent f16/bf16/fp8 e4m3 (with a scale), q/o
// f32/f16/bf16, H 8..128 (sampled), CSR and page table, split 512+64 buffers and one
// 576-wide buffer (bitwise equal), split-K forced on and off; append_latent with int32 and
// int64 slots and skipped slots; rejected calls leave the output untouched.
//
// Tolerances: the kernel reads exactly the values the reference reads (inputs quantised
// first), so differences are f32 arithmetic over 576-wide dots plus the final rounding of
// o: f32 1e-4, f16 2e-3, bf16 1e-2 (abs + rel); lse 2e-4. Unused cache slots hold NaN
// (float latents), so a read outside a request's keys shows.
// The tensor-core variant (nv_mma_sync: NVIDIA inline PTX, or its PoCL emulation, see
// docs/mla.md) rounds the scaled q and P to the MMA type (bf16 for bf16 latents: 2^-9
// relative; f16 for f16 and fp8: 2^-11): o 1e-2 (bf16) / 3e-3 (f16); lse 1e-2 (bf16) /
// 3e-3 (f16): with one key, lse is that key's score, which carries q's rounding unaveraged.
// The portable kernels, "tiled" (register-blocked, mla_tiled.cl) and "generic" (mla.cl), are
// both f32 throughout and share the f32 tolerances; the vendor parameter rows choose between
// them (TILED), and MlaPortable.* runs each one explicitly, asserting the plan's variant.
// The CPU variant ("cpu", mla_cpu.cl: one work-item per group, explicit vectors), asked for
// by the cpu rows (CPU_KERNEL), is f32 throughout too; MlaCpu.* runs it explicitly over every
// latent dtype, and on a CPU device under its own rows asserts that the rows choose it.
#include <cmath>
#include <map>

#include "clattn/diagnostics.hpp"
#include "mla_fixture.hpp"

using namespace clattn;
using namespace clattn::test::mla;
using test::ctx;

namespace {

double o_tol(DType t) { return t == DType::F32 ? 1e-4 : t == DType::F16 ? 2e-3 : 1e-2; }

bool mma_plan(const MlaPlan& p) { return p.variant == "nv_mma_sync"; }
double o_tol(const Batch& b, const MlaPlan& p) {
  return mma_plan(p) ? std::max(o_tol(b.od), b.kvd == DType::BF16 ? 1e-2 : 3e-3) : o_tol(b.od);
}

// Whether this device can run the tensor-core kernel (NVIDIA inline PTX, sm_80+).
bool mma_available() {
  for (const auto& v : variants(ctx().profile()))
    if (v.name == "nv_mma_sync") return v.available;
  return false;
}

// One case of the variant matrices (portable and CPU kernels; C names the latent, q and o
// dtypes, heads, page size and the extend / causal / single-buffer / page-table switches): 2-3
// requests, one query row each for decode, 1-9 for extend; fp8 latents with a scale; with
// `empty_request`, request 1 is a decode request with no keys (o = 0, lse = -inf).
template <class C>
Batch random_batch(test::Rng& rng, const C& c, bool empty_request) {
  Batch b;
  b.kvd = c.kv, b.qd = c.q, b.od = c.o, b.H = c.H, b.P = c.P, b.extend = c.extend, b.causal = c.causal;
  b.single = c.single, b.table = c.table;
  b.kv_scale = c.kv == DType::FP8_E4M3 || c.kv == DType::FP8_E5M2 ? 0.5 : 1.0;
  const int B = rng.uniform_int(2, 3);
  for (int i = 0; i < B; ++i) {
    const int q = c.extend ? rng.uniform_int(1, 9) : 1;
    b.qo.push_back(q), b.kv.push_back(q + rng.uniform_int(c.extend ? 0 : 20, 120));
  }
  if (empty_request) b.kv[1] = 0, b.qo[1] = 1;
  return b;
}

// Runs one batch and compares to the reference; returns the raw o bytes for bitwise checks.
std::vector<uint8_t> run_and_check(const Batch& b, MlaOptions opt = {}, uint64_t salt = 0, MlaPlan* plan_out = nullptr) {
  SCOPED_TRACE(b.describe());
  test::Rng rng(salt);
  Data d = make_data(b, rng);
  Dev v = upload_data(d, b);
  opt.num_heads = b.H, opt.q_dtype = b.qd, opt.o_dtype = b.od, opt.sm_scale = float(b.sm_scale), opt.causal = b.causal;
  MlaPlan plan = plan_for(b, d, opt);
  MlaBuffers mb = buffers(v, b);
  if (plan.workspace_bytes > 0) v.ws = DeviceBuffer(ctx(), size_t(plan.workspace_bytes)), mb.workspace = v.ws.get();
  mla_run(ctx(), plan, mb);
  clFinish(ctx().cl_queue());
  const size_t rows = size_t(d.T) * b.H;
  auto ob = test::download<uint8_t>(v.o, rows * Dc * dtype_size(b.od));
  auto got = test::unpack(ob, b.od);
  auto lse = test::download<float>(v.lse, rows);
  std::vector<double> want, wlse;
  reference(b, d, want, wlse);
  const double tol = o_tol(b, plan), ltol = !mma_plan(plan) ? 2e-4 : b.kvd == DType::BF16 ? 1e-2 : 3e-3;
  EXPECT_TRUE(test::all_close(got, want, tol, tol, "o")) << "plan: " << plan.variant << ", " << plan.num_work
                                                         << " entries, " << plan.num_merges << " merges, QB "
                                                         << plan.tile.qb;
  for (size_t r = 0; r < rows; ++r) {
    if (std::isinf(wlse[r])) {
      EXPECT_TRUE(std::isinf(lse[r]) && lse[r] < 0) << "lse row " << r << " = " << lse[r] << ", want -inf";
    } else {
      EXPECT_NEAR(lse[r], wlse[r], ltol * (1 + std::fabs(wlse[r]))) << "lse row " << r;
    }
    if (::testing::Test::HasFailure()) break;
  }
  // A call that names a portable kernel (CPU_KERNEL, or TILED with the tensor cores and the CPU
  // variant off) must have run it.
  auto named = [&](const char* name) {
    const auto it = opt.params.find(name);
    return it == opt.params.end() ? -1 : it->second;
  };
  if (named("CPU_KERNEL") == 1 && named("MMA") <= 0) EXPECT_EQ(plan.variant, "cpu") << b.describe();
  if (named("TILED") >= 0 && named("MMA") == 0 && named("CPU_KERNEL") == 0)
    EXPECT_EQ(plan.variant, named("TILED") ? "tiled" : "generic") << b.describe();
  if (plan_out) *plan_out = plan;
  return ob;
}

std::vector<int> random_lens(test::Rng& rng, int B, int lo, int hi) {
  std::vector<int> v(static_cast<size_t>(B));
  for (auto& x : v) x = rng.uniform_int(lo, hi);
  return v;
}

TEST(MlaDecode, RandomBatches) {
  CLATTN_SEED_TRACE();
  test::Rng rng(1);
  const int Ps[] = {1, 16, 32, 64};
  const DType kvs[] = {DType::BF16, DType::F16, DType::FP8_E4M3};
  const DType ios[] = {DType::F32, DType::F16, DType::BF16};
  const int Hs[] = {8, 16, 32, 16};
  for (int c = 0; c < 8; ++c) {
    Batch b;
    b.P = Ps[c % 4];
    b.kvd = kvs[c % 3];
    b.qd = ios[(c + 1) % 3];
    b.od = ios[c % 3];
    b.H = Hs[c % 4];
    b.single = c % 2 == 1;
    b.table = c % 3 == 2;
    b.kv_scale = b.kvd == DType::FP8_E4M3 ? 0.5 : 1.0;
    const int B = rng.uniform_int(1, 4);
    b.kv = random_lens(rng, B, 1, 150);
    if (c == 3) b.kv[0] = 0;  // empty request: o = 0, lse = -inf
    b.qo.assign(size_t(B), 1);
    run_and_check(b, {}, 100 + c);
  }
}

TEST(MlaDecode, ManyHeads) {
  CLATTN_SEED_TRACE();
  Batch b;
  b.H = 128, b.P = 64, b.kv = {70, 5}, b.qo = {1, 1};
  run_and_check(b, {}, 7);
}

TEST(MlaDecode, SplitKOnAndOff) {
  CLATTN_SEED_TRACE();
  Batch b;
  b.H = 8, b.P = 16, b.kv = {300, 37}, b.qo = {1, 1}, b.kvd = DType::BF16;
  MlaOptions split;
  split.params = {{"MIN_CHUNK", 16}, {"WGS_PER_CU", 1024}};  // a "wide" device: the planner splits
  MlaPlan p1, p2;
  run_and_check(b, split, 11, &p1);
  EXPECT_GT(p1.num_merges, 0);
  EXPECT_GT(p1.workspace_bytes, 0);
  MlaOptions nosplit = split;
  nosplit.max_splits = 1;
  run_and_check(b, nosplit, 11, &p2);
  // (A device that bounds a work-item's loops splits long requests whatever max_splits says.)
  if (ctx().profile().loop_trip_limit == 0) EXPECT_EQ(p2.num_merges, 0);
}

// The tensor-core variant asked for explicitly (MMA=1) over its matrix: bf16 / f16 / fp8
// latents x H 8 / 16 / 128 x pages 1 / 16 / 64, split-K on and off (each dtype both), then
// the other tile shapes (MMA_WARPS 2, MMA_KEYS 32) on two more batches, and an fp8 e5m2
// latent; split cases alternate between the fused merge (FUSE_MERGE, the default) and the
// separate merge pass. Where
// the device can run it, the plan must use it (a failed build would fall back silently);
// elsewhere this runs the generic kernel.
TEST(MlaDecode, TensorCoreVariantMatrix) {
  CLATTN_SEED_TRACE();
  test::Rng rng(5);
  const DType kvs[] = {DType::BF16, DType::F16, DType::FP8_E4M3};
  const int Hs[] = {8, 16, 128}, Ps[] = {1, 16, 64};
  const DType ios[] = {DType::BF16, DType::F32, DType::F16};
  const bool want_mma = mma_available();
  for (int c = 0; c < 12; ++c) {
    Batch b;
    b.kvd = kvs[c % 3], b.H = Hs[(c / 3) % 3], b.P = Ps[(c + c / 3) % 3];
    if (c >= 9) b.H = 32;
    if (c == 11) b.kvd = DType::FP8_E5M2, b.H = 16;
    b.qd = ios[(c + 1) % 3], b.od = ios[c % 3];
    b.table = c % 4 == 1, b.single = c % 4 == 2;
    b.kv_scale = b.kvd == DType::FP8_E4M3 || b.kvd == DType::FP8_E5M2 ? 0.5 : 1.0;
    const int B = b.H == 128 ? 2 : 3;
    b.kv = random_lens(rng, B, 1, b.H == 128 ? 90 : 200);
    b.kv[0] = std::max(b.kv[0], 64);  // something to split
    if (c == 4) b.kv[1] = 0;          // empty request: o = 0, lse = -inf
    b.qo.assign(size_t(B), 1);
    MlaOptions o;
    o.params["MMA"] = 1;
    if (c == 9) o.params["MMA_WARPS"] = 2;
    if (c == 9 || c == 10) o.params["MMA_KEYS"] = 32;
    o.params["FUSE_MERGE"] = (c / 2) % 2 == 0;  // split-K merged by the last part's group, or a merge pass
    o.params["FUSE_MAX_PARTS"] = 1024;          // fused even with the many tiny parts below
    const bool split = c % 2 == 0;
    if (split) o.params["MIN_CHUNK"] = 16, o.params["WGS_PER_CU"] = 1024;
    else o.max_splits = 1;
    MlaPlan p;
    run_and_check(b, o, 300 + c, &p);
    if (want_mma) EXPECT_EQ(p.variant, "nv_mma_sync") << b.describe();
    if (split) EXPECT_GT(p.num_merges, 0) << b.describe();
    else if (ctx().profile().loop_trip_limit == 0) EXPECT_EQ(p.num_merges, 0) << b.describe();
    if (::testing::Test::HasFailure()) break;
  }
}

TEST(MlaDecode, SingleBufferMatchesSplitBuffersBitwise) {
  CLATTN_SEED_TRACE();
  for (DType kv : {DType::BF16, DType::FP8_E4M3}) {
    Batch b;
    b.H = 16, b.P = 32, b.kv = {90, 33, 64}, b.qo = {1, 1, 1}, b.kvd = kv, b.od = DType::F32;
    auto a = run_and_check(b, {}, 21);
    b.single = true;
    auto c = run_and_check(b, {}, 21);
    EXPECT_EQ(a, c) << "single 576-wide buffer differs from split buffers (" << dtype_name(kv) << ")";
  }
}

// Both portable kernels, asked for by name (TILED 1 / 0, MMA 0, CPU_KERNEL 0), each case
// asserting the variant: the tiled kernel over every latent dtype (f32, f16, bf16, fp8 e4m3 and
// e5m2 with a scale), q/o dtypes, page sizes 1..64, CSR / page table / 576-wide buffer, decode
// with split-K on and off (an empty request included), extend causal and not, and its other tile
// shapes (KT 4 / 16, MS 2 / 4, DS 4 / 8, DSW 4 / 16, MO 1 / 4 / 8, QB 32, 8- and 4-byte loads);
// the generic kernel on three of them (bf16 decode with split-K, e5m2, extend fp8 e4m3). Few
// programs: each costs seconds of PoCL compilation.
TEST(MlaPortable, TiledAndGenericMatchTheReference) {
  CLATTN_SEED_TRACE();
  test::Rng rng(6);
  struct C {
    DType kv, q, o;
    int H, P;
    bool extend, causal, split, single, table, generic;
    std::map<std::string, int> tile;  // tiled kernel only
  };
  const C cases[] = {
      {DType::BF16, DType::BF16, DType::F32, 16, 16, false, true, true, false, false, true, {}},
      {DType::F32, DType::F32, DType::F32, 8, 1, false, true, false, false, true, false,
       {{"KT", 4}, {"DS", 8}, {"DSW", 4}, {"MO", 8}, {"LOAD_BYTES", 8}}},
      {DType::F16, DType::F16, DType::BF16, 32, 32, false, true, true, true, false, false,
       {{"KT", 16}, {"MS", 2}, {"DSW", 16}, {"MO", 4}}},
      {DType::FP8_E5M2, DType::F32, DType::F16, 4, 16, false, true, true, false, true, true, {{"MS", 4}, {"MO", 1}}},
      {DType::BF16, DType::F16, DType::F32, 8, 16, true, true, false, false, false, false,
       {{"QB", 32}, {"DS", 4}, {"MS", 2}, {"LOAD_BYTES", 4}}},
      {DType::FP8_E4M3, DType::BF16, DType::BF16, 16, 64, true, false, false, true, false, true, {}},
  };
  int k = 0;
  for (const C& c : cases) {
    Batch b = random_batch(rng, c, k == 0);
    if (!test::row_runs_case(k++)) continue;
    for (int tiled : {1, 0}) {
      if (!tiled && !c.generic) continue;
      MlaOptions o;
      o.params["MMA"] = 0, o.params["CPU_KERNEL"] = 0, o.params["TILED"] = tiled;
      if (tiled)
        for (const auto& [name, v] : c.tile) o.params[name] = v;
      if (c.split) o.params["MIN_CHUNK"] = 16, o.params["WGS_PER_CU"] = 1024;
      else o.max_splits = 1;
      MlaPlan p;
      run_and_check(b, o, 500 + k, &p);
      EXPECT_EQ(p.variant, tiled ? "tiled" : "generic") << b.describe();
      if (c.split && !c.extend) EXPECT_GT(p.num_merges, 0) << b.describe();
      if (::testing::Test::HasFailure()) return;
    }
  }
}

// The CPU variant (mla_cpu.cl) asked for by name (CPU_KERNEL 1), each case asserting it: every
// latent dtype (f32, f16, bf16, fp8 e4m3 and e5m2 with a scale; fp8 by the exact decode and,
// where the device keeps f32 denormals, by the default raw-bit decode), q/o dtypes, page sizes
// 1..64, CSR / page table / 576-wide buffer, decode with split-K on and off (an empty request
// included), one head, head counts that leave part of a head block or of a micro-tile idle
// (3, 5), head blocks smaller than H (CPU_QB 4, 8: narrower vectors), extend causal and not
// with blocks spanning query rows, and the other vector widths, key blocks and micro-tiles
// (VW 4 / 8 / 16, BK 8..64, SK, SD 32..576, OH, OD, TOUCH_AHEAD 0 / 2), private buffers
// (LOCAL_BUFS 0, as on devices with little local memory).
// One program per case (each costs a PoCL compile).
TEST(MlaCpu, MatchesTheReference) {
  CLATTN_SEED_TRACE();
  test::Rng rng(2026112602);
  struct C {
    DType kv, q, o;
    int H, P;
    bool extend, causal, split, single, table;
    std::map<std::string, int> tile;
  };
  const C cases[] = {
      {DType::BF16, DType::BF16, DType::F32, 16, 16, false, true, true, false, false, {}},
      {DType::F32, DType::F32, DType::F32, 8, 1, false, true, false, false, true,
       {{"VW", 4}, {"BK", 8}, {"SK", 4}, {"SD", 32}, {"OH", 2}, {"OD", 1}, {"TOUCH_AHEAD", 0}}},
      {DType::F16, DType::F16, DType::BF16, 32, 32, false, true, true, true, false,
       {{"VW", 8}, {"CPU_QB", 8}, {"BK", 32}, {"SK", 16}, {"SD", 192}, {"OH", 4}, {"OD", 8}, {"TOUCH_AHEAD", 2}}},
      {DType::FP8_E4M3, DType::F32, DType::F16, 3, 64, false, true, true, false, true, {}},
      {DType::FP8_E5M2, DType::BF16, DType::BF16, 16, 16, false, true, false, true, false,
       {{"FP8_FAST", 0}, {"CPU_QB", 4}, {"OH", 4}, {"OD", 4}, {"LOCAL_BUFS", 0}}},
      {DType::BF16, DType::F16, DType::F32, 8, 16, true, true, false, false, false, {}},
      {DType::FP8_E4M3, DType::BF16, DType::BF16, 5, 32, true, false, false, true, true,
       {{"VW", 8}, {"FP8_FAST", 0}, {"SK", 2}, {"SD", 576}}},
      {DType::F16, DType::F32, DType::F16, 16, 64, true, true, false, false, false,
       {{"CPU_QB", 4}, {"BK", 64}, {"SK", 4}, {"OH", 1}, {"OD", 16}}},
      {DType::BF16, DType::F32, DType::F32, 1, 16, false, true, true, false, true, {}},
  };
  int k = 0;
  for (const C& c : cases) {
    Batch b = random_batch(rng, c, k == 0);
    if (!test::row_runs_case(k++)) continue;
    MlaOptions o;
    o.params = c.tile;
    o.params["MMA"] = 0, o.params["CPU_KERNEL"] = 1;
    if (c.split) o.params["MIN_CHUNK"] = 16, o.params["WGS_PER_CU"] = 1024;
    else o.max_splits = 1;
    MlaPlan p;
    run_and_check(b, o, 700 + k, &p);
    EXPECT_EQ(p.variant, "cpu") << b.describe();
    EXPECT_EQ(p.tile.wg, 1) << b.describe();
    if (c.split && !c.extend) EXPECT_GT(p.num_merges, 0) << b.describe();
    if (::testing::Test::HasFailure()) return;
  }
}

// On a CPU device under its own parameter rows (no CLATTN_FORCE_VENDOR), MLA decode and extend
// run the CPU variant.
TEST(MlaCpu, CpuRowsChooseIt) {
  const DeviceProfile& prof = ctx().profile();
  if (!prof.is_cpu || prof.param_vendor() != "cpu") GTEST_SKIP() << "not a CPU device under the cpu rows";
  Batch b;
  b.H = 16, b.P = 16, b.kv = {40, 17}, b.qo = {1, 1}, b.od = DType::F32;
  MlaPlan p;
  run_and_check(b, {}, 41, &p);
  EXPECT_EQ(p.variant, "cpu");
  b.extend = true, b.qo = {3, 2};
  run_and_check(b, {}, 42, &p);
  EXPECT_EQ(p.variant, "cpu");
}

TEST(MlaExtend, RandomBatches) {
  CLATTN_SEED_TRACE();
  test::Rng rng(2);
  struct C { int P; DType kv, io; int H; bool causal, table, single; };
  const C cases[] = {{16, DType::BF16, DType::F32, 8, true, false, false},
                     {64, DType::F16, DType::BF16, 16, true, true, true},
                     {1, DType::FP8_E4M3, DType::F16, 8, true, false, true},
                     {32, DType::BF16, DType::F32, 16, false, false, false}};
  int k = 0;
  for (const C& c : cases) {
    Batch b;
    b.extend = true, b.P = c.P, b.kvd = c.kv, b.qd = b.od = c.io, b.H = c.H, b.causal = c.causal;
    b.table = c.table, b.single = c.single;
    b.kv_scale = c.kv == DType::FP8_E4M3 ? 0.25 : 1.0;
    const int B = rng.uniform_int(1, 3);
    for (int i = 0; i < B; ++i) {
      const int prefix = rng.uniform_int(0, 70), q = rng.uniform_int(1, 9);
      b.qo.push_back(q), b.kv.push_back(prefix + q);
    }
    run_and_check(b, {}, 200 + k++);
  }
}

// Where a device bounds a work-item's loops (rusticl's llvmpipe; CLATTN_DEVICE_LIMITS=
// loop_trips=N anywhere), a long extend is split by key and each token's parts merged: the plan
// has merges and a workspace, and the result is the reference's, for the portable kernels and
// the cpu one, causal and not.
TEST(MlaExtend, KeySplitWhereLoopsAreBounded) {
  CLATTN_SEED_TRACE();
  if (ctx().profile().loop_trip_limit == 0)
    GTEST_SKIP() << "runs where a device bounds a work-item's loops (CLATTN_DEVICE_LIMITS=loop_trips=65535)";
  int k = 0;
  for (const char* kernel : {"TILED", "CPU_KERNEL"})
    for (bool causal : {true, false}) {
      Batch b;
      b.extend = true, b.causal = causal, b.H = 8, b.P = 16, b.kvd = DType::F16, b.qd = b.od = DType::F32;
      b.qo = {6, 2}, b.kv = {1400, 300};
      MlaOptions o;
      o.params = {{kernel, 1}, {"MMA", 0}};
      if (std::string(kernel) == "TILED") o.params["CPU_KERNEL"] = 0;
      MlaPlan p;
      run_and_check(b, o, 400 + k++, &p);
      EXPECT_GT(p.num_merges, 0) << b.describe() << ": no key split";
      EXPECT_GT(p.workspace_bytes, 0);
    }
}

TEST(MlaExtend, DecodeRowsEqualDecode) {
  // qo_len = 1 per request through extend must match decode (same kernel, no split).
  CLATTN_SEED_TRACE();
  Batch b;
  b.H = 16, b.P = 16, b.kv = {40, 17}, b.qo = {1, 1}, b.od = DType::F32;
  MlaOptions o;
  o.max_splits = 1;
  o.params["MMA_KEYS"] = 16;  // one tile for both ops (a device's tuned rows may give them different ones)
  auto a = run_and_check(b, o, 31);
  b.extend = true;
  auto c = run_and_check(b, o, 31);
  EXPECT_EQ(a, c);
}

// ---------------------------------------------------------------- append_latent
TEST(MlaAppend, WritesSlotsWithConversion) {
  CLATTN_SEED_TRACE();
  struct C { DType src, dst; bool single; bool i64; float scale; int P; };
  const C cases[] = {{DType::F32, DType::BF16, false, true, 1.0f, 16},
                     {DType::BF16, DType::FP8_E4M3, true, false, 0.5f, 64},
                     {DType::F16, DType::F16, false, false, 1.0f, 1}};
  int k = 0;
  for (const C& c : cases) {
    SCOPED_TRACE(std::string(dtype_name(c.src)) + " -> " + dtype_name(c.dst) + (c.single ? " single" : " split"));
    test::Rng rng(300 + k++);
    const int T = 7, pages = c.P == 1 ? 8 : 3;
    MlaCache cache;
    cache.num_pages = pages, cache.page_size = c.P, cache.dtype = c.dst, cache.single_buffer = c.single;
    const size_t slots = size_t(pages) * c.P;
    const size_t es = dtype_size(c.dst);
    std::vector<uint8_t> sentinel_c(size_t(cache.ckv_required_bytes()), 0x11),
        sentinel_k(size_t(std::max<int64_t>(1, cache.kpe_required_bytes())), 0x11);
    DeviceBuffer ckc = test::upload(sentinel_c), kpc = test::upload(sentinel_k);
    // Values up to 600 so fp8 (max 448 after /scale) saturates.
    auto ckv = test::quantize(rng.vec(size_t(T) * Dc, -300, 300), c.src);
    auto kpe = test::quantize(rng.vec(size_t(T) * Dr, -2, 2), c.src);
    std::vector<int64_t> slots64(static_cast<size_t>(T));
    std::vector<int> perm(slots);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng.gen);
    for (int t = 0; t < T; ++t) slots64[t] = perm[t];
    slots64[2] = -1;  // padding: skipped
    std::vector<int32_t> slots32(slots64.begin(), slots64.end());
    DeviceBuffer cb = test::upload(test::pack(ckv, c.src)), kb = test::upload(test::pack(kpe, c.src));
    DeviceBuffer sb = c.i64 ? test::upload(slots64) : test::upload(slots32);
    AppendLatentArgs a;
    a.ckv = cb.get(), a.kpe = kb.get(), a.src_dtype = c.src, a.slot_mapping = sb.get();
    a.slot_dtype = c.i64 ? DType::I64 : DType::I32, a.num_tokens = T;
    a.slot_mapping_host = c.i64 ? static_cast<const void*>(slots64.data()) : slots32.data();
    a.ckv_cache = ckc.get(), a.kpe_cache = c.single ? nullptr : kpc.get(), a.cache = cache, a.scale = c.scale;
    append_latent(ctx(), a);
    auto gc = test::download<uint8_t>(ckc, sentinel_c.size());
    auto gk = test::download<uint8_t>(kpc, sentinel_k.size());
    const int64_t row = c.single ? Dc + Dr : Dc;
    for (int t = 0; t < T; ++t) {
      if (slots64[t] < 0) continue;
      const size_t s = size_t(slots64[t]);
      std::vector<double> wc(ckv.begin() + t * Dc, ckv.begin() + (t + 1) * Dc);
      std::vector<double> wk(kpe.begin() + t * Dr, kpe.begin() + (t + 1) * Dr);
      auto pc = test::pack(wc, c.dst, c.scale), pk = test::pack(wk, c.dst, c.scale);
      std::vector<uint8_t> hc(gc.begin() + s * row * es, gc.begin() + (s * row + Dc) * es);
      EXPECT_EQ(hc, pc) << "ckv of token " << t << " at slot " << s;
      const std::vector<uint8_t>& kbuf = c.single ? gc : gk;
      const size_t ko = c.single ? (s * row + Dc) * es : s * Dr * es;
      std::vector<uint8_t> hk(kbuf.begin() + ko, kbuf.begin() + ko + Dr * es);
      EXPECT_EQ(hk, pk) << "kpe of token " << t << " at slot " << s;
    }
    // Slots nobody wrote keep the sentinel (the skipped token's slot included).
    std::vector<bool> used(slots, false);
    for (auto s : slots64)
      if (s >= 0) used[size_t(s)] = true;
    for (size_t s = 0; s < slots; ++s)
      if (!used[s]) {
        EXPECT_EQ(gc[s * row * es], 0x11) << "slot " << s << " written";
        break;
      }
  }
}

// ---------------------------------------------------------------- rejected input
TEST(MlaErrors, RejectedCallsLeaveOutputUntouched) {
  CLATTN_SEED_TRACE();
  Batch b;
  b.H = 8, b.P = 16, b.kv = {20, 9}, b.qo = {1, 1}, b.od = DType::F32;
  test::Rng rng(400);
  Data d = make_data(b, rng);
  Dev v = upload_data(d, b);
  MlaOptions opt;
  opt.num_heads = 8, opt.q_dtype = b.qd, opt.o_dtype = b.od, opt.sm_scale = 0.1f;
  MlaBuffers mb = buffers(v, b);
  auto before = test::download<uint8_t>(v.o, v.o.bytes());

  MlaOptions o2 = opt;
  o2.sm_scale = 0.0f;
  EXPECT_TRUE(test::throws_error([&] { mla_decode_plan(ctx(), d.csr, d.cache, o2); }, Status::InvalidArgument,
                                 "sm_scale"));
  o2 = opt, o2.num_heads = 0;
  EXPECT_TRUE(test::throws_error([&] { mla_decode_plan(ctx(), d.csr, d.cache, o2); }, Status::InvalidArgument,
                                 "num_heads"));
  o2 = opt, o2.q_dtype = DType::FP8_E4M3;
  EXPECT_TRUE(test::throws_error([&] { mla_decode_plan(ctx(), d.csr, d.cache, o2); }, Status::Unsupported, "q_dtype"));
  o2 = opt, o2.params = {{"LANES", 5}};
  EXPECT_TRUE(test::throws_error([&] { mla_decode_plan(ctx(), d.csr, d.cache, o2); }, Status::InvalidArgument, "LANES"));
  MlaCache c2 = d.cache;
  c2.dtype = DType::I32;
  EXPECT_TRUE(test::throws_error([&] { mla_decode_plan(ctx(), d.csr, c2, opt); }, Status::Unsupported, "dtype"));
  c2 = d.cache, c2.page_size = 12;
  EXPECT_TRUE(test::throws_error([&] { mla_decode_plan(ctx(), d.csr, c2, opt); }, Status::Unsupported, "page_size"));
  PagedCsr bad = d.csr;
  bad.kv_indices[0] = d.cache.num_pages + 5;
  EXPECT_TRUE(test::throws_error([&] { mla_decode_plan(ctx(), bad, d.cache, opt); }, Status::InvalidArgument,
                                 "kv_indices"));
  bad = d.csr, bad.qo_indptr = {0, 2, 3};
  EXPECT_TRUE(test::throws_error([&] { mla_decode_plan(ctx(), bad, d.cache, opt); }, Status::InvalidArgument,
                                 "exactly one"));
  bad = d.csr, bad.qo_indptr = {0, 1, 12};  // request 1: 11 rows > 9 keys
  EXPECT_TRUE(test::throws_error([&] { mla_extend_plan(ctx(), bad, d.cache, opt); }, Status::InvalidArgument, "qo"));

  MlaPlan plan = mla_decode_plan(ctx(), d.csr, d.cache, opt);
  MlaBuffers m2 = mb;
  DeviceBuffer small(ctx(), 64);
  m2.q_nope = small.get();
  EXPECT_TRUE(test::throws_error([&] { mla_run(ctx(), plan, m2); }, Status::InvalidArgument, "q_nope"));
  m2 = mb, m2.ckv = small.get();
  EXPECT_TRUE(test::throws_error([&] { mla_run(ctx(), plan, m2); }, Status::InvalidArgument, "ckv"));
  m2 = mb, m2.kv_scale = 0.0f;
  EXPECT_TRUE(test::throws_error([&] { mla_run(ctx(), plan, m2); }, Status::InvalidArgument, "kv_scale"));
  DeviceBuffer tiny(ctx(), 4);
  m2 = mb, m2.lse = tiny.get();
  EXPECT_TRUE(test::throws_error([&] { mla_run(ctx(), plan, m2); }, Status::InvalidArgument, "lse"));
  clFinish(ctx().cl_queue());
  EXPECT_EQ(test::download<uint8_t>(v.o, v.o.bytes()), before) << "a rejected call wrote the output";

  // append_latent: a host slot past the cache is rejected before anything is written.
  std::vector<int32_t> slots = {0, d.cache.num_pages * d.cache.page_size};
  DeviceBuffer sb = test::upload(slots);
  DeviceBuffer src(ctx(), 2 * Dc * 4), srk(ctx(), 2 * Dr * 4);
  AppendLatentArgs a;
  a.ckv = src.get(), a.kpe = srk.get(), a.src_dtype = DType::F32, a.slot_mapping = sb.get(), a.slot_dtype = DType::I32;
  a.num_tokens = 2, a.slot_mapping_host = slots.data(), a.ckv_cache = v.ckv.get(), a.kpe_cache = v.kpe.get();
  a.cache = d.cache;
  auto cbefore = test::download<uint8_t>(v.ckv, v.ckv.bytes());
  EXPECT_TRUE(test::throws_error([&] { append_latent(ctx(), a); }, Status::InvalidArgument, "slot"));
  EXPECT_EQ(test::download<uint8_t>(v.ckv, v.ckv.bytes()), cbefore);
}

}  // namespace
