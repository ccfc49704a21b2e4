// Self-test of the int8 latent reference (reference/mla_int8_reference.hpp) against closed
// forms: each part's scale is its own max |x| * fl(1/127) (f32, or rounded to f16), a value
// fl(k * scale) stores k, exact half-way values (f16 scales make (k + 1/2) * scale exact in
// f32) store the even neighbour, +-max stores +-127, an all-zero part stores scale 0 and
// zeros, and dequantising gives q * scale.
#include "reference/mla_int8_reference.hpp"

#include <gtest/gtest.h>
#include <cmath>
#include <vector>

#include "reference/kv_formats_reference.hpp"

using namespace clattn::ref;

namespace {
constexpr int kC = 512, kR = 64;
}

TEST(MlaInt8Reference, EachPartHasItsOwnScale) {
  std::vector<float> ckv(kC, 0.0f), kpe(kR, 0.0f);
  ckv[3] = -2.0f, kpe[5] = 256.0f;  // maxima of the two parts
  const float sc = 2.0f * (1.0f / 127.0f), sk = 256.0f * (1.0f / 127.0f);  // exact: powers of two times fl(1/127)
  for (int k = -126; k <= 126; ++k) {
    ckv[size_t(200 + k)] = float(k) * sc;   // fl(k * s): the quotient is k within 2^-17
    if (k >= -30 && k <= 30) kpe[size_t(33 + k)] = float(k) * sk;
  }
  ckv[3] = -2.0f, kpe[5] = 256.0f;
  std::vector<int8_t> qc(kC), qk(kR);
  float s[2];
  int8_quantize_latent(ckv.data(), kpe.data(), false, qc.data(), qk.data(), s);
  EXPECT_EQ(s[0], sc);
  EXPECT_EQ(s[1], sk);
  EXPECT_EQ(qc[3], -127);  // -max saturates at -127 (its quotient is -127 within rounding)
  EXPECT_EQ(qk[5], 127);
  for (int k = -126; k <= 126; ++k) {
    if (200 + k == 3) continue;
    EXPECT_EQ(qc[size_t(200 + k)], k) << "ckv k=" << k;
    if (k >= -30 && k <= 30 && 33 + k != 5) EXPECT_EQ(qk[size_t(33 + k)], k) << "kpe k=" << k;
  }
  // Dequantised: q * scale.
  std::vector<double> dc(kC), dk(kR);
  int8_dequantize_latent(qc.data(), qk.data(), s, dc.data(), dk.data());
  for (int d = 0; d < kC; ++d) EXPECT_EQ(dc[size_t(d)], double(qc[size_t(d)]) * double(sc));
  for (int d = 0; d < kR; ++d) EXPECT_EQ(dk[size_t(d)], double(qk[size_t(d)]) * double(sk));
}

TEST(MlaInt8Reference, TiesGoToEvenAndZeroPartsStoreZero) {
  // f16 scales: s has 11 significant bits, so (k + 1/2) * s is exact in f32 for |k| < 127.
  std::vector<float> ckv(kC, 0.0f), kpe(kR, 0.0f);
  ckv[0] = 3.0f;
  const float s = round_to_f16(3.0f * (1.0f / 127.0f));
  for (int k = -60; k < 60; ++k) ckv[size_t(100 + k)] = (float(k) + 0.5f) * s;
  std::vector<int8_t> qc(kC), qk(kR, 99);
  float sc[2];
  int8_quantize_latent(ckv.data(), kpe.data(), true, qc.data(), qk.data(), sc);
  EXPECT_EQ(sc[0], s);
  EXPECT_EQ(sc[1], 0.0f);  // an all-zero part
  for (int d = 0; d < kR; ++d) EXPECT_EQ(qk[size_t(d)], 0);
  for (int k = -60; k < 60; ++k) {
    const int even = (k % 2 == 0) ? k : k + 1;  // k + 1/2 lies between k and k + 1
    EXPECT_EQ(qc[size_t(100 + k)], even) << "k=" << k;
  }
  EXPECT_EQ(qc[0], 127);
}

TEST(MlaInt8Reference, F16ScaleRounding) {
  EXPECT_EQ(round_to_f16(1.0f + 0x1p-11f), 1.0f);                 // tie -> even (1)
  EXPECT_EQ(round_to_f16(1.0f + 3 * 0x1p-11f), 1.0f + 0x1p-9f);   // tie -> even (upward)
  EXPECT_EQ(round_to_f16(1.0f + 0x1p-11f + 0x1p-20f), 1.0f + 0x1p-10f);
  EXPECT_EQ(round_to_f16(0x1p-24f), 0x1p-24f);                    // smallest subnormal
  EXPECT_EQ(round_to_f16(0x1p-26f), 0.0f);                        // below half of it
}
