/* Rotary position embedding through the C ABI, compiled as C: clattn_apply_rope and
 * clattn_rope_append_kv (NeoX and GPT-J, full and partial rotary, theta/scale form) against
 * a double-precision rotation written here from clattn.h's contract, and per-KV-head scales into
 * an fp8 cache byte for byte against clattn_apply_rope then clattn_append_kv; rejected calls return
 * CLATTN_INVALID_ARGUMENT naming the argument and leave their outputs untouched. */
#include <math.h>

#include "c_test_util.h"

enum { T = 3, HQ = 4, HKV = 2, D = 16, P = 4, PAGES = 2 };
static const float kSentinel = 777.0f;

/* One head row x [D] at position pos: pairs (i, i + R/2) (NeoX) or (2i, 2i + 1) (GPT-J),
 * angle pos / scale * theta^(-2i/R); dims R .. D-1 copied. */
static void rope_row(const float* x, double* out, int R, int gptj, double pos, double theta, double scale) {
  for (int d = 0; d < D; ++d) out[d] = x[d];
  for (int i = 0; i < R / 2; ++i) {
    int a = gptj ? 2 * i : i, b = gptj ? 2 * i + 1 : i + R / 2;
    double ang = pos / scale * pow(theta, -2.0 * i / R), c = cos(ang), s = sin(ang);
    out[a] = x[a] * c - x[b] * s;
    out[b] = x[b] * c + x[a] * s;
  }
}

static void fill(float* p, int n, float v) {
  for (int i = 0; i < n; ++i) p[i] = v;
}

/* Rows [T, H, D] of x rotated at pos into want. */
static void rope_rows(const float* x, double* want, int H, int R, int gptj, const double* pos, double theta,
                      double scale) {
  for (int t = 0; t < T; ++t)
    for (int h = 0; h < H; ++h) rope_row(x + (t * H + h) * D, want + (t * H + h) * D, R, gptj, pos[t], theta, scale);
}

static void test_apply_rope(clattn_context ctx, cl_command_queue q, cl_context c) {
  static const int32_t pos[T] = {0, 7, 19};
  const double posd[T] = {0, 7, 19};
  float qh[T * HQ * D], kh[T * HKV * D], sent_q[T * HQ * D], got_q[T * HQ * D], got_k[T * HKV * D];
  for (int e = 0; e < T * HQ * D; ++e) qh[e] = rnd();
  for (int e = 0; e < T * HKV * D; ++e) kh[e] = rnd();
  fill(sent_q, T * HQ * D, kSentinel);
  cl_mem qd = buffer(c, sizeof qh, qh, q), kd = buffer(c, sizeof kh, kh, q), pd = buffer(c, sizeof pos, pos, q);
  cl_mem qo = buffer(c, sizeof qh, sent_q, q), ko = buffer(c, sizeof kh, NULL, q);

  clattn_rope_args a;
  memset(&a, 0, sizeof a);
  a.q = qd; a.q_out = qo; a.k = kd; a.k_out = ko; a.dtype = 0; a.num_tokens = T;
  a.num_qo_heads = HQ; a.num_kv_heads = HKV; a.head_dim = D;
  a.positions = pd; a.positions_dtype = 5; a.positions_host = pos;
  clattn_rope_config_init(&a.rope);
  CHECK(a.rope.style == 0 && a.rope.rotary_dim == 0 && a.rope.theta == 10000.0f && a.rope.scale == 1.0f &&
        a.rope.cos_sin_cache == NULL);

  /* Rejected before anything is enqueued: q_out keeps its sentinel. */
  clattn_rope_args bad = a;
  bad.rope.rotary_dim = 7;
  CHECK_FAILS(clattn_apply_rope(ctx, &bad, NULL), CLATTN_INVALID_ARGUMENT, "rotary_dim");
  bad = a;
  bad.rope.theta = 0.0f;
  CHECK_FAILS(clattn_apply_rope(ctx, &bad, NULL), CLATTN_INVALID_ARGUMENT, "rope.theta");
  static const int32_t negative[T] = {0, -3, 19};
  bad = a;
  bad.positions_host = negative;
  CHECK_FAILS(clattn_apply_rope(ctx, &bad, NULL), CLATTN_INVALID_ARGUMENT, "positions[1]");
  CHECK_FAILS(clattn_apply_rope(ctx, NULL, NULL), CLATTN_INVALID_ARGUMENT, "args");
  read_back(q, qo, got_q, sizeof got_q);
  CHECK(memcmp(got_q, sent_q, sizeof got_q) == 0);

  for (int gptj = 0; gptj <= 1; ++gptj) {
    /* NeoX: full rotary, theta 1e4; GPT-J: partial rotary (R = D/2), theta 5e5, scale 2. */
    const int R = gptj ? D / 2 : D;
    const double theta = gptj ? 500000.0 : 10000.0, scale = gptj ? 2.0 : 1.0;
    a.rope.style = gptj;
    a.rope.rotary_dim = gptj ? R : 0;
    a.rope.theta = (float)theta;
    a.rope.scale = (float)scale;
    CHECK(clattn_apply_rope(ctx, &a, NULL) == CLATTN_SUCCESS);
    read_back(q, qo, got_q, sizeof got_q);
    read_back(q, ko, got_k, sizeof got_k);
    double want_q[T * HQ * D], want_k[T * HKV * D];
    rope_rows(qh, want_q, HQ, R, gptj, posd, theta, scale);
    rope_rows(kh, want_k, HKV, R, gptj, posd, theta, scale);
    double wq = worst(got_q, want_q, T * HQ * D), wk = worst(got_k, want_k, T * HKV * D);
    CHECK(wq < 1e-5 && wk < 1e-5);
    if (!(wq < 1e-5 && wk < 1e-5)) fprintf(stderr, "apply_rope %s: worst error q %g k %g\n", gptj ? "gptj" : "neox", wq, wk);
  }
  clReleaseMemObject(qd); clReleaseMemObject(kd); clReleaseMemObject(pd); clReleaseMemObject(qo); clReleaseMemObject(ko);
}

static void test_rope_append_kv(clattn_context ctx, cl_command_queue q, cl_context c) {
  static const int64_t pos[T] = {3, 11, 40};
  static const int64_t slots[T] = {5, -1, 2}; /* token 1 is padding: q_out only */
  const double posd[T] = {3, 11, 40};
  enum { CACHE = PAGES * P * HKV * D };
  float qh[T * HQ * D], kh[T * HKV * D], vh[T * HKV * D], sent_c[CACHE], sent_q[T * HQ * D];
  float got_q[T * HQ * D], got_k[CACHE], got_v[CACHE];
  for (int e = 0; e < T * HQ * D; ++e) qh[e] = rnd();
  for (int e = 0; e < T * HKV * D; ++e) { kh[e] = rnd(); vh[e] = rnd(); }
  fill(sent_c, CACHE, kSentinel);
  fill(sent_q, T * HQ * D, kSentinel);
  cl_mem qd = buffer(c, sizeof qh, qh, q), kd = buffer(c, sizeof kh, kh, q), vd = buffer(c, sizeof vh, vh, q);
  cl_mem pd = buffer(c, sizeof pos, pos, q), sd = buffer(c, sizeof slots, slots, q);
  cl_mem qo = buffer(c, sizeof qh, sent_q, q);
  cl_mem kc = buffer(c, sizeof sent_c, sent_c, q), vc = buffer(c, sizeof sent_c, sent_c, q);

  clattn_rope_append_kv_args a;
  memset(&a, 0, sizeof a);
  clattn_paged_kv cache = {PAGES, P, HKV, D, 0 /* NHD */, 0 /* f32 */, 0, 0, 0};
  a.append.k = kd; a.append.v = vd; a.append.src_dtype = 0; a.append.slot_mapping = sd; a.append.slot_dtype = 6;
  a.append.num_tokens = T; a.append.slot_mapping_host = slots; a.append.k_cache = kc; a.append.v_cache = vc;
  a.append.cache = cache; a.append.k_scale = a.append.v_scale = 1.0f;
  a.q = qd; a.q_out = qo; a.num_qo_heads = HQ; a.q_out_dtype = 0;
  a.positions = pd; a.positions_dtype = 6; a.positions_host = pos;
  clattn_rope_config_init(&a.rope);

  /* Rejected: nothing written to the caches or q_out. */
  clattn_rope_append_kv_args bad = a;
  bad.positions_dtype = 2;
  CHECK_FAILS(clattn_rope_append_kv(ctx, &bad, NULL), CLATTN_INVALID_ARGUMENT, "positions dtype");
  bad = a;
  bad.rope.style = 2;
  CHECK_FAILS(clattn_rope_append_kv(ctx, &bad, NULL), CLATTN_INVALID_ARGUMENT, "rope.style");
  bad = a;
  bad.append.k_cache = NULL; /* append_kv's own checks apply */
  CHECK_FAILS(clattn_rope_append_kv(ctx, &bad, NULL), CLATTN_INVALID_ARGUMENT, "k_cache");
  CHECK_FAILS(clattn_rope_append_kv(NULL, &a, NULL), CLATTN_INVALID_ARGUMENT, "ctx");
  read_back(q, kc, got_k, sizeof got_k);
  read_back(q, qo, got_q, sizeof got_q);
  CHECK(memcmp(got_k, sent_c, sizeof got_k) == 0 && memcmp(got_q, sent_q, sizeof got_q) == 0);

  for (int gptj = 0; gptj <= 1; ++gptj) {
    const int R = gptj ? D / 2 : D;
    a.rope.style = gptj;
    a.rope.rotary_dim = gptj ? R : 0;
    CHECK(clattn_rope_append_kv(ctx, &a, NULL) == CLATTN_SUCCESS);
    read_back(q, qo, got_q, sizeof got_q);
    read_back(q, kc, got_k, sizeof got_k);
    read_back(q, vc, got_v, sizeof got_v);
    double want_q[T * HQ * D], want_k[CACHE], want_v[CACHE], rows[T * HKV * D];
    rope_rows(qh, want_q, HQ, R, gptj, posd, 10000.0, 1.0);
    rope_rows(kh, rows, HKV, R, gptj, posd, 10000.0, 1.0);
    for (int e = 0; e < CACHE; ++e) want_k[e] = want_v[e] = kSentinel;
    for (int t = 0; t < T; ++t) {
      if (slots[t] < 0) continue;
      for (int e = 0; e < HKV * D; ++e) { /* NHD: slot s at s * Hkv * D */
        want_k[slots[t] * HKV * D + e] = rows[t * HKV * D + e];
        want_v[slots[t] * HKV * D + e] = vh[t * HKV * D + e];
      }
    }
    double wq = worst(got_q, want_q, T * HQ * D), wk = worst(got_k, want_k, CACHE), wv = worst(got_v, want_v, CACHE);
    CHECK(wq < 1e-5 && wk < 1e-5 && wv == 0);
    if (!(wq < 1e-5 && wk < 1e-5 && wv == 0))
      fprintf(stderr, "rope_append_kv %s: worst error q %g k %g v %g\n", gptj ? "gptj" : "neox", wq, wk, wv);
  }
  uint32_t faults = 0;
  CHECK(clattn_context_device_faults(ctx, &faults, 1) == CLATTN_SUCCESS && faults == 0);
  clReleaseMemObject(qd); clReleaseMemObject(kd); clReleaseMemObject(vd); clReleaseMemObject(pd);
  clReleaseMemObject(sd); clReleaseMemObject(qo); clReleaseMemObject(kc); clReleaseMemObject(vc);
}

/* Per-KV-head scales into an fp8 e4m3 cache: clattn_rope_append_kv stores, byte for byte, what
 * clattn_apply_rope (f32) then clattn_append_kv store with the same scales (k_scale 0.5, v_scale
 * 2, [Hkv] head scales; head 0's k scale small enough to saturate e4m3); one of the pair
 * missing and a short head-scale buffer are rejected, the cache untouched. */
static void test_rope_append_kv_head_scales(clattn_context ctx, cl_command_queue q, cl_context c) {
  static const int64_t pos[T] = {2, 9, 33};
  static const int64_t slots[T] = {6, 1, -1};
  static const float khs[HKV] = {1.0f / 256, 1.5f}, vhs[HKV] = {0.75f, 3.0f};
  enum { CACHE = PAGES * P * HKV * D };
  float qh[T * HQ * D], kh[T * HKV * D], vh[T * HKV * D];
  unsigned char sent_c[CACHE], fused_k[CACHE], fused_v[CACHE], two_k[CACHE], two_v[CACHE];
  for (int e = 0; e < T * HQ * D; ++e) qh[e] = 3.0f * rnd();
  for (int e = 0; e < T * HKV * D; ++e) { kh[e] = 3.0f * rnd(); vh[e] = 3.0f * rnd(); }
  memset(sent_c, 0x5a, sizeof sent_c);
  cl_mem qd = buffer(c, sizeof qh, qh, q), kd = buffer(c, sizeof kh, kh, q), vd = buffer(c, sizeof vh, vh, q);
  cl_mem pd = buffer(c, sizeof pos, pos, q), sd = buffer(c, sizeof slots, slots, q);
  cl_mem qo = buffer(c, sizeof qh, NULL, q), qo2 = buffer(c, sizeof qh, NULL, q), ko = buffer(c, sizeof kh, NULL, q);
  cl_mem kc = buffer(c, CACHE, sent_c, q), vc = buffer(c, CACHE, sent_c, q);
  cl_mem kc2 = buffer(c, CACHE, sent_c, q), vc2 = buffer(c, CACHE, sent_c, q);
  cl_mem khd = buffer(c, sizeof khs, khs, q), vhd = buffer(c, sizeof vhs, vhs, q), short_hs = buffer(c, 4, vhs, q);

  clattn_rope_append_kv_args a;
  memset(&a, 0, sizeof a);
  clattn_paged_kv cache = {PAGES, P, HKV, D, 1 /* HND */, 3 /* fp8 e4m3 */, 0, 0, 0};
  a.append.k = kd; a.append.v = vd; a.append.src_dtype = 0; a.append.slot_mapping = sd; a.append.slot_dtype = 6;
  a.append.num_tokens = T; a.append.k_cache = kc; a.append.v_cache = vc; a.append.cache = cache;
  a.append.k_scale = 0.5f; a.append.v_scale = 2.0f;
  a.append.k_head_scales = khd; a.append.v_head_scales = vhd;
  a.q = qd; a.q_out = qo; a.num_qo_heads = HQ; a.q_out_dtype = 0;
  a.positions = pd; a.positions_dtype = 6;
  clattn_rope_config_init(&a.rope);
  a.rope.style = 1;
  a.rope.rotary_dim = D / 2;

  clattn_rope_append_kv_args bad = a;
  bad.append.v_head_scales = NULL;
  CHECK_FAILS(clattn_rope_append_kv(ctx, &bad, NULL), CLATTN_INVALID_ARGUMENT, "k_head_scales and v_head_scales");
  bad = a;
  bad.append.k_head_scales = short_hs; /* [Hkv] f32 needs 8 bytes */
  CHECK_FAILS(clattn_rope_append_kv(ctx, &bad, NULL), CLATTN_INVALID_ARGUMENT, "k_head_scales");
  read_back(q, kc, fused_k, CACHE);
  CHECK(memcmp(fused_k, sent_c, CACHE) == 0);

  CHECK(clattn_rope_append_kv(ctx, &a, NULL) == CLATTN_SUCCESS);
  clattn_rope_args r;
  memset(&r, 0, sizeof r);
  r.q = qd; r.q_out = qo2; r.k = kd; r.k_out = ko; r.dtype = 0; r.num_tokens = T;
  r.num_qo_heads = HQ; r.num_kv_heads = HKV; r.head_dim = D;
  r.positions = pd; r.positions_dtype = 6; r.rope = a.rope;
  CHECK(clattn_apply_rope(ctx, &r, NULL) == CLATTN_SUCCESS);
  clattn_append_kv_args ap = a.append;
  ap.k = ko; ap.k_cache = kc2; ap.v_cache = vc2;
  CHECK(clattn_append_kv(ctx, &ap, NULL) == CLATTN_SUCCESS);
  read_back(q, kc, fused_k, CACHE);
  read_back(q, vc, fused_v, CACHE);
  read_back(q, kc2, two_k, CACHE);
  read_back(q, vc2, two_v, CACHE);
  CHECK(memcmp(fused_k, two_k, CACHE) == 0 && memcmp(fused_v, two_v, CACHE) == 0);
  CHECK(memcmp(fused_k, sent_c, CACHE) != 0);
  int saturated = 0; /* head 0's k: |x| / (0.5 / 256) mostly past 448 -> e4m3 max 0x7e / 0xfe */
  for (int e = 0; e < CACHE; ++e) saturated += (fused_k[e] & 0x7f) == 0x7e;
  CHECK(saturated > 0);
  uint32_t faults = 0;
  CHECK(clattn_context_device_faults(ctx, &faults, 1) == CLATTN_SUCCESS && faults == 0);
  clReleaseMemObject(qd); clReleaseMemObject(kd); clReleaseMemObject(vd); clReleaseMemObject(pd);
  clReleaseMemObject(sd); clReleaseMemObject(qo); clReleaseMemObject(qo2); clReleaseMemObject(ko);
  clReleaseMemObject(kc); clReleaseMemObject(vc); clReleaseMemObject(kc2); clReleaseMemObject(vc2);
  clReleaseMemObject(khd); clReleaseMemObject(vhd); clReleaseMemObject(short_hs);
}

int main(void) {
  clattn_context ctx;
  cl_command_queue q;
  cl_context c;
  if (!open_context(&ctx, &q, &c)) return report();
  test_apply_rope(ctx, q, c);
  test_rope_append_kv(ctx, q, c);
  test_rope_append_kv_head_scales(ctx, q, c);
  clattn_context_release(ctx);
  return report();
}
