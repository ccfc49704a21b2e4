// Helpers of the reference's own tests (test_reference, test_sparse_reference).
#pragma once
#include <gtest/gtest.h>

#include <cstddef>
#include <random>
#include <vector>

namespace clattn::ref_test {

// Deterministic N(0, 1) samples.
inline std::vector<double> randv(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> nd;
  std::vector<double> x(n);
  for (double& e : x) e = nd(rng);
  return x;
}

inline void expect_near_vec(const double* a, const double* b, size_t n, double tol = 1e-12) {
  for (size_t i = 0; i < n; ++i) EXPECT_NEAR(a[i], b[i], tol) << "index " << i;
}

}  // namespace clattn::ref_test
