/* A decode step end to end through the C ABI, compiled as C: KV appended with
 * clattn_append_kv, CSR plan + run, checked against a double-precision loop here;
 * bad metadata is rejected with the output untouched. */
#include <math.h>

#include "c_test_util.h"

enum { B = 3, HQ = 4, HKV = 2, D = 64, P = 16, PAGES = 8 };
static const int kv_len[B] = {20, 1, 33};

int main(void) {
  clattn_context ctx;
  cl_command_queue q;
  cl_context c;
  if (!open_context(&ctx, &q, &c)) return report();

  /* Pages per request (request 2 reuses page 0 as a shared prefix page is not needed here:
   * each request owns distinct pages). Slots: page*P + offset. */
  static const int32_t indptr[B + 1] = {0, 2, 3, 6};
  static const int32_t indices[6] = {5, 1, 7, 0, 2, 4};
  int32_t last[B];
  for (int i = 0; i < B; ++i) last[i] = kv_len[i] - (indptr[i + 1] - indptr[i] - 1) * P;

  /* New K/V rows for every token, appended through slot_mapping. */
  int ntok = 0;
  for (int i = 0; i < B; ++i) ntok += kv_len[i];
  float* knew = malloc(sizeof(float) * ntok * HKV * D);
  float* vnew = malloc(sizeof(float) * ntok * HKV * D);
  int32_t* slots = malloc(sizeof(int32_t) * ntok);
  for (int t = 0, i = 0; i < B; ++i)
    for (int p = 0; p < kv_len[i]; ++p, ++t) {
      slots[t] = indices[indptr[i] + p / P] * P + p % P;
      for (int e = 0; e < HKV * D; ++e) { knew[t * HKV * D + e] = rnd(); vnew[t * HKV * D + e] = rnd(); }
    }
  float qh[B * HQ * D];
  for (int e = 0; e < B * HQ * D; ++e) qh[e] = rnd();

  size_t cache_bytes = sizeof(float) * PAGES * P * HKV * D;
  cl_mem kc = buffer(c, cache_bytes, NULL, q), vc = buffer(c, cache_bytes, NULL, q);
  cl_mem kn = buffer(c, sizeof(float) * ntok * HKV * D, knew, q), vn = buffer(c, sizeof(float) * ntok * HKV * D, vnew, q);
  cl_mem sl = buffer(c, sizeof(int32_t) * ntok, slots, q);
  cl_mem qd = buffer(c, sizeof qh, qh, q);
  cl_mem ids = buffer(c, sizeof indices, indices, q);
  float sentinel[B * HQ * D];
  for (int e = 0; e < B * HQ * D; ++e) sentinel[e] = 777.0f;
  cl_mem od = buffer(c, sizeof sentinel, sentinel, q);

  clattn_paged_kv cache = {PAGES, P, HKV, D, 0 /* NHD */, 0 /* f32 */, 0, 0, 0};
  clattn_append_kv_args ap;
  memset(&ap, 0, sizeof ap);
  ap.k = kn; ap.v = vn; ap.src_dtype = 0; ap.slot_mapping = sl; ap.slot_dtype = 5; ap.num_tokens = ntok;
  ap.slot_mapping_host = slots; ap.k_cache = kc; ap.v_cache = vc; ap.cache = cache; ap.k_scale = ap.v_scale = 1.0f;
  CHECK(clattn_append_kv(ctx, &ap, NULL) == CLATTN_SUCCESS);

  clattn_decode_options opt;
  clattn_decode_options_init(&opt);
  opt.num_qo_heads = HQ;
  opt.q_dtype = opt.o_dtype = 0;
  clattn_csr csr = {B, P, indptr, indices, last, NULL, NULL};

  /* Rejected: a page id outside the cache. Nothing is enqueued, the output keeps its sentinel. */
  int32_t bad_indices[6];
  memcpy(bad_indices, indices, sizeof bad_indices);
  bad_indices[4] = PAGES + 3;
  clattn_csr bad = csr;
  bad.kv_indices = bad_indices;
  clattn_decode_plan plan = NULL;
  CHECK(clattn_decode_plan_csr(ctx, &bad, &cache, &opt, &plan) == CLATTN_INVALID_ARGUMENT);
  CHECK(plan == NULL);
  CHECK(strstr(clattn_last_error(), "kv_indices") != NULL);

  clattn_decode_options badp = opt;
  badp.params = "WG=x";
  CHECK(clattn_decode_plan_csr(ctx, &csr, &cache, &badp, &plan) == CLATTN_INVALID_ARGUMENT);
  CHECK(strstr(clattn_last_error(), "opt.params") != NULL);
  badp.params = "NOPE=3"; /* well-formed, but decode has no such parameter */
  CHECK(clattn_decode_plan_csr(ctx, &csr, &cache, &badp, &plan) == CLATTN_INVALID_ARGUMENT);
  CHECK(plan == NULL);
  CHECK(strstr(clattn_last_error(), "'NOPE'") != NULL);

  CHECK(clattn_decode_plan_csr(ctx, &csr, &cache, &opt, &plan) == CLATTN_SUCCESS);
  int64_t ws = 0;
  CHECK(clattn_decode_plan_workspace_bytes(plan, &ws) == CLATTN_SUCCESS);
  cl_mem wsm = ws > 0 ? buffer(c, (size_t)ws, NULL, q) : NULL;
  clattn_decode_buffers bufs;
  memset(&bufs, 0, sizeof bufs);
  bufs.q = qd; bufs.k_cache = kc; bufs.v_cache = vc; bufs.page_ids = ids; bufs.o = od; bufs.workspace = wsm;
  bufs.k_scale = bufs.v_scale = 1.0f;

  clattn_decode_buffers nobufs = bufs;
  nobufs.q = NULL;
  CHECK(clattn_decode_run(ctx, plan, &nobufs, NULL) == CLATTN_INVALID_ARGUMENT);
  float out[B * HQ * D];
  read_back(q, od, out, sizeof out);
  CHECK(memcmp(out, sentinel, sizeof out) == 0);

  CHECK(clattn_decode_run(ctx, plan, &bufs, NULL) == CLATTN_SUCCESS);
  read_back(q, od, out, sizeof out);

  /* Reference: softmax(q.k / sqrt(D)) v over each request's tokens, in double. */
  double max_err = 0;
  for (int t0 = 0, i = 0; i < B; t0 += kv_len[i], ++i)
    for (int h = 0; h < HQ; ++h) {
      int kh = h / (HQ / HKV);
      double m = -INFINITY, den = 0, acc[D];
      double s[64];
      for (int j = 0; j < kv_len[i]; ++j) {
        double dot = 0;
        for (int d = 0; d < D; ++d) dot += (double)qh[(i * HQ + h) * D + d] * knew[((t0 + j) * HKV + kh) * D + d];
        s[j] = dot / sqrt((double)D);
        if (s[j] > m) m = s[j];
      }
      for (int d = 0; d < D; ++d) acc[d] = 0;
      for (int j = 0; j < kv_len[i]; ++j) {
        double w = exp(s[j] - m);
        den += w;
        for (int d = 0; d < D; ++d) acc[d] += w * vnew[((t0 + j) * HKV + kh) * D + d];
      }
      for (int d = 0; d < D; ++d) {
        double err = fabs(acc[d] / den - out[(i * HQ + h) * D + d]);
        if (err > max_err) max_err = err;
      }
    }
  CHECK(max_err < 1e-4);
  if (max_err >= 1e-4) fprintf(stderr, "worst error %g\n", max_err);

  /* The same rows through an int8 cache (row scales in f16 scale caches): within the
   * quantisation error of the f32 result; the scale caches are required. */
  {
    clattn_paged_kv c8 = cache;
    c8.dtype = 7; /* int8 */
    c8.scale_dtype = 1; /* f16 */
    const size_t n8 = (size_t)PAGES * P * HKV * D, ns = (size_t)PAGES * P * HKV * 2;
    cl_mem k8 = buffer(c, n8, NULL, q), v8 = buffer(c, n8, NULL, q), ks8 = buffer(c, ns, NULL, q),
           vs8 = buffer(c, ns, NULL, q);
    clattn_append_kv_args a8 = ap;
    a8.k_cache = k8; a8.v_cache = v8; a8.cache = c8;
    CHECK(clattn_append_kv(ctx, &a8, NULL) == CLATTN_INVALID_ARGUMENT); /* no scale caches */
    CHECK(strstr(clattn_last_error(), "k_scale_cache") != NULL);
    a8.k_scale_cache = ks8; a8.v_scale_cache = vs8;
    CHECK(clattn_append_kv(ctx, &a8, NULL) == CLATTN_SUCCESS);
    clattn_decode_plan p8 = NULL;
    CHECK(clattn_decode_plan_csr(ctx, &csr, &c8, &opt, &p8) == CLATTN_SUCCESS);
    int64_t ws8 = 0;
    CHECK(clattn_decode_plan_workspace_bytes(p8, &ws8) == CLATTN_SUCCESS);
    cl_mem wsm8 = ws8 > 0 ? buffer(c, (size_t)ws8, NULL, q) : NULL;
    clattn_decode_buffers b8 = bufs;
    b8.k_cache = k8; b8.v_cache = v8; b8.workspace = wsm8; b8.k_scale_cache = ks8; b8.v_scale_cache = vs8;
    float out8[B * HQ * D];
    CHECK(clattn_decode_run(ctx, p8, &b8, NULL) == CLATTN_SUCCESS);
    read_back(q, od, out8, sizeof out8);
    double e8 = 0;
    for (int e = 0; e < B * HQ * D; ++e) e8 = fmax(e8, fabs((double)out8[e] - out[e]));
    CHECK(e8 < 0.05);
    if (e8 >= 0.05) fprintf(stderr, "int8 vs f32: worst difference %g\n", e8);
    clattn_decode_plan_release(p8);
    clReleaseMemObject(k8); clReleaseMemObject(v8); clReleaseMemObject(ks8); clReleaseMemObject(vs8);
    if (wsm8) clReleaseMemObject(wsm8);
  }

  /* The same rows through an int4 cache (groups of 32, [scale, zero] pairs in f32 scale
   * caches): within int4's quantisation error (a step of range / 15) of the f32 result; a
   * quant_group that does not divide head_dim is rejected naming it. */
  {
    clattn_paged_kv c4 = cache;
    c4.dtype = 8; /* int4 */
    c4.quant_group = 48;
    const size_t n4 = (size_t)PAGES * P * HKV * D / 2, ns = (size_t)PAGES * P * HKV * (D / 32) * 2 * sizeof(float);
    cl_mem k4 = buffer(c, n4, NULL, q), v4 = buffer(c, n4, NULL, q), ks4 = buffer(c, ns, NULL, q),
           vs4 = buffer(c, ns, NULL, q);
    clattn_append_kv_args a4 = ap;
    a4.k_cache = k4; a4.v_cache = v4; a4.cache = c4; a4.k_scale_cache = ks4; a4.v_scale_cache = vs4;
    CHECK(clattn_append_kv(ctx, &a4, NULL) == CLATTN_INVALID_ARGUMENT);
    CHECK(strstr(clattn_last_error(), "quant_group") != NULL);
    c4.quant_group = a4.cache.quant_group = 32;
    CHECK(clattn_append_kv(ctx, &a4, NULL) == CLATTN_SUCCESS);
    clattn_decode_plan p4 = NULL;
    CHECK(clattn_decode_plan_csr(ctx, &csr, &c4, &opt, &p4) == CLATTN_SUCCESS);
    int64_t ws4 = 0;
    CHECK(clattn_decode_plan_workspace_bytes(p4, &ws4) == CLATTN_SUCCESS);
    cl_mem wsm4 = ws4 > 0 ? buffer(c, (size_t)ws4, NULL, q) : NULL;
    clattn_decode_buffers b4 = bufs;
    b4.k_cache = k4; b4.v_cache = v4; b4.workspace = wsm4; b4.k_scale_cache = ks4; b4.v_scale_cache = vs4;
    float out4[B * HQ * D];
    CHECK(clattn_decode_run(ctx, p4, &b4, NULL) == CLATTN_SUCCESS);
    read_back(q, od, out4, sizeof out4);
    double e4 = 0;
    for (int e = 0; e < B * HQ * D; ++e) e4 = fmax(e4, fabs((double)out4[e] - out[e]));
    CHECK(e4 < 0.15);
    if (e4 >= 0.15) fprintf(stderr, "int4 vs f32: worst difference %g\n", e4);
    clattn_decode_plan_release(p4);
    clReleaseMemObject(k4); clReleaseMemObject(v4); clReleaseMemObject(ks4); clReleaseMemObject(vs4);
    if (wsm4) clReleaseMemObject(wsm4);
  }

  clattn_decode_plan_release(plan);
  clReleaseMemObject(kc); clReleaseMemObject(vc); clReleaseMemObject(kn); clReleaseMemObject(vn);
  clReleaseMemObject(sl); clReleaseMemObject(qd); clReleaseMemObject(ids); clReleaseMemObject(od);
  if (wsm) clReleaseMemObject(wsm);
  free(knew); free(vnew); free(slots);
  clattn_context_release(ctx);
  return report();
}
