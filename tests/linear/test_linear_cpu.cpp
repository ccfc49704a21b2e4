// The CPU variant of the linear-attention kernels (cl_kernels/linear_cpu.clh, variant "cpu",
// parameter CPU_KERNEL) against the double-precision recurrence (tests/reference), asked for
// explicitly (CPU_KERNEL = 1) over its matrix: GDN and GLA, q/k/v/o and state in f32 / f16 /
// bf16, Dk and Dv in 64 / 128 / 256, L2 norm, beta logits / probabilities, constant decay,
// grouped v-heads, slots mixed with -1 and empty requests, ragged lengths around the chunk
// (1, C-1, C, C+1, 2C+5), vector widths 4 / 8 / 16 and the tile parameters (decode slice;
// prefill chunk, slice, register tile), device index faults; and that it is what runs on a
// CPU device by default (the cpu rows) and that the host's local-memory figure for the
// prefill is the driver's. Tolerances: test_linear.cpp's (f32 arithmetic throughout).
// Internals: the variant each call ran comes from ops::recent_builds().
#include "backends/dispatch/variant.hpp"
#include "linear/linear_cases.hpp"

namespace clattn {
namespace {

using namespace lintest;
using test::ctx;

std::string op_name(const Case& c, bool decode) {
  return std::string(c.gdn ? "gdn" : "gla") + (decode ? "_decode" : "_prefill");
}

// The variant the last call of `op` ran (each call records its choice through
// select_and_build).
std::string last_variant(const std::string& op) {
  const auto recs = ops::recent_builds();
  return !recs.empty() && recs.back().op == op ? recs.back().variant : "none recorded";
}

std::string describe(const Case& c) {
  std::string s = std::string(c.gdn ? "gdn" : "gla") + " Dk=" + std::to_string(c.Dk) + " Dv=" + std::to_string(c.Dv) +
                  " io=" + dtype_name(c.io) + " state=" + dtype_name(c.st) + " Hqk=" + std::to_string(c.Hqk) +
                  " Hv=" + std::to_string(c.Hv) + (c.gdn && c.l2norm ? " l2norm" : "") +
                  (c.gdn && c.logits ? " beta-logits" : "") + (c.constant ? " constant-decay" : "");
  for (auto& [k, v] : c.params) s += " " + k + "=" + std::to_string(v);
  return s;
}

// Runs `c` (CPU_KERNEL = 1 in its params) against the reference and checks that the cpu
// variant ran.
void check_cpu(const Case& c, bool decode, uint64_t salt) {
  const std::string what = describe(c) + (decode ? " decode" : " prefill");
  SCOPED_TRACE(what);
  CLATTN_SEED_TRACE();
  test::Rng rng(salt);
  Inputs in = make_inputs(c, rng);
  Result got = run_device(c, in, decode);
  EXPECT_EQ(last_variant(op_name(c, decode)), "cpu") << what;
  check(c, in, got, run_reference(c, in), what);
}

Case make(bool gdn, int Dk, int Dv, DType io, DType st, bool norm, bool logits, bool constant, int Hqk, int Hv,
          std::map<std::string, int> params) {
  Case c;
  c.gdn = gdn, c.Dk = Dk, c.Dv = Dv, c.io = io, c.st = st, c.l2norm = norm, c.logits = logits;
  c.constant = constant, c.Hqk = Hqk, c.Hv = Hv;
  c.params = std::move(params);
  c.params["CPU_KERNEL"] = 1;
  c.params["PF_MMA"] = 0;  // the tensor-core prefill ranks first where a device has it (NVIDIA)
  return c;
}

TEST(LinearCpu, DecodeMatrix) {
  using D = DType;
  const Case rows[] = {
      make(true, 128, 128, D::F32, D::F32, true, true, false, 1, 2, {}),
      make(true, 64, 256, D::BF16, D::BF16, false, false, false, 2, 2, {{"VW", 16}, {"DEC_CPU_DVT", 256}}),
      make(true, 256, 64, D::F16, D::F32, true, false, false, 1, 4, {{"VW", 8}, {"DEC_CPU_DVT", 16}}),
      make(true, 64, 128, D::F16, D::F16, true, true, true, 1, 2, {{"VW", 4}, {"DEC_CPU_DVT", 128}}),
      make(false, 64, 64, D::BF16, D::F16, false, false, true, 1, 2, {{"VW", 4}, {"DEC_CPU_DVT", 64}}),
      make(false, 256, 128, D::F32, D::BF16, false, false, false, 2, 4, {{"VW", 16}, {"DEC_CPU_DVT", 32}}),
      make(false, 128, 256, D::F16, D::F32, false, false, false, 1, 1, {}),
  };
  uint64_t salt = 200;
  for (Case c : rows) {
    c.lens = {1, 1, 1, 1, 1};
    c.slots = {2, -1, 7, 0, 4};
    check_cpu(c, true, salt++);
    if (::testing::Test::HasFailure()) break;
  }
}

TEST(LinearCpu, PrefillMatrix) {
  using D = DType;
  auto tile = [](int vw, int C, int dvt, int mr, int mv) {
    return std::map<std::string, int>{
        {"VW", vw}, {"PF_CPU_C", C}, {"PF_CPU_DVT", dvt}, {"PF_CPU_MR", mr}, {"PF_CPU_MV", mv}};
  };
  const Case rows[] = {
      make(true, 128, 128, D::BF16, D::F32, true, true, false, 1, 2, {}),  // the cpu rows' tile
      make(true, 64, 64, D::F32, D::BF16, false, false, false, 2, 2, tile(16, 16, 16, 8, 1)),
      make(true, 256, 128, D::F16, D::F16, true, false, false, 1, 2, tile(8, 64, 128, 2, 2)),
      make(true, 64, 256, D::F32, D::F32, false, true, true, 1, 1, tile(4, 16, 32, 1, 4)),
      make(true, 128, 64, D::F32, D::F32, true, true, false, 1, 2, tile(16, 128, 64, 4, 4)),
      make(false, 128, 64, D::BF16, D::BF16, false, false, false, 1, 2, tile(16, 32, 64, 8, 2)),
      make(false, 64, 128, D::F16, D::F32, false, false, true, 2, 4, tile(8, 64, 64, 4, 8)),
      make(false, 256, 256, D::F32, D::F16, false, false, false, 1, 1, tile(16, 32, 256, 1, 1)),
  };
  uint64_t salt = 300;
  for (Case c : rows) {
    auto it = c.params.find("PF_CPU_C");
    const int C = it != c.params.end() ? it->second : 16;  // the cpu rows' chunk
    c.lens = {1, C - 1, C, C + 1, 0, 2 * C + 5};
    c.slots = {3, -1, 0, 6, 2, 1};
    check_cpu(c, false, salt++);
    if (::testing::Test::HasFailure()) break;
  }
}

// State indices outside the pool on the device (the host copies valid): such a request runs
// from a zero state and writes nothing, and the fault word says so; cu_seqlens past the
// tokens are clamped. Every other request is exact.
TEST(LinearCpu, DeviceIndexFaults) {
  for (bool gdn : {true, false})
    for (bool decode : {true, false}) {
      Case c = make(gdn, 64, 64, DType::F32, DType::F32, gdn, false, false, 1, 2, {});
      c.num_slots = 4;
      c.lens = decode ? std::vector<int>{1, 1, 1} : std::vector<int>{5, 9, 3};
      c.slots = {1, 3, 0};
      c.dev_slots = {1, 4, -9};  // requests 1 and 2: outside the pool on the device
      const std::string what = describe(c) + (decode ? " decode" : " prefill");
      SCOPED_TRACE(what);
      CLATTN_SEED_TRACE();
      test::Rng rng(gdn ? 400 : 401);
      Inputs in = make_inputs(c, rng);
      ctx().device_faults(true);
      Result got = run_device(c, in, decode);
      EXPECT_EQ(last_variant(op_name(c, decode)), "cpu");
      EXPECT_EQ(ctx().device_faults(true), uint32_t(FaultStateIndex));
      Case ref = c;
      ref.slots = {1, -1, -1};  // what the kernel runs
      check(ref, in, got, run_reference(ref, in), what);
      if (!decode) {  // a device cu_seqlens past num_tokens: clamped, nothing written past o
        c.dev_slots.clear();
        c.dev_cu = {0, 5, 14, 1 << 20};
        run_device(c, in, decode);
        EXPECT_EQ(ctx().device_faults(true), uint32_t(FaultTokenRange));
      }
    }
}

// With the database's parameters a CPU device runs the cpu variant (the cpu vendor rows ask
// for it); the prefill's local arrays are what the host estimated (PoCL reports __local
// arrays exactly).
TEST(LinearCpu, ChosenOnCpuDevices) {
  if (!ctx().profile().is_cpu) GTEST_SKIP() << "not a CPU device";
  const char* forced = std::getenv("CLATTN_FORCE_VENDOR");
  if (forced && std::string(forced) != "cpu") GTEST_SKIP() << "CLATTN_FORCE_VENDOR=" << forced;
  for (bool gdn : {true, false})
    for (bool decode : {true, false}) {
      Case c;
      c.gdn = gdn;
      c.lens = decode ? std::vector<int>{1, 1} : std::vector<int>{40, 7};
      c.slots = {0, -1};
      test::Rng rng(500);
      Inputs in = make_inputs(c, rng);
      Result got = run_device(c, in, decode);
      const auto recs = ops::recent_builds();
      ASSERT_FALSE(recs.empty());
      EXPECT_EQ(recs.back().op, op_name(c, decode));
      EXPECT_EQ(recs.back().variant, "cpu");
      // (A driver whose figure goes through a quirk, rusticl's doubled one, is held to the
      // estimate as an upper bound: its compiler may drop an array the estimate counts.)
      if (!decode && ctx().profile().kernel_local_mem_overcount == 1)
        EXPECT_EQ(recs.back().estimate, recs.back().driver) << "prefill local bytes";
      else if (!decode)
        EXPECT_GE(recs.back().estimate, recs.back().driver) << "prefill local bytes";
      check(c, in, got, run_reference(c, in), op_name(c, decode));
    }
}

}  // namespace
}  // namespace clattn
