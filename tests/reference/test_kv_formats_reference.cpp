// The int4 KV reference (reference/kv_formats_reference.hpp) against closed forms: groups whose
// scale rounds to a known f32 / f16 value, ties to even, all-zero and all-equal groups, the
// clamp to 15, and the nibble packing.
#include "reference/kv_formats_reference.hpp"

#include <gtest/gtest.h>

#include <vector>

using namespace clattn::ref;

namespace {

struct Quantised {
  std::vector<uint8_t> u;
  float scale = -1.0f, zero = -1.0f;
};

Quantised quantize(const std::vector<float>& x, bool f16) {
  Quantised q;
  q.u.assign(x.size(), 99);
  int4_quantize_group(x.data(), int(x.size()), f16, q.u.data(), &q.scale, &q.zero);
  return q;
}

// A group of G = 32: the listed values, the rest 0.
std::vector<float> group(std::initializer_list<float> head) {
  std::vector<float> x(32, 0.0f);
  size_t i = 0;
  for (float v : head) x[i++] = v;
  return x;
}

}  // namespace

// Range [-3, 4.5]: scale = 7.5 * fl(1/15) = 0.5 + 2.6e-8, which is 0.5 in f32 (half an ulp is
// 3e-8); zero = 3 / 0.5 = 6; x / 0.5 + 6 with ties to even (0.25 -> 0.5 -> 0, 0.75 -> 1.5 -> 2,
// 1.25 -> 2.5 -> 2).
TEST(Int4Reference, ScaleZeroAndTiesToEven) {
  const Quantised q = quantize(group({-3.0f, 4.5f, 0.25f, 0.75f, 1.25f, -0.25f, 1.0f}), false);
  EXPECT_EQ(q.scale, 0.5f);
  EXPECT_EQ(q.zero, 6.0f);
  const std::vector<uint8_t> want = {0, 15, 6, 8, 8, 6, 8};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(q.u[i], want[i]) << "element " << i;
  for (size_t i = want.size(); i < 32; ++i) EXPECT_EQ(q.u[i], 6) << "element " << i;  // x = 0 -> zero
  std::vector<double> back(32);
  int4_dequantize_group(q.u.data(), 32, q.scale, q.zero, back.data());
  EXPECT_EQ(back[0], -3.0);
  EXPECT_EQ(back[1], 4.5);
  EXPECT_EQ(back[3], 1.0);
  EXPECT_EQ(back[7], 0.0);  // 0 is always representable
}

// [-7.5, 7.5]: scale = 15 * fl(1/15) rounds to 1, zero = rne(7.5) = 8, and 7.5 -> rne(7.5) + 8
// = 16, clamped to 15; -7.5 -> -8 + 8 = 0.
TEST(Int4Reference, ClampsToFifteen) {
  const Quantised q = quantize(group({-7.5f, 7.5f}), false);
  EXPECT_EQ(q.scale, 1.0f);
  EXPECT_EQ(q.zero, 8.0f);
  EXPECT_EQ(q.u[0], 0);
  EXPECT_EQ(q.u[1], 15);
}

// f16 scales: range [0, 1] gives fl(1/15) = 0.06666667, nearest f16 1092 * 2^-14 =
// 0.066650390625; 1 / that = 15.004 -> 15, zero 0.
TEST(Int4Reference, F16ScaleIsRoundedBeforeQuantising) {
  const Quantised q = quantize(group({1.0f, 0.5f}), true);
  EXPECT_EQ(q.scale, 0.066650390625f);
  EXPECT_EQ(q.zero, 0.0f);
  EXPECT_EQ(q.u[0], 15);
  EXPECT_EQ(q.u[1], 8);  // 0.5 / 0.06665 = 7.502 -> 8
}

TEST(Int4Reference, ZeroAndEqualGroups) {
  const Quantised z = quantize(std::vector<float>(64, 0.0f), false);
  EXPECT_EQ(z.scale, 0.0f);
  EXPECT_EQ(z.zero, 0.0f);
  for (uint8_t u : z.u) EXPECT_EQ(u, 0);
  // All equal and positive: lo = 0, so every element is the top code (x / scale ~ 15).
  const Quantised p = quantize(std::vector<float>(32, 3.0f), false);
  EXPECT_EQ(p.zero, 0.0f);
  for (uint8_t u : p.u) EXPECT_EQ(u, 15);
  // All equal and negative: hi = 0, zero = 15 and every element the bottom code.
  const Quantised n = quantize(std::vector<float>(32, -3.0f), true);
  EXPECT_EQ(n.zero, 15.0f);
  for (uint8_t u : n.u) EXPECT_EQ(u, 0);
  // A scale below f16's smallest subnormal rounds to 0: the group stores zeros.
  const Quantised t = quantize(group({1e-9f}), true);
  EXPECT_EQ(t.scale, 0.0f);
  EXPECT_EQ(t.zero, 0.0f);
  EXPECT_EQ(t.u[0], 0);
}

TEST(Int4Reference, PacksLowNibbleFirst) {
  const uint8_t u[4] = {1, 2, 15, 4};
  uint8_t b[2] = {0, 0}, back[4] = {0, 0, 0, 0};
  int4_pack(u, 4, b);
  EXPECT_EQ(b[0], 0x21);
  EXPECT_EQ(b[1], 0x4f);
  int4_unpack(b, 4, back);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(back[i], u[i]);
}
