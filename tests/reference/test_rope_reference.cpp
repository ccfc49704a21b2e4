// Self-test of the RoPE reference against closed forms: position 0 is the identity, a rotation
// keeps each pair's norm, rotating by p then by p' is rotating by p + p' (relative-position
// property of the dot product), GPT-J is NeoX under the interleaving permutation, partial
// rotary leaves the tail alone, and the cos/sin row form equals the theta form it was built from.
#include "reference/rope_reference.hpp"

#include <gtest/gtest.h>
#include <cmath>
#include <random>
#include <vector>

using namespace clattn::ref;

namespace {
std::vector<double> randv(std::mt19937& g, int n) {
  std::uniform_real_distribution<double> u(-2.0, 2.0);
  std::vector<double> v(size_t(n), 0.0);
  for (double& x : v) x = u(g);
  return v;
}
double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}
}  // namespace

TEST(RopeReference, PositionZeroIsIdentity) {
  std::mt19937 g(1);
  for (bool gptj : {false, true}) {
    auto x = randv(g, 64), y = x;
    rope_row(y.data(), 64, 64, gptj, 0, 10000.0, 1.0, nullptr);
    for (int i = 0; i < 64; ++i) EXPECT_DOUBLE_EQ(y[i], x[i]);
  }
}

TEST(RopeReference, KnownAngleAndPairs) {
  // D = R = 4, theta = 16: pair 0 angle = p, pair 1 angle = p / 16^(2/4) = p / 4.
  const double p = 3.0;
  std::vector<double> x = {1.0, 2.0, 3.0, 4.0};
  auto n = x;
  rope_row(n.data(), 4, 4, false, 3, 16.0, 1.0, nullptr);  // NeoX pairs (0,2), (1,3)
  EXPECT_NEAR(n[0], 1.0 * std::cos(p) - 3.0 * std::sin(p), 1e-15);
  EXPECT_NEAR(n[2], 3.0 * std::cos(p) + 1.0 * std::sin(p), 1e-15);
  EXPECT_NEAR(n[1], 2.0 * std::cos(p / 4) - 4.0 * std::sin(p / 4), 1e-15);
  EXPECT_NEAR(n[3], 4.0 * std::cos(p / 4) + 2.0 * std::sin(p / 4), 1e-15);
  auto j = x;
  rope_row(j.data(), 4, 4, true, 3, 16.0, 1.0, nullptr);  // GPT-J pairs (0,1), (2,3)
  EXPECT_NEAR(j[0], 1.0 * std::cos(p) - 2.0 * std::sin(p), 1e-15);
  EXPECT_NEAR(j[1], 2.0 * std::cos(p) + 1.0 * std::sin(p), 1e-15);
  EXPECT_NEAR(j[2], 3.0 * std::cos(p / 4) - 4.0 * std::sin(p / 4), 1e-15);
  EXPECT_NEAR(j[3], 4.0 * std::cos(p / 4) + 3.0 * std::sin(p / 4), 1e-15);
  // scale 2 halves the angles.
  auto s = x;
  rope_row(s.data(), 4, 4, false, 6, 16.0, 2.0, nullptr);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(s[i], n[i], 1e-14);
}

TEST(RopeReference, RelativePositionAndNorms) {
  std::mt19937 g(2);
  for (bool gptj : {false, true}) {
    auto q = randv(g, 128), k = randv(g, 128);
    auto q1 = q, k1 = k, q2 = q, k2 = k;
    rope_row(q1.data(), 128, 128, gptj, 1000, 500000.0, 1.0, nullptr);
    rope_row(k1.data(), 128, 128, gptj, 990, 500000.0, 1.0, nullptr);
    rope_row(q2.data(), 128, 128, gptj, 15, 500000.0, 1.0, nullptr);
    rope_row(k2.data(), 128, 128, gptj, 5, 500000.0, 1.0, nullptr);
    EXPECT_NEAR(dot(q1, k1), dot(q2, k2), 1e-9);  // depends on 1000 - 990 = 15 - 5 only
    EXPECT_NEAR(dot(q1, q1), dot(q, q), 1e-9);
  }
}

TEST(RopeReference, GptjIsNeoxUnderInterleaving) {
  std::mt19937 g(3);
  const int D = 64;
  auto x = randv(g, D);
  // perm: GPT-J dim 2i <-> NeoX dim i, 2i + 1 <-> i + D/2
  std::vector<double> xn(D);
  for (int i = 0; i < D / 2; ++i) xn[i] = x[2 * i], xn[i + D / 2] = x[2 * i + 1];
  auto xj = x;
  rope_row(xj.data(), D, D, true, 77, 10000.0, 1.0, nullptr);
  rope_row(xn.data(), D, D, false, 77, 10000.0, 1.0, nullptr);
  for (int i = 0; i < D / 2; ++i) {
    EXPECT_NEAR(xj[2 * i], xn[i], 1e-12);
    EXPECT_NEAR(xj[2 * i + 1], xn[i + D / 2], 1e-12);
  }
}

TEST(RopeReference, PartialRotaryAndCacheRow) {
  std::mt19937 g(4);
  const int D = 128, R = 32;
  for (bool gptj : {false, true}) {
    auto x = randv(g, D), a = x, b = x;
    rope_row(a.data(), D, R, gptj, 4321, 10000.0, 8.0, nullptr);
    for (int i = R; i < D; ++i) EXPECT_EQ(a[i], x[i]);
    std::vector<double> row(R);
    for (int i = 0; i < R / 2; ++i) {
      const double ang = 4321.0 / 8.0 * std::pow(10000.0, -2.0 * i / R);
      row[i] = std::cos(ang), row[R / 2 + i] = std::sin(ang);
    }
    rope_row(b.data(), D, R, gptj, 4321, 0.0, 0.0, row.data());
    for (int i = 0; i < D; ++i) EXPECT_NEAR(a[i], b[i], 1e-12);
  }
}
