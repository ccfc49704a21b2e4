// The compute ceilings benchmarks divide by, at tiny sizes: the FP32 FMA-loop peak and the
// CLBlast SGEMM (not available, with the reason, when clattn was built without CLBlast), and
// their argument checks.
#include "support/test_support.hpp"

using namespace clattn;

TEST(Ceilings, FmaPeakIsPositive) {
  FmaPeakOptions o;
  o.target_ms = 2, o.samples = 2, o.groups_per_cu = 1;
  const ComputeCeiling c = measure_fma_peak(test::ctx(), o);
  EXPECT_TRUE(c.available);
  EXPECT_GT(c.tflops, 0.0);
  EXPECT_NE(c.method.find("fma_peak.cl"), std::string::npos) << c.method;
}

TEST(Ceilings, FmaPeakVectorWidths) {
  for (int vec : {1, 4}) {
    FmaPeakOptions o;
    o.vec = vec, o.chains = 2, o.unroll = 2, o.wg = 16, o.groups_per_cu = 1, o.target_ms = 1, o.samples = 1;
    EXPECT_GT(measure_fma_peak(test::ctx(), o).tflops, 0.0) << "vec " << vec;
  }
}

TEST(Ceilings, FmaPeakRejectsBadOptions) {
  FmaPeakOptions o;
  o.vec = 3;
  EXPECT_TRUE(test::throws_error([&] { measure_fma_peak(test::ctx(), o); }, Status::InvalidArgument, "vec = 3"));
  o = FmaPeakOptions{};
  o.samples = 0;
  EXPECT_TRUE(test::throws_error([&] { measure_fma_peak(test::ctx(), o); }, Status::InvalidArgument, "samples"));
}

TEST(Ceilings, SgemmIsPositiveOrSaysWhyNot) {
  const ComputeCeiling c = measure_sgemm(test::ctx(), 64, 1);
  if (c.available) {
    EXPECT_GT(c.tflops, 0.0);
    EXPECT_NE(c.method.find("CLBlast SGEMM 64x64x64"), std::string::npos) << c.method;
  } else {
    EXPECT_NE(c.method.find("CLBlast"), std::string::npos) << c.method;
  }
  EXPECT_TRUE(test::throws_error([] { measure_sgemm(test::ctx(), 0); }, Status::InvalidArgument, "n = 0"));
}
