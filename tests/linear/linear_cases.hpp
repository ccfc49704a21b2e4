// Shared by the linear-attention suites (test_linear.cpp, test_linear_cpu.cpp): a case
// (heads, head dims, dtypes, options, ragged lengths, slots), its quantised random inputs,
// one device run through the public API and the double-precision recurrence of
// tests/reference, and the comparison (tolerances: test_linear.cpp's header comment).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include "clattn/diagnostics.hpp"
#include "support/test_support.hpp"

namespace clattn {
namespace lintest {

using test::ctx;

inline double unit_roundoff(DType d) { return d == DType::F16 ? 0x1p-11 : d == DType::BF16 ? 0x1p-8 : 0x1p-24; }

struct Case {
  bool gdn = true;
  int Hqk = 1, Hv = 2, Dk = 64, Dv = 64;
  DType io = DType::F32, st = DType::F32;
  bool l2norm = true, logits = false, constant = false;
  std::vector<int> lens;   // per request (decode: all 1)
  std::vector<int> slots;  // per request, -1 = no state
  int num_slots = 8;
  std::map<std::string, int> params;  // LinearConfig::params (e.g. PF_MMA)
  // Device copies of state_indices / cu_seqlens when they differ from the host's (device
  // index faults); empty = the host arrays.
  std::vector<int32_t> dev_slots, dev_cu;
  LinearConfig cfg() const {
    LinearConfig c;
    c.num_qk_heads = Hqk;
    c.num_v_heads = Hv;
    c.head_dim_k = Dk;
    c.head_dim_v = Dv;
    c.dtype = io;
    c.scale = float(1.0 / std::sqrt(double(Dk)));
    c.l2norm_qk = gdn && l2norm;
    c.beta_is_logits = gdn && logits;
    c.constant_decay = constant;
    c.params = params;
    return c;
  }
  int T() const { return std::accumulate(lens.begin(), lens.end(), 0); }
  size_t slot_elems() const { return size_t(Hv) * Dk * Dv; }
};

// Host inputs: values the device computes with (already quantised).
struct Inputs {
  std::vector<double> q, k, v, g, beta_given, beta_prob, pool;
};

inline Inputs make_inputs(const Case& c, test::Rng& rng) {
  Inputs in;
  const size_t T = size_t(c.T());
  // Without l2norm, keep |k| <= ~0.6 so the delta rule's (I - beta k k^T) is contracting.
  const double kr = c.l2norm ? 1.0 : 1.0 / std::sqrt(double(c.Dk));
  in.q = test::quantize(rng.vec(T * c.Hqk * c.Dk), c.io);
  in.k = test::quantize(rng.vec(T * c.Hqk * c.Dk, -kr, kr), c.io);
  in.v = test::quantize(rng.vec(T * c.Hv * c.Dv), c.io);
  const size_t ng = (c.constant ? 1 : T) * c.Hv;
  in.g = test::quantize(rng.vec(ng, -0.4, -0.01), DType::F32);
  in.beta_given = test::quantize(c.logits ? rng.vec(T * c.Hv, -3, 3) : rng.vec(T * c.Hv, 0, 1), DType::F32);
  in.beta_prob = in.beta_given;
  if (c.logits)
    for (auto& b : in.beta_prob) b = 1.0 / (1.0 + std::exp(-b));
  in.pool = test::quantize(rng.vec(size_t(c.num_slots) * c.slot_elems(), -0.5, 0.5), c.st);
  return in;
}

inline std::vector<float> to_f32(const std::vector<double>& v) { return {v.begin(), v.end()}; }

struct Result {
  std::vector<double> o, pool;
  std::vector<uint8_t> pool_bytes;
};

inline std::vector<int32_t> cu_of(const std::vector<int>& lens) {
  std::vector<int32_t> cu(lens.size() + 1, 0);
  for (size_t i = 0; i < lens.size(); ++i) cu[i + 1] = cu[i] + lens[i];
  return cu;
}

// Runs the op (decode when `decode`, every length must then be 1).
inline Result run_device(const Case& c, const Inputs& in, bool decode) {
  const int T = c.T(), B = int(c.lens.size());
  auto q = test::upload(test::pack(in.q, c.io));
  auto k = test::upload(test::pack(in.k, c.io));
  auto v = test::upload(test::pack(in.v, c.io));
  auto g = test::upload(to_f32(in.g));
  auto beta = test::upload(to_f32(in.beta_given));
  auto pool_bytes = test::pack(in.pool, c.st);
  auto pool = test::upload(pool_bytes);
  const size_t no = size_t(T) * c.Hv * c.Dv;
  auto o = test::upload(std::vector<uint8_t>(no * dtype_size(c.io), 0x7f));
  std::vector<int32_t> idx(c.slots.begin(), c.slots.end());
  auto cu = cu_of(c.lens);
  auto idx_d = test::upload(c.dev_slots.empty() ? idx : c.dev_slots);
  auto cu_d = test::upload(c.dev_cu.empty() ? cu : c.dev_cu);
  LinearTensors t{q.get(), k.get(), v.get(), g.get(), beta.get(), o.get()};
  LinearStatePool p{pool.get(), c.num_slots, c.st};
  LinearBatch b;
  b.batch_size = B;
  b.state_indices = idx.data();
  b.state_indices_dev = idx_d.get();
  b.cu_seqlens = cu.data();
  b.cu_seqlens_dev = cu_d.get();
  b.num_tokens = T;
  if (decode) (c.gdn ? gdn_decode : gla_decode)(ctx(), c.cfg(), t, p, b, nullptr);
  else (c.gdn ? gdn_prefill : gla_prefill)(ctx(), c.cfg(), t, p, b, nullptr);
  ctx().finish();
  Result r;
  r.o = test::unpack(test::download<uint8_t>(o, no * dtype_size(c.io)), c.io);
  r.pool_bytes = test::download<uint8_t>(pool, pool_bytes.size());
  r.pool = test::unpack(r.pool_bytes, c.st);
  return r;
}

// The reference: each request's tokens through the recurrence from its slot (or zeros).
// pool = the expected pool in double (unquantised final states in the named slots).
inline Result run_reference(const Case& c, const Inputs& in) {
  Result r;
  r.o.assign(size_t(c.T()) * c.Hv * c.Dv, 0.0);
  r.pool = in.pool;
  auto cu = cu_of(c.lens);
  const size_t se = c.slot_elems();
  for (size_t i = 0; i < c.lens.size(); ++i) {
    const int t0 = cu[i], L = c.lens[i];
    std::vector<double> S(se, 0.0);
    if (c.slots[i] >= 0) std::copy_n(in.pool.begin() + c.slots[i] * se, se, S.begin());
    std::vector<double> g(size_t(L) * c.Hv);
    for (int t = 0; t < L; ++t)
      for (int h = 0; h < c.Hv; ++h) g[size_t(t) * c.Hv + h] = in.g[(c.constant ? 0 : size_t(t0 + t) * c.Hv) + h];
    const double* q = in.q.data() + size_t(t0) * c.Hqk * c.Dk;
    const double* k = in.k.data() + size_t(t0) * c.Hqk * c.Dk;
    const double* v = in.v.data() + size_t(t0) * c.Hv * c.Dv;
    double* o = r.o.data() + size_t(t0) * c.Hv * c.Dv;
    const double scale = double(c.cfg().scale);
    if (c.gdn)
      ref::gdn_recurrent(q, k, v, g.data(), in.beta_prob.data() + size_t(t0) * c.Hv, L, c.Hqk, c.Hv, c.Dk, c.Dv,
                         scale, c.l2norm, S.data(), o);
    else
      ref::gla_recurrent(q, k, v, g.data(), L, c.Hqk, c.Hv, c.Dk, c.Dv, scale, S.data(), o);
    if (c.slots[i] >= 0 && L > 0) std::copy(S.begin(), S.end(), r.pool.begin() + c.slots[i] * se);
  }
  return r;
}

// Whether this device can run the tensor-core prefill (NVIDIA inline PTX, sm_80+, or the
// PoCL emulation's capability override).
inline bool mma_device() {
  for (const auto& v : variants(ctx().profile()))
    if (v.name == "nv_mma_sync") return v.available;
  return false;
}

// Whether a prefill of `c` runs the tensor-core kernel: asked for (PF_MMA from the case or
// the parameter database), available, f16/bf16 q/k/v, Dk <= 128 (backends/ops/linear/variants.cpp).
inline bool uses_mma(const Case& c, bool decode) {
  if (decode || c.io == DType::F32 || c.Dk > 128 || !mma_device()) return false;
  auto it = c.params.find("PF_MMA");
  if (it != c.params.end()) return it->second != 0;
  return parameters(ctx().profile(), "linear_prefill").values.count("PF_MMA") &&
         parameters(ctx().profile(), "linear_prefill").values.at("PF_MMA") != 0;
}

// Outputs and named slots close to the reference; every other slot bit-identical.
inline void check(const Case& c, const Inputs& in, const Result& got, const Result& want, const std::string& what,
           bool mma = false) {
  const double tol = mma ? 2e-3 + 2 * unit_roundoff(c.io) : 2e-3;  // see the header comment
  EXPECT_TRUE(test::all_close(got.o, want.o, tol, 2e-3 + 2 * unit_roundoff(c.io), what + " o"));
  const size_t se = c.slot_elems(), sb = se * dtype_size(c.st);
  auto init_bytes = test::pack(in.pool, c.st);
  for (int s = 0; s < c.num_slots; ++s) {
    bool named = false;
    for (size_t i = 0; i < c.slots.size(); ++i) named |= (c.slots[i] == s && c.lens[i] > 0);
    if (named) {
      std::vector<double> g(got.pool.begin() + s * se, got.pool.begin() + (s + 1) * se);
      std::vector<double> w(want.pool.begin() + s * se, want.pool.begin() + (s + 1) * se);
      EXPECT_TRUE(test::all_close(g, w, tol, tol + 2 * unit_roundoff(c.st), what + " state slot " + std::to_string(s)));
    } else {
      EXPECT_EQ(0, std::memcmp(got.pool_bytes.data() + s * sb, init_bytes.data() + s * sb, sb))
          << what << ": slot " << s << " not named but changed";
    }
  }
}

inline void check_case(const Case& c, bool decode, uint64_t salt, const std::string& what) {
  CLATTN_SEED_TRACE();
  test::Rng rng(salt);
  Inputs in = make_inputs(c, rng);
  const bool mma = uses_mma(c, decode);
  check(c, in, run_device(c, in, decode), run_reference(c, in), what + (mma ? " [nv_mma_sync]" : ""), mma);
}

}  // namespace lintest
}  // namespace clattn
