// The Intel matrix-engine variant (intel_dpas, cl_kernels/extend_dpas_intel.cl) against the
// double-precision reference. Registered with CLATTN_FORCE_VENDOR=intel (the intel rows ask
// for the variant: DPAS=1) and CLATTN_EMULATE=cl_intel_subgroup_matrix_multiply_accumulate,
// so that on a device without DPAS (PoCL in CI) the kernel runs with its emulation header
// (intel_dpas_emul.clh, the extension's documented semantics). Every run asserts the plan's
// variant: a kernel that fails to build cannot hide behind the generic fallback.
//
// Both sub-group sizes: 16 (the intel vendor row, Xe-HPC / Xe2) and 8 with 4 column groups
// (the xe-hpg row); f16 and bf16 KV; paged (page sizes 1 and 16) and ragged; causal and not;
// GQA groups 2..4; head dims 64, 128, 80 (column groups lowered) and 256 (the d256 rows);
// cached prefixes longer than a key tile and requests of several row tiles; soft cap, window,
// sinks, custom masks, LSE. Tolerances: the matrix-unit ones (extend_cases.hpp).
#include "extend_cases.hpp"

namespace {

// The xe-hpg row's sub-group shape (on any device: the emulation takes either size).
const std::map<std::string, int> kSg8 = {{"DPAS_SG", 8}, {"DPAS_CG", 4}};

// Head dims 64 and 128 each meet both sub-group sizes and both dtypes, in four programs (PoCL
// spends seconds compiling each emulated one).
int head_dim(int sg, DType kv) { return (sg == 16) == (kv == DType::F16) ? 128 : 64; }

void expect_dpas(const Case& c, uint64_t salt) {
  Batch b = build(c, salt);
  DevRun r = run(b);
  EXPECT_EQ(r.plan.variant, "intel_dpas") << c.describe() << " opts=" << r.plan.kernel_options;
  EXPECT_EXTEND_OK(b, r);
}

}  // namespace

TEST(ExtendDpas, SubgroupSizesDtypesAndKvForms) {
  CLATTN_SEED_TRACE();
  int n = 0;
  for (int sg : {16, 8})
    for (DType kv : {DType::F16, DType::BF16})
      for (int form = 0; form < 3; ++form) {  // paged, page size 16; paged, page size 1; ragged
        Case c;
        c.qo = {5, 13, 1};
        c.prefix = {70, 0, 17};  // 75 keys: two 64-key tiles; 13 x G rows: two row tiles
        c.Hkv = 2, c.G = 2 + n % 3;
        c.D = head_dim(sg, kv);
        c.kv = c.qd = c.od = kv;
        c.P = form == 1 ? 1 : 16;
        c.meta = form == 2 ? Meta::Ragged : Meta::Csr;
        c.causal = (n / 2) % 2 == 0;
        if (sg == 8) c.params = kSg8;
        expect_dpas(c, 100 + uint64_t(n));
        ++n;
      }
}

TEST(ExtendDpas, CapWindowSinksMasksAndPageTable) {
  CLATTN_SEED_TRACE();
  int n = 0;
  for (int sg : {16, 8}) {
    Case c;
    c.qo = {9, 20};
    c.prefix = {40, 3};
    c.Hkv = 1, c.G = 4, c.P = 16;
    c.kv = DType::BF16, c.qd = DType::F16, c.od = DType::F32;
    c.D = head_dim(sg, c.kv);
    c.cap = 30.0, c.window = 21, c.sinks = true;
    c.meta = Meta::PageTable;
    if (sg == 8) c.params = kSg8;
    expect_dpas(c, 200 + uint64_t(n++));
    // A tree mask, not causal, with the window, on a CSR.
    c.cap = 0.0, c.sinks = false, c.causal = false;
    c.mask = Mask::Tree, c.meta = Meta::Csr;
    c.kv = DType::F16, c.od = DType::F16;
    c.D = head_dim(sg, c.kv);
    expect_dpas(c, 200 + uint64_t(n++));
  }
}

TEST(ExtendDpas, OtherHeadDims) {
  CLATTN_SEED_TRACE();
  Case c;
  c.qo = {6, 3};
  c.prefix = {20, 0};
  c.Hkv = 2, c.G = 2, c.D = 80, c.P = 16;
  c.kv = c.qd = c.od = DType::F16;
  expect_dpas(c, 300);  // D = 80: one column group of 16 (80 / 32 is not whole)
  c.params = kSg8;
  expect_dpas(c, 301);  // 2 column groups of 8
  // D = 256: the d256 rows' 4 column groups (256 work-items).
  c.params = {};
  c.D = 256, c.kv = c.qd = c.od = DType::BF16;
  expect_dpas(c, 302);
}

TEST(ExtendDpas, VariantOptionForcesAndFallsBack) {
  CLATTN_SEED_TRACE();
  Case c;
  c.qo = {4};
  c.prefix = {9};
  c.kv = c.qd = c.od = DType::F16;
  c.D = head_dim(16, c.kv);
  // Forced with the parameter off; the generic kernel when asked for.
  c.variant = "intel_dpas", c.params = {{"DPAS", 0}};
  expect_dpas(c, 400);
  c.variant = "generic";
  Batch b = build(c, 401);
  DevRun r = run(b);
  EXPECT_EQ(r.plan.variant, "generic");
  EXPECT_EXTEND_OK(b, r);
  // fp8 KV: not a DPAS source type here; forced, it falls back to the generic kernel.
  c.variant = "intel_dpas", c.params = {};
  c.kv = DType::FP8_E4M3;
  Batch b8 = build(c, 402);
  DevRun r8 = run(b8);
  EXPECT_EQ(r8.plan.variant, "generic");
  EXPECT_EXTEND_OK(b8, r8);
}
