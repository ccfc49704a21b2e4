// clattn double-precision CPU reference. See reference.hpp for the contracts.
#include "reference/reference.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace clattn::ref {
namespace {

using sz = std::size_t;
constexpr double kInf = std::numeric_limits<double>::infinity();

// Round to nearest integer, ties to even (independent of the FP rounding mode). y >= 0.
double round_half_even(double y) {
  const double fl = std::floor(y), diff = y - fl;
  if (diff > 0.5) return fl + 1.0;
  if (diff < 0.5) return fl;
  return std::fmod(fl, 2.0) == 0.0 ? fl : fl + 1.0;
}

// Generic encoder for a sign/exponent/mantissa format with IEEE-style subnormals.
// x must not be nan. Rounding is RNE (a float is exact in double and a/quantum is an exact
// power-of-two scaling, so there is no double rounding).
// Overflow (after rounding) gives the all-ones exponent with zero mantissa (inf), or the
// largest finite value when `saturate` is set.
uint32_t encode(double x, int ebits, int mbits, int bias, double max_finite, bool saturate) {
  const uint32_t sign = std::signbit(x) ? (1u << (ebits + mbits)) : 0u;
  const uint32_t inf_bits = ((1u << ebits) - 1u) << mbits;
  double a = std::fabs(x);
  if (std::isinf(a)) a = 2.0 * max_finite;  // handled as an overflow below
  if (a == 0.0) return sign;
  const int emin = 1 - bias;  // exponent of the smallest normal
  int ex = 0;
  std::frexp(a, &ex);  // a = m * 2^ex, m in [0.5, 1); the grid spacing at a is 2^(max(ex-1, emin) - mbits)
  const double quantum = std::ldexp(1.0, std::max(ex - 1, emin) - mbits);
  double r = round_half_even(a / quantum) * quantum;
  if (r > max_finite) {
    if (!saturate) return sign | inf_bits;
    r = max_finite;
  }
  if (r == 0.0) return sign;
  std::frexp(r, &ex);
  const int er = ex - 1;
  uint32_t field = 0, mant = 0;
  if (er < emin) {  // subnormal
    mant = static_cast<uint32_t>(r / std::ldexp(1.0, emin - mbits));
  } else {
    field = static_cast<uint32_t>(er + bias);
    mant = static_cast<uint32_t>(r / std::ldexp(1.0, er - mbits)) - (1u << mbits);
  }
  return sign | (field << mbits) | mant;
}

// Generic decoder for finite codes (callers handle inf/nan first).
double decode(uint32_t bits, int ebits, int mbits, int bias) {
  const bool neg = (bits >> (ebits + mbits)) & 1u;
  const uint32_t field = (bits >> mbits) & ((1u << ebits) - 1u);
  const uint32_t mant = bits & ((1u << mbits) - 1u);
  double val = field == 0 ? std::ldexp(static_cast<double>(mant), 1 - bias - mbits)
                          : std::ldexp(1.0 + std::ldexp(static_cast<double>(mant), -mbits),
                                       static_cast<int>(field) - bias);
  return neg ? -val : val;
}

// o[j] = sum_i S[i][j] * q[i] * scale, S stored [Dk][Dv].
void state_times_q(const double* S, const double* q, double scale, int Dk, int Dv, double* o) {
  for (int j = 0; j < Dv; ++j) {
    double acc = 0.0;
    for (int i = 0; i < Dk; ++i) acc += S[sz(i) * Dv + j] * (q[i] * scale);
    o[j] = acc;
  }
}

uint32_t float_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
float bits_float(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
}  // namespace

// ---------------------------------------------------------------- scalar formats
float half_to_float(uint16_t h) {
  if ((h & 0x7c00u) == 0x7c00u)  // inf / nan: widen payload into a float
    return bits_float((uint32_t(h & 0x8000u) << 16) | 0x7f800000u | (uint32_t(h & 0x3ffu) << 13));
  return static_cast<float>(decode(h, 5, 10, 15));
}
uint16_t float_to_half(float f) {
  const uint32_t u = float_bits(f);  // nan: keep sign and top payload bits, force quiet
  if (std::isnan(f)) return static_cast<uint16_t>(((u >> 16) & 0x8000u) | 0x7e00u | ((u >> 13) & 0x3ffu));
  return static_cast<uint16_t>(encode(f, 5, 10, 15, 65504.0, false));
}
float bf16_to_float(uint16_t b) { return bits_float(uint32_t(b) << 16); }
uint16_t float_to_bf16(float f) {
  if (std::isnan(f)) return static_cast<uint16_t>((float_bits(f) >> 16) | 0x0040u);  // keep sign+payload, quiet
  const double max_bf16 = std::ldexp(255.0, 120);  // (2 - 2^-7) * 2^127
  return static_cast<uint16_t>(encode(f, 8, 7, 127, max_bf16, false));
}
float fp8_e4m3_to_float(uint8_t v) {
  if ((v & 0x7fu) == 0x7fu) return std::numeric_limits<float>::quiet_NaN();
  return static_cast<float>(decode(v, 4, 3, 7));
}
uint8_t float_to_fp8_e4m3(float f) {
  return std::isnan(f) ? uint8_t{0x7f} : static_cast<uint8_t>(encode(f, 4, 3, 7, 448.0, true));
}
float fp8_e5m2_to_float(uint8_t v) {  // same layout as the top byte of a binary16
  return half_to_float(static_cast<uint16_t>(v << 8));
}
uint8_t float_to_fp8_e5m2(float f) {
  return std::isnan(f) ? uint8_t{0x7f} : static_cast<uint8_t>(encode(f, 5, 2, 15, 57344.0, true));
}

bool store_elem(float f, int dtype, uint8_t* p) {
  switch (dtype) {
    case 0: std::memcpy(p, &f, 4); return true;
    case 1: { const uint16_t h = float_to_half(f); std::memcpy(p, &h, 2); return true; }
    case 2: { const uint16_t h = float_to_bf16(f); std::memcpy(p, &h, 2); return true; }
    case 3: *p = float_to_fp8_e4m3(f); return true;
    case 4: *p = float_to_fp8_e5m2(f); return true;
    default: return false;
  }
}

bool load_elem(const uint8_t* p, int dtype, float* f) {
  uint16_t h;
  switch (dtype) {
    case 0: std::memcpy(f, p, 4); return true;
    case 1: std::memcpy(&h, p, 2); *f = half_to_float(h); return true;
    case 2: std::memcpy(&h, p, 2); *f = bf16_to_float(h); return true;
    case 3: *f = fp8_e4m3_to_float(*p); return true;
    case 4: *f = fp8_e5m2_to_float(*p); return true;
    default: return false;
  }
}

// ---------------------------------------------------------------- softmax attention
void attention(const double* q, const double* k, const double* v, int qo_len, int kv_len,
               int Hq, int Hkv, int D, int Dv, const AttnOptions& opt, double* o, double* lse) {
  const int group = Hq / Hkv;
  std::vector<double> s(sz(std::max(kv_len, 0)));
  std::vector<char> vis(s.size());
  for (int i = 0; i < qo_len; ++i) {
    const long pos = static_cast<long>(kv_len) - qo_len + i;  // absolute position of query row i
    for (int h = 0; h < Hq; ++h) {
      const int kh = h / group;
      const double* qi = q + (sz(i) * Hq + h) * D;
      double m = -kInf;
      for (int j = 0; j < kv_len; ++j) {
        const size_t bit = sz(i) * kv_len + j;  // custom-mask bit of (row i, key j)
        vis[j] = !(opt.causal && j > pos) && !(opt.window_left >= 0 && j < pos - opt.window_left) &&
                 !(opt.custom_mask && ((opt.custom_mask[bit / 8] >> (bit % 8)) & 1u) == 0);
        if (!vis[j]) continue;
        const double* kj = k + (sz(j) * Hkv + kh) * D;
        double dot = 0.0;
        for (int d = 0; d < D; ++d) dot += qi[d] * kj[d];
        double sc = dot * opt.sm_scale;
        if (opt.logits_soft_cap > 0.0) sc = opt.logits_soft_cap * std::tanh(sc / opt.logits_soft_cap);
        s[j] = sc;
        m = std::max(m, sc);
      }
      if (opt.sinks) m = std::max(m, opt.sinks[h]);

      double* oi = o + (sz(i) * Hq + h) * Dv;
      for (int d = 0; d < Dv; ++d) oi[d] = 0.0;
      double* lse_i = lse ? lse + sz(i) * Hq + h : nullptr;
      if (m == -kInf) {  // nothing visible (and no finite sink)
        if (lse_i) *lse_i = -kInf;
        continue;
      }
      double denom = opt.sinks ? std::exp(opt.sinks[h] - m) : 0.0;
      for (int j = 0; j < kv_len; ++j) {
        if (!vis[j]) continue;
        const double w = std::exp(s[j] - m);
        denom += w;
        const double* vj = v + (sz(j) * Hkv + kh) * Dv;
        for (int d = 0; d < Dv; ++d) oi[d] += w * vj[d];
      }
      for (int d = 0; d < Dv; ++d) oi[d] /= denom;
      if (lse_i) *lse_i = m + std::log(denom);
    }
  }
}

// ---------------------------------------------------------------- merge
void merge_states(const double* const* o_parts, const double* lse_parts, int n, int Dv, double* o, double* lse) {
  double m = -kInf;
  for (int p = 0; p < n; ++p) m = std::max(m, lse_parts[p]);
  std::vector<double> acc(sz(Dv), 0.0);
  double denom = 0.0;
  for (int p = 0; p < n; ++p) {
    if (lse_parts[p] == -kInf) continue;  // empty part: its o may be anything
    const double w = std::exp(lse_parts[p] - m);
    denom += w;
    for (int d = 0; d < Dv; ++d) acc[d] += w * o_parts[p][d];
  }
  // All parts empty -> o = 0, lse = -inf. acc is separate, so o may alias a part.
  for (int d = 0; d < Dv; ++d) o[d] = denom > 0.0 ? acc[d] / denom : 0.0;
  if (lse) *lse = denom > 0.0 ? m + std::log(denom) : -kInf;
}

void merge_state(const double* o_a, double lse_a, const double* o_b, double lse_b, int Dv, double* o, double* lse) {
  const double* parts[2] = {o_a, o_b};
  const double lses[2] = {lse_a, lse_b};  // a two-part merge is the n-part merge
  merge_states(parts, lses, 2, Dv, o, lse);
}

// ---------------------------------------------------------------- MLA
// Absorbed MLA is MHA with one shared KV head: key = [ckv | kpe], value = ckv.
void mla_attention(const double* q_nope, const double* q_pe, const double* ckv, const double* kpe,
                   int qo_len, int kv_len, int H, int Dc, int Dr, double sm_scale, bool causal,
                   double* o, double* lse) {
  const int Dk = Dc + Dr;
  std::vector<double> qc(sz(qo_len) * H * Dk), kc(sz(kv_len) * Dk);
  for (size_t r = 0; r < sz(qo_len) * H; ++r) {
    std::copy(q_nope + r * Dc, q_nope + (r + 1) * Dc, qc.begin() + r * Dk);
    std::copy(q_pe + r * Dr, q_pe + (r + 1) * Dr, qc.begin() + r * Dk + Dc);
  }
  for (size_t j = 0; j < sz(kv_len); ++j) {
    std::copy(ckv + j * Dc, ckv + (j + 1) * Dc, kc.begin() + j * Dk);
    std::copy(kpe + j * Dr, kpe + (j + 1) * Dr, kc.begin() + j * Dk + Dc);
  }
  AttnOptions opt;
  opt.sm_scale = sm_scale, opt.causal = causal;
  attention(qc.data(), kc.data(), ckv, qo_len, kv_len, H, 1, Dk, Dc, opt, o, lse);
}

// ---------------------------------------------------------------- linear attention
namespace {
// Copies head vector x[0..n) into out, optionally L2-normalised with eps 1e-6 inside the sqrt.
void load_vec(const double* x, int n, bool l2norm, std::vector<double>& out) {
  out.assign(x, x + n);
  if (!l2norm) return;
  double ss = 0.0;
  for (double e : out) ss += e * e;
  const double inv = 1.0 / std::sqrt(ss + 1e-6);
  for (double& e : out) e *= inv;
}
}  // namespace

void gdn_recurrent(const double* q, const double* k, const double* v, const double* g, const double* beta,
                   int T, int Hqk, int Hv, int Dk, int Dv, double scale, bool l2norm_qk,
                   double* state, double* o) {
  const int group = Hv / Hqk;
  std::vector<double> qv, kv, u(static_cast<size_t>(Dv));
  for (int t = 0; t < T; ++t) {
    for (int hv = 0; hv < Hv; ++hv) {
      const int hq = hv / group;
      load_vec(q + (sz(t) * Hqk + hq) * Dk, Dk, l2norm_qk, qv);
      load_vec(k + (sz(t) * Hqk + hq) * Dk, Dk, l2norm_qk, kv);
      const double* vt = v + (sz(t) * Hv + hv) * Dv;
      const double decay = std::exp(g[sz(t) * Hv + hv]);
      const double b = beta[sz(t) * Hv + hv];
      double* S = state + sz(hv) * Dk * Dv;  // S[i*Dv + j]
      for (size_t e = 0; e < sz(Dk) * Dv; ++e) S[e] *= decay;
      for (int j = 0; j < Dv; ++j) {  // u = v - S^T k
        double sk = 0.0;
        for (int i = 0; i < Dk; ++i) sk += S[sz(i) * Dv + j] * kv[i];
        u[j] = vt[j] - sk;
      }
      for (int i = 0; i < Dk; ++i)  // S += beta * k (x) u
        for (int j = 0; j < Dv; ++j) S[sz(i) * Dv + j] += b * kv[i] * u[j];
      state_times_q(S, qv.data(), scale, Dk, Dv, o + (sz(t) * Hv + hv) * Dv);  // o = S^T (q*scale)
    }
  }
}

void gla_recurrent(const double* q, const double* k, const double* v, const double* g,
                   int T, int Hqk, int Hv, int Dk, int Dv, double scale, double* state, double* o) {
  const int group = Hv / Hqk;
  for (int t = 0; t < T; ++t) {
    for (int hv = 0; hv < Hv; ++hv) {
      const int hq = hv / group;
      const double* qt = q + (sz(t) * Hqk + hq) * Dk;
      const double* kt = k + (sz(t) * Hqk + hq) * Dk;
      const double* vt = v + (sz(t) * Hv + hv) * Dv;
      const double decay = std::exp(g[sz(t) * Hv + hv]);
      double* S = state + sz(hv) * Dk * Dv;
      for (int i = 0; i < Dk; ++i)
        for (int j = 0; j < Dv; ++j)
          S[sz(i) * Dv + j] = decay * S[sz(i) * Dv + j] + kt[i] * vt[j];
      state_times_q(S, qt, scale, Dk, Dv, o + (sz(t) * Hv + hv) * Dv);
    }
  }
}

}  // namespace clattn::ref
