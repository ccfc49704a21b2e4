// The one-layer, one-request scenario the backend tests share (float, RoPE, int8 and int4
// layers): N tokens, 0-3 on page 2 and the rest on page 1, served as an extend, then one
// decode step per remaining token, each step's output checked against ref::attention over
// the rows the layer must attend to (rotated, dequantised).
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <string>
#include <vector>

#include "support/test_support.hpp"

namespace clattn::test {

// Token t's cache slot: tokens 0-3 on page 2, the rest on page 1.
inline std::vector<int32_t> two_page_slots(int N, int P) {
  std::vector<int32_t> r2t(size_t(N), 0);
  for (int t = 0; t < N; ++t) r2t[size_t(t)] = (t < 4 ? 2 * P + t : 1 * P + t - 4);
  return r2t;
}

struct OneRequest {
  int Hq = 0, Hkv = 0, D = 0, P = 0;
  std::vector<double> q, k, v;              // forward's inputs [N, H, D] (f32 values)
  std::vector<double> q_ref, k_ref, v_ref;  // what attention must see: q as rotated, k and v as stored
  bool q_in_place = false;                  // forward rotates q in its buffer: it must then hold q_ref
};

// Serves r through layer 0 of `be`: an extend of `extend` tokens, then one decode step per
// remaining token, at the slots two_page_slots gives.
inline void extend_then_decode(AttentionBackend& be, const OneRequest& r, int extend) {
  const int Hq = r.Hq, Hkv = r.Hkv, D = r.D, N = int(r.q.size() / (size_t(Hq) * D));
  std::vector<int32_t> r2t = two_page_slots(N, r.P);
  int32_t row = 0, seq = extend, prefix = 0, ext = extend;
  ForwardBatch fb;
  fb.mode = ForwardMode::Extend, fb.batch_size = 1, fb.req_to_token = r2t.data(), fb.pool_size = 1, fb.max_ctx = N;
  fb.req_pool_indices = &row, fb.seq_lens = &seq, fb.prefix_lens = &prefix, fb.extend_lens = &ext;
  ref::AttnOptions o;
  o.sm_scale = 1.0 / std::sqrt(double(D));
  auto f32 = [](const std::vector<double>& x, size_t from, size_t n) {
    return std::vector<float>(x.begin() + std::ptrdiff_t(from), x.begin() + std::ptrdiff_t(from + n));
  };
  auto step = [&](int from, int n) {
    SCOPED_TRACE(std::string(from ? "decode" : "extend") + " step at token " + std::to_string(from));
    auto qb = upload(f32(r.q, size_t(from) * Hq * D, size_t(n) * Hq * D));
    auto kb = upload(f32(r.k, size_t(from) * Hkv * D, size_t(n) * Hkv * D));
    auto vb = upload(f32(r.v, size_t(from) * Hkv * D, size_t(n) * Hkv * D));
    DeviceBuffer ob(ctx(), size_t(n) * Hq * D * 4);
    LayerIO io;
    io.q = qb.get(), io.k = kb.get(), io.v = vb.get(), io.o = ob.get();
    be.init_forward_metadata(fb);
    be.forward(0, io);
    const auto got = download<float>(ob, size_t(n) * Hq * D);
    std::vector<double> want(size_t(n) * Hq * D);
    ref::attention(r.q_ref.data() + size_t(from) * Hq * D, r.k_ref.data(), r.v_ref.data(), n, from + n, Hq, Hkv, D, D,
                   o, want.data(), nullptr);
    EXPECT_TRUE(all_close(std::vector<double>(got.begin(), got.end()), want, 2e-5, 2e-5, "attention"));
    if (r.q_in_place) {
      const auto qin = download<float>(qb, size_t(n) * Hq * D);
      const std::vector<double> wq(r.q_ref.begin() + std::ptrdiff_t(size_t(from) * Hq * D),
                                   r.q_ref.begin() + std::ptrdiff_t(size_t(from + n) * Hq * D));
      EXPECT_TRUE(all_close(std::vector<double>(qin.begin(), qin.end()), wq, 1e-5, 1e-5, "q rotated in place"));
    }
  };
  step(0, extend);
  fb.mode = ForwardMode::Decode, fb.prefix_lens = nullptr, fb.extend_lens = nullptr;
  for (int t = extend; t < N; ++t) {
    seq = t + 1;
    step(t, 1);
  }
}

// The first n elements of a scale cache (f32 or f16) as floats.
inline std::vector<float> read_scales(cl_mem m, size_t n, DType dt) {
  std::vector<uint8_t> bytes(n * dtype_size(dt));
  EXPECT_EQ(clEnqueueReadBuffer(ctx().cl_queue(), m, CL_TRUE, 0, bytes.size(), bytes.data(), 0, nullptr, nullptr),
            CL_SUCCESS);
  const auto x = unpack(bytes, dt);
  return std::vector<float>(x.begin(), x.end());
}

}  // namespace clattn::test
