// Linear attention (GDN, simple GLA) against the double-precision recurrence in
// tests/reference: chunked prefill == token-by-token recurrence (outputs and final
// states) at chunk boundaries, decode, prefill + decode == longer prefill, ragged batches
// with mixed -1 / pooled initial states, untouched slots bit-identical, dtypes, head
// dims, pool helpers, and rejected inputs leaving everything untouched. On CPU devices the cpu
// rows (native, CLATTN_FORCE_VENDOR=cpu) run these through the cpu variant
// (cl_kernels/linear_cpu.clh); its own matrix and the check that it ran: test_linear_cpu.cpp.
//
// Tolerances. Inputs (q, k, v, initial states) are quantised to the device dtype with
// test::quantize before the reference sees them, so only f32 accumulation error and the
// final rounding of o / the stored state remain. Accumulation: dot products of <= 256
// terms of O(1) values and a state recurrence that decays (g < 0, beta <= 1, |k| <= 1),
// so errors stay O(1e-5..1e-4) relative even over 300 tokens; atol/rtol 2e-3 leaves
// 10x headroom. Outputs/states stored in f16 add 2^-11 relative rounding, bf16 2^-8:
// rtol gets twice the unit roundoff on top.
//
// Tensor-core prefill (variant nv_mma_sync, cl_kernels/linear_prefill_mma_nv.cl: chosen for
// f16/bf16 q/k/v with Dk <= 128 where the device runs NVIDIA inline PTX, or PoCL runs its
// emulation, see docs/linear.md). q and k enter the MMAs exactly (they are the io
// values); the state operand is split hi + lo (relative error ~u^2); what is rounded to the
// MMA type (unit roundoff u: 2^-8 bf16, 2^-11 f16 in this file's convention) are P (the
// decayed q.k scores) and D before O += P D, and D' = e^{G_L-G} D before S += K^T D'. Each
// product term then carries <= u relative error, so o and the state move by <= u sum |P||D|
// (resp. sum |k||D'|), a small multiple of their own size here (|v| <= 1, decaying state);
// errors carried into later chunks through the state shrink with the decay, and the
// roundings of many terms average out. atol = rtol = 2e-3 + 2u on o (bf16: 9.8e-3, f16:
// 3e-3; the rtol is the f32 kernel's own) and atol 2e-3 + 2u on the state (rtol adds the
// state dtype's 2u as above) are >= 3x the worst error measured under the emulation
// (TensorCorePrefillMatrix prints the share of the tolerance used).
#include "linear/linear_cases.hpp"

namespace clattn {
namespace {

using namespace lintest;
using test::ctx;

// Lengths around both chunk sizes in the database (32 on cpu rows, 64 elsewhere) and a
// long one; slots mixed with -1.
const std::vector<int> kLens = {1, 31, 32, 33, 63, 64, 65, 300};
const std::vector<int> kSlots = {3, -1, 0, 6, -1, 1, 5, 2};

TEST(Linear, GdnPrefillEqualsRecurrence) {
  Case c;
  c.gdn = true;
  c.Hqk = 1;
  c.Hv = 2;  // grouped value heads
  c.l2norm = true;
  c.logits = true;
  c.lens = kLens;
  c.slots = kSlots;
  check_case(c, false, 1, "gdn prefill f32");
}

TEST(Linear, GdnPrefillNoNormProbabilities) {
  Case c;
  c.gdn = true;
  c.Hqk = 2;
  c.Hv = 2;
  c.l2norm = false;
  c.logits = false;
  c.lens = {65, 0, 7};
  c.slots = {-1, 4, 2};  // an empty request leaves its slot untouched
  check_case(c, false, 2, "gdn prefill no-norm");
}

TEST(Linear, GlaPrefillEqualsRecurrence) {
  Case c;
  c.gdn = false;
  c.Hqk = 1;
  c.Hv = 1;
  c.Dv = 128;
  c.lens = kLens;
  c.slots = kSlots;
  check_case(c, false, 3, "gla prefill f32");
}

TEST(Linear, Decode) {
  for (bool gdn : {true, false}) {
    Case c;
    c.gdn = gdn;
    c.Hqk = 2;
    c.Hv = 4;
    c.lens = {1, 1, 1, 1, 1};
    c.slots = {2, -1, 7, 0, 4};
    check_case(c, true, gdn ? 4 : 5, gdn ? "gdn decode" : "gla decode");
  }
}

// Dtypes and head dims, sampled: each row runs prefill (ragged) and decode.
TEST(Linear, DtypesAndHeadDims) {
  struct Row {
    bool gdn;
    int Dk, Dv;
    DType io, st;
    bool constant;
  };
  const Row rows[] = {
      {true, 128, 128, DType::F16, DType::F32, false},
      {true, 64, 256, DType::BF16, DType::BF16, false},
      {false, 256, 64, DType::F16, DType::F16, false},
      {false, 64, 64, DType::BF16, DType::F32, true},  // lightning: constant per-head decay
  };
  uint64_t salt = 10;
  int i = 0;
  for (const Row& r : rows) {
    salt += 2;
    if (!test::row_runs_case(i++)) continue;
    const uint64_t first = salt - 2;
    Case c;
    c.gdn = r.gdn;
    c.Hqk = 1;
    c.Hv = 2;
    c.Dk = r.Dk;
    c.Dv = r.Dv;
    c.io = r.io;
    c.st = r.st;
    c.constant = r.constant;
    c.num_slots = 4;
    std::string what = std::string(r.gdn ? "gdn" : "gla") + " Dk=" + std::to_string(r.Dk) +
                       " Dv=" + std::to_string(r.Dv) + " io=" + dtype_name(r.io) + " state=" + dtype_name(r.st);
    c.lens = {70, 5};
    c.slots = {1, -1};
    check_case(c, false, first, what + " prefill");
    c.lens = {1, 1, 1};
    c.slots = {3, -1, 0};
    check_case(c, true, first + 1, what + " decode");
  }
}

// A prefill of L tokens then n decode steps == one prefill of L + n tokens.
TEST(Linear, PrefillThenDecodeEqualsLongerPrefill) {
  CLATTN_SEED_TRACE();
  for (bool gdn : {true, false}) {
    Case full;
    full.gdn = gdn;
    full.Hqk = 1;
    full.Hv = 2;
    const int n = 3;
    full.lens = {43, 70 + n};
    full.lens[0] += n;
    full.slots = {5, 1};
    test::Rng rng(gdn ? 20 : 21);
    Inputs in = make_inputs(full, rng);
    Result one = run_device(full, in, false);

    // Same tokens: prefill of the first L_i, then n decode steps, on the same pool.
    const int H = full.Hv, Dv = full.Dv, QK = full.Hqk * full.Dk;
    auto cu = cu_of(full.lens);
    Case pre = full;
    pre.lens = {full.lens[0] - n, full.lens[1] - n};
    Inputs pin;
    pin.pool = in.pool;
    auto take = [&](const std::vector<double>& src, int width, int t0, int cnt, std::vector<double>& dst) {
      dst.insert(dst.end(), src.begin() + size_t(t0) * width, src.begin() + size_t(t0 + cnt) * width);
    };
    for (int i = 0; i < 2; ++i) {
      take(in.q, QK, cu[i], pre.lens[i], pin.q);
      take(in.k, QK, cu[i], pre.lens[i], pin.k);
      take(in.v, H * Dv, cu[i], pre.lens[i], pin.v);
      take(in.g, H, cu[i], pre.lens[i], pin.g);
      take(in.beta_given, H, cu[i], pre.lens[i], pin.beta_given);
    }
    Result r = run_device(pre, pin, false);
    std::vector<double> pool = r.pool;  // exact: f32 state
    for (int step = 0; step < n; ++step) {
      Case dec = full;
      dec.lens = {1, 1};
      Inputs din;
      din.pool = pool;
      for (int i = 0; i < 2; ++i) {
        int t = cu[i] + pre.lens[i] + step;
        take(in.q, QK, t, 1, din.q);
        take(in.k, QK, t, 1, din.k);
        take(in.v, H * Dv, t, 1, din.v);
        take(in.g, H, t, 1, din.g);
        take(in.beta_given, H, t, 1, din.beta_given);
      }
      Result d = run_device(dec, din, true);
      pool = d.pool;
      for (int i = 0; i < 2; ++i) {
        int t = cu[i] + pre.lens[i] + step;
        std::vector<double> want(one.o.begin() + size_t(t) * H * Dv, one.o.begin() + size_t(t + 1) * H * Dv);
        std::vector<double> got(d.o.begin() + size_t(i) * H * Dv, d.o.begin() + size_t(i + 1) * H * Dv);
        EXPECT_TRUE(test::all_close(got, want, 2e-3, 2e-3, "decode step " + std::to_string(step)));
      }
    }
    EXPECT_TRUE(test::all_close(pool, one.pool, 2e-3, 2e-3, gdn ? "gdn final pool" : "gla final pool"));
  }
}

// Largest |got - want| / (tol + tol |want|): the share of the tolerance used.
double tol_used(const std::vector<double>& got, const std::vector<double>& want, double tol) {
  double w = 0;
  for (size_t i = 0; i < got.size() && i < want.size(); ++i)
    w = std::max(w, std::fabs(got[i] - want[i]) / (tol + tol * std::fabs(want[i])));
  return w;
}

// The tensor-core prefill asked for explicitly (PF_MMA = 1) over its matrix: GDN and GLA,
// bf16 / f16 q/k/v, f32 / bf16 / f16 state, Dk 64 / 128, Dv 64 / 128 / 256, chunks 16 / 32 /
// 64 with lengths 1, C-1, C, C+1, 5C+7 and an empty request, slots mixed with -1, grouped
// v-heads, l2norm / beta logits / probabilities / constant decay, 1..4 warps, the state
// operand with and without the hi + lo split. Where the device can run the variant, the
// result must also differ from the f32 kernel's (PF_MMA = 0), so a failed build that fell
// back silently fails here. Elsewhere this runs the f32 kernel at its own tolerance.
TEST(Linear, TensorCorePrefillMatrix) {
  struct Row {
    bool gdn;
    int Dk, Dv;
    DType io, st;
    int C, dvt, split;
    bool norm, logits, constant;
    int Hqk, Hv;
  };
  const Row rows[] = {
      {true, 128, 128, DType::BF16, DType::F32, 32, 64, 1, true, true, false, 1, 2},
      {true, 64, 64, DType::F16, DType::BF16, 32, 64, 1, false, false, false, 2, 2},
      {false, 128, 128, DType::BF16, DType::F32, 32, 64, 1, false, false, false, 1, 2},
      {false, 64, 128, DType::F16, DType::F16, 32, 64, 1, false, false, true, 1, 1},
      {true, 128, 64, DType::F16, DType::F32, 16, 32, 1, true, false, false, 1, 1},
      {true, 64, 256, DType::BF16, DType::F32, 64, 16, 0, true, true, false, 1, 2},
      {false, 128, 64, DType::BF16, DType::BF16, 64, 32, 1, false, false, false, 2, 4},
  };
  const bool dev = mma_device();
  uint64_t salt = 100;
  int i = 0;
  for (const Row& r : rows) {
    ++salt;
    if (!test::row_runs_case(i++)) continue;
    Case c;
    c.gdn = r.gdn, c.Dk = r.Dk, c.Dv = r.Dv, c.io = r.io, c.st = r.st;
    c.l2norm = r.norm, c.logits = r.logits, c.constant = r.constant, c.Hqk = r.Hqk, c.Hv = r.Hv;
    // CPU_KERNEL 0: where the tensor-core kernel cannot run, the portable f32 kernel (not the
    // cpu variant, which test_linear_cpu.cpp covers) runs the matrix.
    c.params = {{"PF_MMA", 1}, {"PF_MMA_C", r.C}, {"PF_MMA_DVT", r.dvt}, {"PF_MMA_SPLIT", r.split}, {"CPU_KERNEL", 0}};
    c.lens = {1, r.C - 1, r.C, r.C + 1, 0, 5 * r.C + 7};
    c.slots = {3, -1, 0, 6, 2, 1};
    const std::string what = std::string(r.gdn ? "gdn" : "gla") + " Dk=" + std::to_string(r.Dk) +
                             " Dv=" + std::to_string(r.Dv) + " io=" + dtype_name(r.io) + " state=" +
                             dtype_name(r.st) + " C=" + std::to_string(r.C) + " DVT=" + std::to_string(r.dvt) +
                             " split=" + std::to_string(r.split);
    SCOPED_TRACE(what);
    CLATTN_SEED_TRACE();
    test::Rng rng(salt - 1);
    Inputs in = make_inputs(c, rng);
    const bool mma = uses_mma(c, false);
    EXPECT_EQ(mma, dev) << what;
    Result got = run_device(c, in, false), want = run_reference(c, in);
    check(c, in, got, want, what + (mma ? " [nv_mma_sync]" : ""), mma);
    if (mma) {
      const double tol = 2e-3 + 2 * unit_roundoff(r.io);
      std::vector<double> gs, ws;
      for (int s : c.slots)
        if (s >= 0) {
          const size_t se = c.slot_elems();
          gs.insert(gs.end(), got.pool.begin() + s * se, got.pool.begin() + (s + 1) * se);
          ws.insert(ws.end(), want.pool.begin() + s * se, want.pool.begin() + (s + 1) * se);
        }
      std::printf("[ mma    ] %s: tolerance used o %.3f, state %.3f\n", what.c_str(), tol_used(got.o, want.o, tol),
                  tol_used(gs, ws, tol));
      Case f = c;
      f.params["PF_MMA"] = 0;
      Result ref32 = run_device(f, in, false);
      EXPECT_NE(ref32.o, got.o) << what << ": PF_MMA=1 gave the f32 kernel's bits (tensor-core kernel not run?)";
    }
    if (::testing::Test::HasFailure()) break;
  }
}

TEST(Linear, PoolHelpers) {
  Case c;
  c.num_slots = 5;
  const size_t se = c.slot_elems();
  std::vector<float> init(se * c.num_slots);
  for (size_t i = 0; i < init.size(); ++i) init[i] = float(i % 977) + 1.f;
  auto pool = test::upload(init);
  LinearStatePool p{pool.get(), c.num_slots, DType::F32};
  const int32_t z[] = {1, 3};
  linear_zero_slots(ctx(), c.cfg(), p, z, 2);
  linear_copy_slot(ctx(), c.cfg(), p, 4, 0);
  ctx().finish();
  auto got = test::download<float>(pool, init.size());
  for (int s = 0; s < c.num_slots; ++s)
    for (size_t e = 0; e < se; ++e) {
      float want = (s == 1 || s == 3) ? 0.f : s == 0 ? init[4 * se + e] : init[s * se + e];
      ASSERT_EQ(got[s * se + e], want) << "slot " << s << " elem " << e;
    }
  EXPECT_TRUE(test::throws_error([&] { linear_copy_slot(ctx(), c.cfg(), p, 0, 5); }, Status::InvalidArgument,
                                 "dst = 5"));
  const int32_t bad[] = {0, -1};
  EXPECT_TRUE(test::throws_error([&] { linear_zero_slots(ctx(), c.cfg(), p, bad, 2); }, Status::InvalidArgument,
                                 "slots[1] = -1"));
}

// Rejected calls throw naming the argument and index, and change nothing.
TEST(Linear, BadInputsLeaveEverythingUntouched) {
  Case c;
  c.lens = {3, 4};
  c.slots = {1, 2};
  c.num_slots = 3;
  test::Rng rng(30);
  Inputs in = make_inputs(c, rng);
  const int T = c.T();
  auto q = test::upload(test::pack(in.q, c.io));
  auto k = test::upload(test::pack(in.k, c.io));
  auto v = test::upload(test::pack(in.v, c.io));
  auto g = test::upload(to_f32(in.g));
  auto beta = test::upload(to_f32(in.beta_given));
  const std::vector<float> sentinel_pool(size_t(c.num_slots) * c.slot_elems(), 42.f);
  const std::vector<float> sentinel_o(size_t(T) * c.Hv * c.Dv, -7.f);
  auto pool = test::upload(sentinel_pool);
  auto o = test::upload(sentinel_o);
  auto small = test::upload(std::vector<float>(4, 0.f));
  std::vector<int32_t> idx = {1, 2}, cu = {0, 3, 7};
  auto idx_d = test::upload(idx);
  auto cu_d = test::upload(cu);
  LinearTensors t{q.get(), k.get(), v.get(), g.get(), beta.get(), o.get()};
  LinearStatePool p{pool.get(), c.num_slots, DType::F32};
  auto batch = [&] {
    LinearBatch b;
    b.batch_size = 2;
    b.state_indices = idx.data();
    b.state_indices_dev = idx_d.get();
    b.cu_seqlens = cu.data();
    b.cu_seqlens_dev = cu_d.get();
    b.num_tokens = T;
    return b;
  };
  auto expect_reject = [&](const std::string& needle, auto mutate, bool decode = false) {
    LinearConfig cfg = c.cfg();
    LinearTensors tt = t;
    LinearStatePool pp = p;
    LinearBatch b = batch();
    std::vector<int32_t> i2 = idx, c2 = cu;
    b.state_indices = i2.data();
    b.cu_seqlens = c2.data();
    mutate(cfg, tt, pp, b, i2, c2);
    EXPECT_TRUE(test::throws_error(
        [&] {
          if (decode) gdn_decode(ctx(), cfg, tt, pp, b);
          else if (cfg.l2norm_qk && !c.gdn) gla_prefill(ctx(), cfg, tt, pp, b);
          else gdn_prefill(ctx(), cfg, tt, pp, b);
        },
        Status::InvalidArgument, needle))
        << needle;
  };
  using C = LinearConfig;
  using Ts = LinearTensors;
  using P = LinearStatePool;
  using Bt = LinearBatch;
  using V = std::vector<int32_t>;
  expect_reject("state_indices[1] = 3 out of range", [](C&, Ts&, P&, Bt&, V& i, V&) { i[1] = 3; });
  expect_reject("state_indices[0] = -2 out of range", [](C&, Ts&, P&, Bt&, V& i, V&) { i[0] = -2; });
  expect_reject("state_indices[1] = 1 duplicates state_indices[0]", [](C&, Ts&, P&, Bt&, V& i, V&) { i[1] = 1; });
  expect_reject("cu_seqlens[2] = 2 < cu_seqlens[1] = 3", [](C&, Ts&, P&, Bt& b, V&, V& cc) {
    cc[2] = 2;
    b.num_tokens = 2;
  });
  expect_reject("cu_seqlens[0] = 1", [](C&, Ts&, P&, Bt&, V&, V& cc) { cc[0] = 1; });
  expect_reject("cu_seqlens[2] = 7 != num_tokens = 6", [](C&, Ts&, P&, Bt& b, V&, V&) { b.num_tokens = 6; });
  expect_reject("head_dim_k = 96 unsupported", [](C& cf, Ts&, P&, Bt&, V&, V&) { cf.head_dim_k = 96; });
  expect_reject("head_dim_v = 32 unsupported", [](C& cf, Ts&, P&, Bt&, V&, V&) { cf.head_dim_v = 32; });
  expect_reject("num_v_heads = 3", [](C& cf, Ts&, P&, Bt&, V&, V&) {
    cf.num_qk_heads = 2;
    cf.num_v_heads = 3;
  });
  expect_reject("q: buffer has 16 bytes", [&](C&, Ts& tt, P&, Bt&, V&, V&) { tt.q = small.get(); });
  expect_reject("state: buffer has", [&](C&, Ts&, P& pp, Bt&, V&, V&) { pp.num_slots = 4; });
  expect_reject("beta: null buffer", [](C&, Ts& tt, P&, Bt&, V&, V&) { tt.beta = nullptr; });
  expect_reject("dtype = i32 unsupported", [](C& cf, Ts&, P&, Bt&, V&, V&) { cf.dtype = DType::I32; });
  expect_reject("state_indices[1] = 5 out of range", [](C&, Ts&, P&, Bt&, V& i, V&) { i[1] = 5; }, true);
  EXPECT_TRUE(test::throws_error(
      [&] {
        LinearConfig cfg = c.cfg();
        cfg.l2norm_qk = true;
        LinearBatch b = batch();
        gla_prefill(ctx(), cfg, t, p, b);
      },
      Status::InvalidArgument, "l2norm_qk is a Gated DeltaNet option"));
  ctx().finish();
  EXPECT_EQ(test::download<float>(pool, sentinel_pool.size()), sentinel_pool);
  EXPECT_EQ(test::download<float>(o, sentinel_o.size()), sentinel_o);
}

}  // namespace
}  // namespace clattn
