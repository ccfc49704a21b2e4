// clattn double-precision CPU reference (the correctness oracle).
// Deliberately simple: plain loops over the logical sequence, double everywhere.
#pragma once
#include <cstdint>

namespace clattn::ref {

// --- scalar formats (bit-exact, round-to-nearest-even) ---
float    half_to_float(uint16_t h);      // IEEE binary16, incl. subnormals, inf, nan
uint16_t float_to_half(float f);         // RNE, overflow -> inf, nan -> sign|0x7e00
float    bf16_to_float(uint16_t b);
uint16_t float_to_bf16(float f);         // RNE, nan preserved (quiet bit forced)
float    fp8_e4m3_to_float(uint8_t v);   // OCP FP8 E4M3FN: bias 7, no inf, 0x7f/0xff nan, max 448
uint8_t  float_to_fp8_e4m3(float f);     // RNE, saturating to +-448 (inf too; nan -> 0x7f)
float    fp8_e5m2_to_float(uint8_t v);   // E5M2: bias 15, IEEE-like inf/nan, max finite 57344
uint8_t  float_to_fp8_e5m2(float f);     // RNE, saturating to +-57344 (inf too; nan -> 0x7f)

// Round-trip helpers: value -> nearest representable value (as float).
inline float round_half(float f) { return half_to_float(float_to_half(f)); }
inline float round_bf16(float f) { return bf16_to_float(float_to_bf16(f)); }
inline float round_e4m3(float f) { return fp8_e4m3_to_float(float_to_fp8_e4m3(f)); }
inline float round_e5m2(float f) { return fp8_e5m2_to_float(float_to_fp8_e5m2(f)); }

// One element in a stored dtype, by DESIGN.md's dtype codes (0 f32, 1 f16, 2 bf16, 3 fp8
// e4m3, 4 fp8 e5m2): store_elem writes f as the device stores it (RNE, fp8 saturating),
// load_elem reads it back. Both return false for any other code.
bool store_elem(float f, int dtype, uint8_t* p);
bool load_elem(const uint8_t* p, int dtype, float* f);

// --- softmax attention for ONE request over its logical sequence ---
struct AttnOptions {
  double sm_scale = 1.0;
  double logits_soft_cap = 0.0;   // >0: s = cap * tanh(s / cap), applied AFTER sm_scale
  int    window_left = -1;        // >=0: query at position p sees keys with position >= p - window_left
  bool   causal = true;           // query row j sits at position kv_len - qo_len + j and sees keys <= that
  const double* sinks = nullptr;  // [Hq] sink logit (scaled-logit space); joins the denominator only
  const uint8_t* custom_mask = nullptr; // bit-packed rows of kv_len bits, little-endian bits; 0 = masked
};

// q [qo_len, Hq, D], k [kv_len, Hkv, D], v [kv_len, Hkv, Dv]; o [qo_len, Hq, Dv]; lse [qo_len, Hq] (nullable).
// GQA: query head h uses kv head h / (Hq/Hkv).
// lse = log(sum_visible exp(s) + (sinks ? exp(sink_h) : 0)); no visible key and no sink: o = 0, lse = -inf.
void attention(const double* q, const double* k, const double* v, int qo_len, int kv_len,
               int Hq, int Hkv, int D, int Dv, const AttnOptions& opt, double* o, double* lse);

// --- merge of attention states (-inf lse = empty state; all empty -> o = 0, lse = -inf) ---
void merge_state(const double* o_a, double lse_a, const double* o_b, double lse_b, int Dv, double* o, double* lse);
void merge_states(const double* const* o_parts, const double* lse_parts, int n, int Dv, double* o, double* lse);

// --- MLA absorbed form, one request ---
// q_nope [qo_len, H, Dc], q_pe [qo_len, H, Dr], ckv [kv_len, Dc], kpe [kv_len, Dr];
// scores (q_nope.ckv + q_pe.kpe) * sm_scale; values = ckv; o [qo_len, H, Dc]; lse nullable.
void mla_attention(const double* q_nope, const double* q_pe, const double* ckv, const double* kpe,
                   int qo_len, int kv_len, int H, int Dc, int Dr, double sm_scale, bool causal,
                   double* o, double* lse);

// --- linear attention, one request, token by token ---
// q,k [T, Hqk, Dk], v [T, Hv, Dv]; value head hv uses q/k head hv / (Hv/Hqk).
// g [T, Hv] log decay; beta [T, Hv] probabilities; state [Hv, Dk, Dv] in/out; o [T, Hv, Dv].
// Gated DeltaNet: S = exp(g)*S; u = v - S^T k; S += beta * k (x) u; o = S^T (q*scale).
// l2norm_qk: q, k divided by sqrt(sum(x^2) + 1e-6) per head before use.
void gdn_recurrent(const double* q, const double* k, const double* v, const double* g, const double* beta,
                   int T, int Hqk, int Hv, int Dk, int Dv, double scale, bool l2norm_qk,
                   double* state, double* o);
// Simple GLA: S = exp(g)*S + k (x) v; o = S^T (q*scale).
void gla_recurrent(const double* q, const double* k, const double* v, const double* g,
                   int T, int Hqk, int Hv, int Dk, int Dv, double scale, double* state, double* o);

}  // namespace clattn::ref
