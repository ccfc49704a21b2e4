/* Extend through the C ABI, compiled as C: paged CSR and page-table plans (causal, window,
 * soft cap, custom mask), ragged prefill and cascade, each against a double-precision loop
 * written here; int8 and int4 caches and per-KV-head scales through the buffers' scale fields;
 * rejected calls name the argument and leave the output untouched. */
#include <math.h>

#include "c_test_util.h"

enum { B = 2, HQ = 4, HKV = 2, D = 64, P = 4, PAGES = 12, T = 6 };
static float kc[PAGES * P * HKV * D], vc[PAGES * P * HKV * D], qh[T * HQ * D];

static const float* kv_at(const float* c, const int32_t* pages, int j, int kh) {
  return c + ((size_t)(pages[j / P] * P + j % P) * HKV + kh) * D;
}

/* One query row (position qpos) over keys 0..kv_len-1 of the listed pages. mask: packed bits
 * starting at bit `bit0`, NULL = none. Writes out [HQ*D] and lse [HQ]. */
static void ref_row(const float* q, const int32_t* pages, int kv_len, int qpos, int causal, int window, double cap,
                    double scale, const unsigned char* mask, long bit0, double* out, double* lse) {
  for (int h = 0; h < HQ; ++h) {
    int kh = h / (HQ / HKV);
    double s[64], m = -INFINITY, den = 0;
    int vis[64];
    for (int j = 0; j < kv_len; ++j) {
      vis[j] = (!causal || j <= qpos) && (window < 0 || j >= qpos - window) &&
               (!mask || ((mask[(bit0 + j) / 8] >> ((bit0 + j) % 8)) & 1));
      double dot = 0;
      const float* k = kv_at(kc, pages, j, kh);
      for (int d = 0; d < D; ++d) dot += (double)q[h * D + d] * k[d];
      s[j] = dot * scale;
      if (cap > 0) s[j] = cap * tanh(s[j] / cap);
      if (vis[j] && s[j] > m) m = s[j];
    }
    for (int d = 0; d < D; ++d) out[h * D + d] = 0;
    for (int j = 0; j < kv_len; ++j) {
      if (!vis[j]) continue;
      double w = exp(s[j] - m);
      den += w;
      const float* v = kv_at(vc, pages, j, kh);
      for (int d = 0; d < D; ++d) out[h * D + d] += w * v[d];
    }
    for (int d = 0; d < D; ++d) out[h * D + d] = den > 0 ? out[h * D + d] / den : 0;
    if (lse) lse[h] = den > 0 ? m + log(den) : -INFINITY;
  }
}

static const int32_t indptr[B + 1] = {0, 3, 5}, indices[5] = {5, 1, 8, 3, 10}, last[B] = {1, 2};
static const int32_t qo_indptr[B + 1] = {0, 4, 6}, kv_len[B] = {9, 6};

/* Reference for the CSR batch above with these options. */
static void ref_batch(int causal, int window, double cap, double scale, const unsigned char* mask,
                      const int32_t* mask_indptr, double* out, double* lse) {
  for (int i = 0; i < B; ++i) {
    int qo = qo_indptr[i + 1] - qo_indptr[i];
    for (int j = 0; j < qo; ++j) {
      int row = qo_indptr[i] + j;
      ref_row(qh + (size_t)row * HQ * D, indices + indptr[i], kv_len[i], kv_len[i] - qo + j, causal, window, cap,
              scale, mask ? mask + mask_indptr[i] : NULL, (long)j * kv_len[i], out + (size_t)row * HQ * D,
              lse ? lse + row * HQ : NULL);
    }
  }
}

int main(void) {
  clattn_context ctx;
  cl_command_queue q;
  cl_context c;
  if (!open_context(&ctx, &q, &c)) return report();
  for (size_t e = 0; e < sizeof kc / sizeof kc[0]; ++e) { kc[e] = rnd(); vc[e] = rnd(); }
  for (size_t e = 0; e < sizeof qh / sizeof qh[0]; ++e) qh[e] = rnd();

  static float sentinel[T * HQ * D], out[T * HQ * D], lse[T * HQ];
  static double want[T * HQ * D], want_lse[T * HQ];
  for (int e = 0; e < T * HQ * D; ++e) sentinel[e] = 777.0f;
  cl_mem kd = buffer(c, sizeof kc, kc, q), vd = buffer(c, sizeof vc, vc, q), qd = buffer(c, sizeof qh, qh, q);
  cl_mem od = buffer(c, sizeof sentinel, sentinel, q), ld = buffer(c, sizeof lse, NULL, q);
  cl_mem ids = buffer(c, sizeof indices, indices, q);
  clattn_paged_kv cache = {PAGES, P, HKV, D, 0 /* NHD */, 0 /* f32 */, 0, 0, 0};
  clattn_csr csr = {B, P, indptr, indices, last, NULL, qo_indptr};

  clattn_extend_options opt;
  clattn_extend_options_init(&opt);
  CHECK(opt.causal == 1 && opt.window_left == -1 && opt.validate == 1);
  opt.num_qo_heads = HQ;
  opt.q_dtype = opt.o_dtype = 0;

  /* ---- rejected calls: nothing planned, output untouched */
  clattn_extend_plan plan = (clattn_extend_plan)1;
  clattn_csr noqo = csr;
  noqo.qo_indptr = NULL;
  CHECK_FAILS(clattn_extend_plan_csr(ctx, &noqo, &cache, &opt, &plan), CLATTN_INVALID_ARGUMENT, "csr.qo_indptr");
  CHECK(plan == NULL);
  CHECK_FAILS(clattn_extend_plan_csr(ctx, &csr, &cache, NULL, &plan), CLATTN_INVALID_ARGUMENT, "opt");
  CHECK_FAILS(clattn_extend_plan_csr(ctx, &csr, NULL, &opt, &plan), CLATTN_INVALID_ARGUMENT, "cache");
  CHECK_FAILS(clattn_extend_plan_csr(NULL, &csr, &cache, &opt, &plan), CLATTN_INVALID_ARGUMENT, "ctx");
  clattn_extend_options badp = opt;
  badp.params = "WG";
  CHECK_FAILS(clattn_extend_plan_csr(ctx, &csr, &cache, &badp, &plan), CLATTN_INVALID_ARGUMENT, "opt.params");
  int32_t bad_ids[5] = {5, 1, 8, 3, PAGES};
  clattn_csr badc = csr;
  badc.kv_indices = bad_ids;
  CHECK_FAILS(clattn_extend_plan_csr(ctx, &badc, &cache, &opt, &plan), CLATTN_INVALID_ARGUMENT, "kv_indices");
  CHECK(plan == NULL);

  /* ---- A: CSR, causal, default scale, with lse */
  CHECK(clattn_extend_plan_csr(ctx, &csr, &cache, &opt, &plan) == CLATTN_SUCCESS);
  clattn_extend_plan_info info;
  CHECK(clattn_extend_plan_info_get(plan, &info) == CLATTN_SUCCESS);
  CHECK(info.num_tokens == T && info.page_ids_needed == 5 && info.mask_bytes_needed == 0 && info.variant[0]);
  clattn_extend_buffers eb;
  memset(&eb, 0, sizeof eb);
  eb.q = qd; eb.k = kd; eb.v = vd; eb.page_ids = ids; eb.o = od; eb.lse = ld; eb.k_scale = eb.v_scale = 1.0f;
  clattn_extend_buffers nob = eb;
  nob.o = NULL;
  CHECK(clattn_extend_run(ctx, plan, &nob, NULL) == CLATTN_INVALID_ARGUMENT);
  CHECK(strlen(clattn_last_error()) > 0);
  read_back(q, od, out, sizeof out);
  CHECK(memcmp(out, sentinel, sizeof out) == 0);
  CHECK_FAILS(clattn_extend_run(ctx, NULL, &eb, NULL), CLATTN_INVALID_ARGUMENT, "plan");
  CHECK_FAILS(clattn_extend_run(ctx, plan, NULL, NULL), CLATTN_INVALID_ARGUMENT, "buffers");

  cl_event ev = NULL;
  clattn_enqueue en = {NULL, 0, NULL, &ev};
  CHECK(clattn_extend_run(ctx, plan, &eb, &en) == CLATTN_SUCCESS);
  CHECK(ev != NULL);
  if (ev) { clWaitForEvents(1, &ev); clReleaseEvent(ev); }
  read_back(q, od, out, sizeof out);
  read_back(q, ld, lse, sizeof lse);
  ref_batch(1, -1, 0, 1.0 / sqrt((double)D), NULL, NULL, want, want_lse);
  double w = worst(out, want, T * HQ * D), wl = worst(lse, want_lse, T * HQ);
  CHECK(w < 1e-4 && wl < 1e-4);
  printf("csr causal: max |o - ref| %.2g, max |lse - ref| %.2g\n", w, wl);
  clattn_extend_plan_release(plan);

  /* ---- B: page table, window 3, soft cap 5, sm_scale 0.2 */
  static const int32_t table[B * 3] = {5, 1, 8, 3, 10, -1};
  cl_mem tabd = buffer(c, sizeof table, table, q);
  clattn_page_table pt = {B, P, 3, table, kv_len, qo_indptr};
  clattn_extend_options ob = opt;
  ob.window_left = 3;
  ob.logits_soft_cap = 5.0f;
  ob.sm_scale = 0.2f;
  clattn_page_table noq = pt;
  noq.cu_seqlens_q = NULL;
  CHECK_FAILS(clattn_extend_plan_page_table(ctx, &noq, &cache, &ob, &plan), CLATTN_INVALID_ARGUMENT,
              "table.cu_seqlens_q");
  CHECK(clattn_extend_plan_page_table(ctx, &pt, &cache, &ob, &plan) == CLATTN_SUCCESS);
  eb.page_ids = tabd;
  eb.lse = NULL;
  CHECK(clattn_extend_run(ctx, plan, &eb, NULL) == CLATTN_SUCCESS);
  read_back(q, od, out, sizeof out);
  ref_batch(1, 3, 5.0, 0.2, NULL, NULL, want, NULL);
  w = worst(out, want, T * HQ * D);
  CHECK(w < 1e-4);
  printf("page table, window 3, soft cap 5: max |o - ref| %.2g\n", w);
  clattn_extend_plan_release(plan);
  eb.page_ids = ids;

  /* ---- C: custom mask ANDed with causal */
  static const int32_t mask_indptr[B + 1] = {0, 5, 7}; /* ceil(4*9/8) = 5, ceil(2*6/8) = 2 */
  unsigned char mask[7];
  for (int i = 0; i < 7; ++i) mask[i] = (unsigned char)((lcg_state = lcg_state * 1664525u + 1013904223u) >> 24);
  cl_mem maskd = buffer(c, sizeof mask, mask, q);
  clattn_extend_options oc = opt;
  oc.mask_indptr = mask_indptr;
  CHECK(clattn_extend_plan_csr(ctx, &csr, &cache, &oc, &plan) == CLATTN_SUCCESS);
  CHECK(clattn_extend_plan_info_get(plan, &info) == CLATTN_SUCCESS && info.mask_bytes_needed == 7);
  CHECK_FAILS(clattn_extend_run(ctx, plan, &eb, NULL), CLATTN_INVALID_ARGUMENT, "custom_mask");
  eb.custom_mask = maskd;
  CHECK(clattn_extend_run(ctx, plan, &eb, NULL) == CLATTN_SUCCESS);
  read_back(q, od, out, sizeof out);
  ref_batch(1, -1, 0, 1.0 / sqrt((double)D), mask, mask_indptr, want, NULL);
  {
    int nonzero = 0; /* the mask must leave something to compare */
    for (int e = 0; e < T * HQ * D; ++e) nonzero += want[e] != 0;
    CHECK(nonzero > T * HQ * D / 2);
  }
  w = worst(out, want, T * HQ * D);
  CHECK(w < 1e-4);
  printf("custom mask: max |o - ref| %.2g\n", w);
  clattn_extend_plan_release(plan);
  eb.custom_mask = NULL;

  /* ---- D: ragged prefill over contiguous K/V rows (the same keys gathered) */
  {
    static float kr[15 * HKV * D], vr[15 * HKV * D];
    static const int32_t kv_indptr[B + 1] = {0, 9, 15};
    for (int i = 0; i < B; ++i)
      for (int j = 0; j < kv_len[i]; ++j)
        for (int kh = 0; kh < HKV; ++kh) {
          memcpy(kr + ((size_t)(kv_indptr[i] + j) * HKV + kh) * D, kv_at(kc, indices + indptr[i], j, kh), D * 4);
          memcpy(vr + ((size_t)(kv_indptr[i] + j) * HKV + kh) * D, kv_at(vc, indices + indptr[i], j, kh), D * 4);
        }
    cl_mem krd = buffer(c, sizeof kr, kr, q), vrd = buffer(c, sizeof vr, vr, q);
    clattn_ragged_kv rk = {15, HKV, D, 0, 0, 0};
    CHECK_FAILS(clattn_prefill_plan_ragged(ctx, B, NULL, kv_indptr, &rk, &opt, &plan), CLATTN_INVALID_ARGUMENT,
                "qo_indptr");
    CHECK_FAILS(clattn_prefill_plan_ragged(ctx, B, qo_indptr, kv_indptr, NULL, &opt, &plan), CLATTN_INVALID_ARGUMENT,
                "kv");
    CHECK(clattn_prefill_plan_ragged(ctx, B, qo_indptr, kv_indptr, &rk, &opt, &plan) == CLATTN_SUCCESS);
    clattn_extend_buffers rb = eb;
    rb.k = krd; rb.v = vrd; rb.page_ids = NULL;
    CHECK(clattn_extend_run(ctx, plan, &rb, NULL) == CLATTN_SUCCESS);
    read_back(q, od, out, sizeof out);
    ref_batch(1, -1, 0, 1.0 / sqrt((double)D), NULL, NULL, want, NULL);
    w = worst(out, want, T * HQ * D);
    CHECK(w < 1e-4);
    printf("ragged prefill: max |o - ref| %.2g\n", w);
    clattn_extend_plan_release(plan);
    clReleaseMemObject(krd);
    clReleaseMemObject(vrd);
  }

  /* ---- E: cascade: prefix pages {5, 1} (8 tokens) shared; suffixes {8} (3 tokens, 2 rows)
   * and {3} (4 tokens, 3 rows). Equals causal extend over prefix + suffix. */
  {
    static const int32_t s_indptr[2] = {0, 2}, s_indices[2] = {5, 1}, s_last[1] = {4};
    static const int32_t u_indptr[B + 1] = {0, 1, 2}, u_indices[2] = {8, 3}, u_last[B] = {3, 4};
    static const int32_t u_qo[B + 1] = {0, 2, 5};
    static const int32_t full[B][3] = {{5, 1, 8}, {5, 1, 3}};
    const int full_len[B] = {11, 12};
    clattn_csr shared = {1, P, s_indptr, s_indices, s_last, NULL, NULL};
    clattn_csr unique = {B, P, u_indptr, u_indices, u_last, NULL, u_qo};
    clattn_cascade_plan cp = NULL;
    clattn_extend_options ow = opt;
    ow.window_left = 2;
    CHECK_FAILS(clattn_cascade_plan_create(ctx, &shared, &unique, &cache, &ow, &cp), CLATTN_INVALID_ARGUMENT,
                "window");
    CHECK(cp == NULL);
    CHECK(clattn_cascade_plan_create(ctx, &shared, &unique, &cache, &opt, &cp) == CLATTN_SUCCESS);
    int64_t tob = 0, tlb = 0;
    CHECK(clattn_cascade_tmp_bytes(cp, &tob, &tlb) == CLATTN_SUCCESS);
    CHECK(tob == 5 * HQ * D * 4 && tlb == 5 * HQ * 4);
    cl_mem sid = buffer(c, sizeof s_indices, s_indices, q), uid = buffer(c, sizeof u_indices, u_indices, q);
    cl_mem to = buffer(c, (size_t)tob, NULL, q), tls = buffer(c, (size_t)tlb, NULL, q);
    cl_mem tlu = buffer(c, (size_t)tlb, NULL, q);
    cl_mem od2 = buffer(c, 5 * HQ * D * 4, sentinel, q);
    clattn_cascade_buffers cb;
    memset(&cb, 0, sizeof cb);
    cb.q = qd; cb.k_cache = kd; cb.v_cache = vd; cb.shared_page_ids = sid; cb.unique_page_ids = uid; cb.o = od2;
    cb.tmp_o = to; cb.tmp_lse_shared = tls; cb.tmp_lse_unique = NULL; cb.k_scale = cb.v_scale = 1.0f;
    CHECK(clattn_cascade_run(ctx, cp, &cb, NULL) == CLATTN_INVALID_ARGUMENT); /* lse and tmp_lse_unique both NULL */
    read_back(q, od2, out, 5 * HQ * D * 4);
    CHECK(memcmp(out, sentinel, 5 * HQ * D * 4) == 0);
    cb.tmp_lse_unique = tlu;
    CHECK(clattn_cascade_run(ctx, cp, &cb, NULL) == CLATTN_SUCCESS);
    read_back(q, od2, out, 5 * HQ * D * 4);
    for (int i = 0; i < B; ++i) {
      int qo = u_qo[i + 1] - u_qo[i];
      for (int j = 0; j < qo; ++j) {
        int row = u_qo[i] + j;
        ref_row(qh + (size_t)row * HQ * D, full[i], full_len[i], full_len[i] - qo + j, 1, -1, 0,
                1.0 / sqrt((double)D), NULL, 0, want + (size_t)row * HQ * D, NULL);
      }
    }
    w = worst(out, want, 5 * HQ * D);
    CHECK(w < 1e-4);
    printf("cascade: max |o - ref| %.2g\n", w);
    clattn_cascade_plan_release(cp);
    clReleaseMemObject(sid); clReleaseMemObject(uid); clReleaseMemObject(to); clReleaseMemObject(tls);
    clReleaseMemObject(tlu); clReleaseMemObject(od2);
  }

  /* ---- quantised KV through the buffers' scale fields (case A's batch and reference):
   * an int8 copy of the cache written by clattn_append_kv (f32 row scales), within its
   * quantisation error; then the f32 cache divided by power-of-two per-head scales, with
   * k_head_scales / v_head_scales, exactly as case A. */
  {
    ref_batch(1, -1, 0, 1.0 / sqrt((double)D), NULL, NULL, want, want_lse);
    clattn_paged_kv c8 = cache;
    c8.dtype = 7;
    enum { N = PAGES * P };
    int32_t slots[N];
    for (int i = 0; i < N; ++i) slots[i] = i;
    cl_mem sl = buffer(c, sizeof slots, slots, q), k8 = buffer(c, sizeof kc / 4, NULL, q);
    cl_mem v8 = buffer(c, sizeof kc / 4, NULL, q), ks8 = buffer(c, N * HKV * 4, NULL, q);
    cl_mem vs8 = buffer(c, N * HKV * 4, NULL, q), od8 = buffer(c, sizeof sentinel, sentinel, q);
    clattn_append_kv_args a;
    memset(&a, 0, sizeof a);
    a.k = kd; a.v = vd; a.src_dtype = 0; a.slot_mapping = sl; a.slot_dtype = 5; a.num_tokens = N;
    a.k_cache = k8; a.v_cache = v8; a.cache = c8; a.k_scale = a.v_scale = 1.0f;
    a.k_scale_cache = ks8; a.v_scale_cache = vs8;
    CHECK(clattn_append_kv(ctx, &a, NULL) == CLATTN_SUCCESS);
    clattn_extend_plan p8 = NULL;
    CHECK(clattn_extend_plan_csr(ctx, &csr, &c8, &opt, &p8) == CLATTN_SUCCESS);
    clattn_extend_buffers b8 = eb;
    b8.k = k8; b8.v = v8; b8.o = od8; b8.lse = NULL;
    CHECK_FAILS(clattn_extend_run(ctx, p8, &b8, NULL), CLATTN_INVALID_ARGUMENT, "k_scale_cache");
    b8.k_scale_cache = ks8; b8.v_scale_cache = vs8;
    CHECK(clattn_extend_run(ctx, p8, &b8, NULL) == CLATTN_SUCCESS);
    read_back(q, od8, out, sizeof out);
    w = worst(out, want, T * HQ * D);
    CHECK(w < 0.05);
    printf("int8 extend: max |o - f32 ref| %.2g\n", w);

    static float kh[sizeof kc / sizeof kc[0]], vh[sizeof vc / sizeof vc[0]];
    const float khs[HKV] = {2.0f, 0.5f}, vhs[HKV] = {0.25f, 4.0f};
    for (size_t e = 0; e < sizeof kc / sizeof kc[0]; ++e) {
      const int h = (int)(e / D % HKV);
      kh[e] = kc[e] / khs[h], vh[e] = vc[e] / vhs[h];
    }
    cl_mem khd = buffer(c, sizeof kh, kh, q), vhd = buffer(c, sizeof vh, vh, q);
    cl_mem khsd = buffer(c, sizeof khs, khs, q), vhsd = buffer(c, sizeof vhs, vhs, q);
    clattn_extend_plan pf = NULL;
    CHECK(clattn_extend_plan_csr(ctx, &csr, &cache, &opt, &pf) == CLATTN_SUCCESS);
    clattn_extend_buffers bh = eb;
    bh.k = khd; bh.v = vhd; bh.o = od8; bh.lse = NULL; bh.k_head_scales = khsd;
    CHECK_FAILS(clattn_extend_run(ctx, pf, &bh, NULL), CLATTN_INVALID_ARGUMENT, "go together");
    bh.v_head_scales = vhsd;
    CHECK(clattn_extend_run(ctx, pf, &bh, NULL) == CLATTN_SUCCESS);
    read_back(q, od8, out, sizeof out);
    w = worst(out, want, T * HQ * D);
    CHECK(w < 1e-4);
    printf("per-head scales: max |o - ref| %.2g\n", w);

    /* int4 (groups of 32, f32 [scale, zero] pairs) written by clattn_append_kv: a group that
     * does not divide head_dim is rejected naming quant_group; the run matches the reference
     * over the rows the stored nibbles and pairs dequantise to, (u - zero) * scale. */
    enum { NG = D / 32 };
    clattn_paged_kv c4 = cache;
    c4.dtype = 8;
    c4.quant_group = 48;
    cl_mem k4 = buffer(c, sizeof kc / 8, NULL, q), v4 = buffer(c, sizeof kc / 8, NULL, q);
    cl_mem ks4 = buffer(c, N * HKV * NG * 2 * 4, NULL, q), vs4 = buffer(c, N * HKV * NG * 2 * 4, NULL, q);
    clattn_extend_plan p4 = NULL;
    CHECK_FAILS(clattn_extend_plan_csr(ctx, &csr, &c4, &opt, &p4), CLATTN_INVALID_ARGUMENT, "quant_group");
    CHECK(p4 == NULL);
    c4.quant_group = 32;
    a.k_cache = k4; a.v_cache = v4; a.cache = c4; a.k_scale_cache = ks4; a.v_scale_cache = vs4;
    CHECK(clattn_append_kv(ctx, &a, NULL) == CLATTN_SUCCESS);
    CHECK(clattn_extend_plan_csr(ctx, &csr, &c4, &opt, &p4) == CLATTN_SUCCESS);
    clattn_extend_buffers b4 = eb;
    b4.k = k4; b4.v = v4; b4.o = od8; b4.lse = NULL; b4.k_scale_cache = ks4;
    CHECK_FAILS(clattn_extend_run(ctx, p4, &b4, NULL), CLATTN_INVALID_ARGUMENT, "v_scale_cache");
    b4.v_scale_cache = vs4;
    CHECK(clattn_extend_run(ctx, p4, &b4, NULL) == CLATTN_SUCCESS);
    read_back(q, od8, out, sizeof out);
    static unsigned char nib[2][sizeof kc / 8];
    static float pairs[2][N * HKV * NG * 2], kf[sizeof kc / sizeof kc[0]], vf[sizeof vc / sizeof vc[0]];
    read_back(q, k4, nib[0], sizeof nib[0]);
    read_back(q, v4, nib[1], sizeof nib[1]);
    read_back(q, ks4, pairs[0], sizeof pairs[0]);
    read_back(q, vs4, pairs[1], sizeof pairs[1]);
    memcpy(kf, kc, sizeof kc);
    memcpy(vf, vc, sizeof vc);
    for (size_t e = 0; e < sizeof kc / sizeof kc[0]; ++e) { /* NHD, contiguous: pair of row e / D, group */
      const size_t pr = (e / D * NG + e % D / 32) * 2;
      kc[e] = (float)(((nib[0][e / 2] >> (e % 2 * 4)) & 15) - pairs[0][pr + 1]) * pairs[0][pr];
      vc[e] = (float)(((nib[1][e / 2] >> (e % 2 * 4)) & 15) - pairs[1][pr + 1]) * pairs[1][pr];
    }
    ref_batch(1, -1, 0, 1.0 / sqrt((double)D), NULL, NULL, want, NULL);
    memcpy(kc, kf, sizeof kc);
    memcpy(vc, vf, sizeof vc);
    w = worst(out, want, T * HQ * D);
    CHECK(w < 1e-4);
    printf("int4 extend: max |o - ref over the dequantised rows| %.2g\n", w);

    clattn_extend_plan_release(p4);
    clattn_extend_plan_release(p8);
    clattn_extend_plan_release(pf);
    clReleaseMemObject(sl); clReleaseMemObject(k8); clReleaseMemObject(v8); clReleaseMemObject(ks8);
    clReleaseMemObject(vs8); clReleaseMemObject(od8); clReleaseMemObject(khd); clReleaseMemObject(vhd);
    clReleaseMemObject(khsd); clReleaseMemObject(vhsd); clReleaseMemObject(k4); clReleaseMemObject(v4);
    clReleaseMemObject(ks4); clReleaseMemObject(vs4);
  }

  clReleaseMemObject(kd); clReleaseMemObject(vd); clReleaseMemObject(qd); clReleaseMemObject(od);
  clReleaseMemObject(ld); clReleaseMemObject(ids); clReleaseMemObject(tabd); clReleaseMemObject(maskd);
  clattn_context_release(ctx);
  return report();
}
