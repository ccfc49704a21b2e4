/* HSA through the C ABI, compiled as C: plans from CSR and page table, plan info, hsa_run
 * against a double-precision selection + masked softmax written here (group and head
 * strategies, no window, fused window, window not fused), run == select then decode,
 * explicit candidates; rejected calls name the argument and leave the outputs untouched.
 *
 * q and K hold small integers, so landmark scores are exact integers times sm_scale in
 * float and double alike: the selection (ties included) is compared exactly. */
#include <math.h>

#include "c_test_util.h"

enum { B = 3, HKV = 2, G = 2, HQ = HKV * G, D = 64, P = 16, PAGES = 12, MAXPG = 5, TOPK = 2 };
static const int32_t kv_len[B] = {70, 9, 40};
static const int32_t indptr[B + 1] = {0, 5, 6, 9};
static const int32_t indices[9] = {7, 2, 11, 0, 5, 9, 3, 10, 1};
static const double kScale = 0.05;

static float kc[PAGES * P * HKV * D], vc[PAGES * P * HKV * D], qh[B * HQ * D];

static size_t at(int page, int t, int h) { return (((size_t)page * P + t) * HKV + h) * D; }
static int num_sel(int head) { return head ? HQ : HKV; }

/* Selection of request i: ids [H_sel, TOPK] (physical, -1 padded), scores (-inf padded). */
static void ref_select(int i, int head, int W, int32_t* ids, double* sc) {
  const int L = kv_len[i], cut = W > 0 ? (L > W ? L - W : 0) : L, C = cut / P;
  const int32_t* pg = indices + indptr[i];
  for (int h = 0; h < num_sel(head); ++h) {
    double dot[MAXPG];
    const int kvh = head ? h / G : h;
    for (int c = 0; c < C; ++c) {
      const float* k = kc + at(pg[c], P - 1, kvh);
      dot[c] = 0;
      for (int g = 0; g < (head ? 1 : G); ++g) {
        const float* qq = qh + ((size_t)i * HQ + (head ? h : h * G + g)) * D;
        for (int d = 0; d < D; ++d) dot[c] += (double)qq[d] * k[d];
      }
    }
    int n = 0;
    for (int c = 0; c < C; ++c) { /* rank: higher scores, then equal scores of lower index */
      int rank = 0;
      for (int o = 0; o < C; ++o) rank += dot[o] > dot[c] || (dot[o] == dot[c] && o < c);
      if (rank < TOPK) { ids[h * TOPK + n] = pg[c]; sc[h * TOPK + n] = dot[c] * kScale; ++n; }
    }
    for (; n < TOPK; ++n) { ids[h * TOPK + n] = -1; sc[h * TOPK + n] = -INFINITY; }
  }
}

/* Decode of request i over ids [H_sel, TOPK]: the window (when fused) and the keys before it
 * whose page is selected, each key once. */
static void ref_decode(int i, int head, int W, int fuse, const int32_t* ids, double* o, double* lse) {
  const int L = kv_len[i], cut = W > 0 ? (L > W ? L - W : 0) : L;
  const int32_t* pg = indices + indptr[i];
  for (int h = 0; h < HQ; ++h) {
    const int kvh = h / G, list = head ? h : kvh;
    const float* qq = qh + ((size_t)i * HQ + h) * D;
    double s[128], m = -INFINITY, den = 0;
    int use[128];
    for (int t = 0; t < L; ++t) {
      use[t] = fuse && W > 0 && t >= cut;
      for (int j = 0; j < TOPK && t < cut; ++j) use[t] |= ids[list * TOPK + j] == pg[t / P];
      s[t] = 0;
      for (int d = 0; d < D; ++d) s[t] += (double)qq[d] * kc[at(pg[t / P], t % P, kvh) + d];
      s[t] *= kScale;
      if (use[t] && s[t] > m) m = s[t];
    }
    for (int d = 0; d < D; ++d) o[h * D + d] = 0;
    for (int t = 0; t < L; ++t) {
      if (!use[t]) continue;
      double w = exp(s[t] - m);
      den += w;
      for (int d = 0; d < D; ++d) o[h * D + d] += w * vc[at(pg[t / P], t % P, kvh) + d];
    }
    for (int d = 0; d < D; ++d) o[h * D + d] = den > 0 ? o[h * D + d] / den : 0;
    lse[h] = den > 0 ? m + log(den) : -INFINITY;
  }
}

typedef struct {
  cl_mem q, k, v, ids, table, sel, sc, o, lse;
} Bufs;

static void fill_i32(cl_command_queue q, cl_mem m, int32_t x, int n) {
  int32_t* h = malloc(sizeof(int32_t) * n);
  for (int e = 0; e < n; ++e) h[e] = x;
  clEnqueueWriteBuffer(q, m, CL_TRUE, 0, sizeof(int32_t) * n, h, 0, NULL, NULL);
  free(h);
}

static void fill_f32(cl_command_queue q, cl_mem m, float x, int n) {
  float* h = malloc(sizeof(float) * n);
  for (int e = 0; e < n; ++e) h[e] = x;
  clEnqueueWriteBuffer(q, m, CL_TRUE, 0, sizeof(float) * n, h, 0, NULL, NULL);
  free(h);
}

/* Plans one configuration (CSR or page table), checks the plan info, runs it and compares
 * selection, o and lse with the references; then select + decode must give the same bits. */
static void check_config(clattn_context ctx, cl_command_queue q, cl_context c, const Bufs* bf, int head, int W,
                         int fuse, int table) {
  const int nsel = num_sel(head), nids = B * nsel * TOPK;
  fprintf(stderr, "config: %s W=%d fuse=%d %s\n", head ? "head" : "group", W, fuse, table ? "table" : "csr");
  clattn_paged_kv cache = {PAGES, P, HKV, D, 0, 0, 0, 0, 0};
  clattn_hsa_options opt;
  clattn_hsa_options_init(&opt);
  opt.num_qo_heads = HQ;
  opt.topk = TOPK;
  opt.strategy = head ? CLATTN_HSA_HEAD : CLATTN_HSA_GROUP;
  opt.window_size = W;
  opt.fuse_window = fuse;
  opt.q_dtype = opt.o_dtype = 0;
  opt.sm_scale = (float)kScale;
  int32_t last[B], pt[B * MAXPG];
  for (int i = 0; i < B; ++i) last[i] = kv_len[i] - (indptr[i + 1] - indptr[i] - 1) * P;
  for (int i = 0; i < B; ++i)
    for (int j = 0; j < MAXPG; ++j) pt[i * MAXPG + j] = j < indptr[i + 1] - indptr[i] ? indices[indptr[i] + j] : -1;
  clattn_csr csr = {B, P, indptr, indices, last, NULL, NULL};
  clattn_page_table tab = {B, P, MAXPG, pt, kv_len, NULL};
  clattn_hsa_plan plan = NULL;
  CHECK((table ? clattn_hsa_plan_page_table(ctx, &tab, &cache, &opt, &plan)
               : clattn_hsa_plan_csr(ctx, &csr, &cache, &opt, &plan)) == CLATTN_SUCCESS);
  if (!plan) return;

  clattn_hsa_plan_info info;
  CHECK(clattn_hsa_plan_info_get(plan, &info) == CLATTN_SUCCESS);
  CHECK(info.batch_size == B && info.num_qo_heads == HQ && info.num_kv_heads == HKV && info.head_dim == D);
  CHECK(info.page_size == P && info.topk == TOPK && info.num_sel_heads == nsel);
  CHECK(info.strategy == opt.strategy && info.window_size == W && info.fuse_window == fuse);
  CHECK(info.page_ids_needed == (table ? B * MAXPG : 9));
  CHECK(strcmp(info.select_variant, "generic") == 0 && info.decode_variant[0] != '\0');
  int64_t ws = 0;
  CHECK(clattn_hsa_plan_workspace_bytes(plan, &ws) == CLATTN_SUCCESS && ws == info.workspace_bytes && ws > 0);
  int32_t ncand[B];
  CHECK(clattn_hsa_plan_num_candidates(plan, ncand, B) == CLATTN_SUCCESS);
  int most = 0;
  for (int i = 0; i < B; ++i) {
    const int cut = W > 0 ? (kv_len[i] > W ? kv_len[i] - W : 0) : kv_len[i];
    CHECK(ncand[i] == cut / P);
    if (cut / P > most) most = cut / P;
  }
  CHECK(info.max_candidates == (most > 1 ? most : 1));

  cl_mem wsm = buffer(c, (size_t)ws, NULL, q);
  clattn_hsa_buffers hb;
  memset(&hb, 0, sizeof hb);
  hb.q = bf->q; hb.k_cache = bf->k; hb.v_cache = bf->v; hb.page_ids = table ? bf->table : bf->ids;
  hb.selected_page_ids = bf->sel; hb.selected_scores = bf->sc; hb.o = bf->o; hb.lse = bf->lse; hb.workspace = wsm;
  hb.k_scale = hb.v_scale = 1.0f;
  fill_i32(q, bf->sel, 99, nids);
  CHECK(clattn_hsa_run(ctx, plan, &hb, NULL) == CLATTN_SUCCESS);
  int32_t got_ids[B * HQ * TOPK];
  float got_sc[B * HQ * TOPK], got_o[B * HQ * D], got_lse[B * HQ];
  read_back(q, bf->sel, got_ids, sizeof(int32_t) * nids);
  read_back(q, bf->sc, got_sc, sizeof(float) * nids);
  read_back(q, bf->o, got_o, sizeof got_o);
  read_back(q, bf->lse, got_lse, sizeof got_lse);

  double err_o = 0, err_lse = 0;
  int bad_ids = 0, bad_sc = 0;
  for (int i = 0; i < B; ++i) {
    int32_t ids[HQ * TOPK];
    double sc[HQ * TOPK], o[HQ * D], lse[HQ];
    ref_select(i, head, W, ids, sc);
    for (int j = 0; j < nsel * TOPK; ++j) {
      const int32_t gi = got_ids[i * nsel * TOPK + j];
      const float gs = got_sc[i * nsel * TOPK + j];
      bad_ids += gi != ids[j];
      bad_sc += isinf(sc[j]) ? !(isinf(gs) && gs < 0) : fabs(gs - sc[j]) > 1e-5 * (1 + fabs(sc[j]));
    }
    ref_decode(i, head, W, fuse, ids, o, lse);
    for (int e = 0; e < HQ * D; ++e) {
      const double x = fabs(got_o[i * HQ * D + e] - o[e]);
      if (!(x <= err_o)) err_o = x;
    }
    for (int h = 0; h < HQ; ++h) {
      const float g = got_lse[i * HQ + h];
      const double x = isinf(lse[h]) ? (isinf(g) && g < 0 ? 0 : INFINITY) : fabs(g - lse[h]);
      if (!(x <= err_lse)) err_lse = x;
    }
  }
  CHECK(bad_ids == 0);
  CHECK(bad_sc == 0);
  CHECK(err_o < 1e-4);
  CHECK(err_lse < 1e-4);
  if (bad_ids || bad_sc || !(err_o < 1e-4) || !(err_lse < 1e-4))
    fprintf(stderr, "  %d ids, %d scores differ; worst o error %g, lse error %g\n", bad_ids, bad_sc, err_o, err_lse);

  /* select, then decode over its output, into fresh buffers: the same bits as run. */
  cl_mem sel2 = buffer(c, sizeof(int32_t) * nids, NULL, q), o2 = buffer(c, sizeof got_o, NULL, q);
  cl_mem lse2 = buffer(c, sizeof got_lse, NULL, q);
  clattn_hsa_buffers hb2 = hb;
  hb2.selected_page_ids = sel2; hb2.selected_scores = NULL; hb2.o = o2; hb2.lse = lse2;
  cl_event ev = NULL;
  clattn_enqueue enq = {NULL, 0, NULL, &ev};
  CHECK(clattn_hsa_select(ctx, plan, &hb2, &enq) == CLATTN_SUCCESS);
  clattn_enqueue after = {NULL, ev ? 1u : 0u, ev ? &ev : NULL, NULL};
  CHECK(clattn_hsa_decode(ctx, plan, &hb2, &after) == CLATTN_SUCCESS);
  if (ev) clReleaseEvent(ev);
  int32_t ids2[B * HQ * TOPK];
  float o2h[B * HQ * D], lse2h[B * HQ];
  read_back(q, sel2, ids2, sizeof(int32_t) * nids);
  read_back(q, o2, o2h, sizeof o2h);
  read_back(q, lse2, lse2h, sizeof lse2h);
  CHECK(memcmp(ids2, got_ids, sizeof(int32_t) * nids) == 0);
  CHECK(memcmp(o2h, got_o, sizeof o2h) == 0);
  CHECK(memcmp(lse2h, got_lse, sizeof lse2h) == 0);

  clReleaseMemObject(sel2); clReleaseMemObject(o2); clReleaseMemObject(lse2); clReleaseMemObject(wsm);
  clattn_hsa_plan_release(plan);
}

/* Explicit candidates [B, C] with a mask: select scores exactly those pages. */
static void check_candidates(clattn_context ctx, cl_command_queue q, cl_context c, const Bufs* bf) {
  enum { C = 3 };
  clattn_paged_kv cache = {PAGES, P, HKV, D, 0, 0, 0, 0, 0};
  clattn_hsa_options opt;
  clattn_hsa_options_init(&opt);
  opt.num_qo_heads = HQ; opt.topk = TOPK; opt.num_candidates = C; opt.q_dtype = opt.o_dtype = 0;
  opt.sm_scale = (float)kScale;
  int32_t last[B];
  for (int i = 0; i < B; ++i) last[i] = kv_len[i] - (indptr[i + 1] - indptr[i] - 1) * P;
  clattn_csr csr = {B, P, indptr, indices, last, NULL, NULL};
  clattn_hsa_plan plan = NULL;
  CHECK(clattn_hsa_plan_csr(ctx, &csr, &cache, &opt, &plan) == CLATTN_SUCCESS);
  if (!plan) return;
  /* Request 0: pages 4, 6, 8 with 6 masked out; 1: page 6 and -1; 2: 3 pages, one outside the pool. */
  const int32_t cand[B * C] = {4, 6, 8, 6, -1, -1, 1, PAGES + 2, 10};
  const uint8_t mask[B * C] = {1, 0, 1, 1, 1, 1, 1, 1, 1};
  cl_mem cm = buffer(c, sizeof cand, cand, q), mm = buffer(c, sizeof mask, mask, q);
  int64_t ws = 0;
  clattn_hsa_plan_workspace_bytes(plan, &ws);
  cl_mem wsm = buffer(c, (size_t)ws, NULL, q);
  clattn_hsa_buffers hb;
  memset(&hb, 0, sizeof hb);
  hb.q = bf->q; hb.k_cache = bf->k; hb.page_ids = bf->ids; hb.selected_page_ids = bf->sel;
  hb.candidates = cm; hb.candidate_mask = mm; hb.workspace = wsm; hb.k_scale = hb.v_scale = 1.0f;
  CHECK(clattn_hsa_select(ctx, plan, &hb, NULL) == CLATTN_SUCCESS);
  int32_t got[B * HKV * TOPK];
  read_back(q, bf->sel, got, sizeof got);
  int bad = 0;
  for (int i = 0; i < B; ++i)
    for (int h = 0; h < HKV; ++h) {
      double dot[C];
      int valid[C];
      for (int j = 0; j < C; ++j) {
        const int32_t id = cand[i * C + j];
        valid[j] = id >= 0 && id < PAGES && mask[i * C + j];
        dot[j] = 0;
        for (int g = 0; g < G && valid[j]; ++g)
          for (int d = 0; d < D; ++d) dot[j] += (double)qh[((size_t)i * HQ + h * G + g) * D + d] * kc[at(id, P - 1, h) + d];
      }
      int n = 0;
      for (int j = 0; j < C; ++j) {
        if (!valid[j]) continue;
        int rank = 0;
        for (int o = 0; o < C; ++o) rank += valid[o] && (dot[o] > dot[j] || (dot[o] == dot[j] && o < j));
        if (rank < TOPK) bad += got[(i * HKV + h) * TOPK + n++] != cand[i * C + j];
      }
      for (; n < TOPK; ++n) bad += got[(i * HKV + h) * TOPK + n] != -1;
    }
  CHECK(bad == 0);
  clReleaseMemObject(cm); clReleaseMemObject(mm); clReleaseMemObject(wsm);
  clattn_hsa_plan_release(plan);
}

/* Rejected plans and runs: the status, a message naming the argument, nothing written. */
static void check_errors(clattn_context ctx, cl_command_queue q, cl_context c, const Bufs* bf) {
  clattn_paged_kv cache = {PAGES, P, HKV, D, 0, 0, 0, 0, 0};
  clattn_hsa_options opt;
  clattn_hsa_options_init(&opt);
  CHECK(opt.fuse_window == 1 && opt.validate == 1 && opt.strategy == CLATTN_HSA_GROUP && opt.q_dtype == 2);
  opt.num_qo_heads = HQ; opt.topk = TOPK; opt.q_dtype = opt.o_dtype = 0;
  int32_t last[B];
  for (int i = 0; i < B; ++i) last[i] = kv_len[i] - (indptr[i + 1] - indptr[i] - 1) * P;
  clattn_csr csr = {B, P, indptr, indices, last, NULL, NULL};
  clattn_hsa_plan plan = (clattn_hsa_plan)&cache; /* a failed plan call sets it to NULL */
  clattn_hsa_options bad = opt;
  bad.topk = 0;
  CHECK_FAILS(clattn_hsa_plan_csr(ctx, &csr, &cache, &bad, &plan), CLATTN_INVALID_ARGUMENT, "topk");
  CHECK(plan == NULL);
  bad = opt;
  bad.strategy = 5;
  CHECK_FAILS(clattn_hsa_plan_csr(ctx, &csr, &cache, &bad, &plan), CLATTN_INVALID_ARGUMENT, "opt.strategy");
  bad = opt;
  bad.window_size = -1;
  CHECK_FAILS(clattn_hsa_plan_csr(ctx, &csr, &cache, &bad, &plan), CLATTN_INVALID_ARGUMENT, "window_size");
  bad = opt;
  bad.params = "NOPE=3";
  CHECK_FAILS(clattn_hsa_plan_csr(ctx, &csr, &cache, &bad, &plan), CLATTN_INVALID_ARGUMENT, "'NOPE'");
  bad.params = "SELECT_WG=x";
  CHECK_FAILS(clattn_hsa_plan_csr(ctx, &csr, &cache, &bad, &plan), CLATTN_INVALID_ARGUMENT, "opt.params");
  CHECK_FAILS(clattn_hsa_plan_csr(ctx, &csr, &cache, NULL, &plan), CLATTN_INVALID_ARGUMENT, "opt");
  CHECK_FAILS(clattn_hsa_plan_csr(ctx, NULL, &cache, &opt, &plan), CLATTN_INVALID_ARGUMENT, "csr");
  int32_t bad_indices[9];
  memcpy(bad_indices, indices, sizeof bad_indices);
  bad_indices[7] = PAGES + 1;
  clattn_csr bcsr = csr;
  bcsr.kv_indices = bad_indices;
  CHECK_FAILS(clattn_hsa_plan_csr(ctx, &bcsr, &cache, &opt, &plan), CLATTN_INVALID_ARGUMENT, "kv_indices");
  CHECK(plan == NULL);

  CHECK(clattn_hsa_plan_csr(ctx, &csr, &cache, &opt, &plan) == CLATTN_SUCCESS);
  if (!plan) return;
  int32_t ncand[B];
  CHECK_FAILS(clattn_hsa_plan_num_candidates(plan, ncand, B - 1), CLATTN_INVALID_ARGUMENT, "capacity");
  CHECK_FAILS(clattn_hsa_plan_info_get(plan, NULL), CLATTN_INVALID_ARGUMENT, "out");
  CHECK_FAILS(clattn_hsa_plan_workspace_bytes(NULL, NULL), CLATTN_INVALID_ARGUMENT, "NULL");
  int64_t ws = 0;
  clattn_hsa_plan_workspace_bytes(plan, &ws);
  cl_mem wsm = buffer(c, (size_t)ws, NULL, q), small = buffer(c, 16, NULL, q);
  const int nids = B * HKV * TOPK;
  fill_i32(q, bf->sel, 42, nids);
  fill_f32(q, bf->o, 777.0f, B * HQ * D);
  clattn_hsa_buffers hb;
  memset(&hb, 0, sizeof hb);
  hb.q = bf->q; hb.k_cache = bf->k; hb.v_cache = bf->v; hb.page_ids = bf->ids; hb.selected_page_ids = bf->sel;
  hb.o = bf->o; hb.workspace = wsm; hb.k_scale = hb.v_scale = 1.0f;

  clattn_hsa_buffers b2 = hb;
  b2.o = small;
  CHECK_FAILS(clattn_hsa_run(ctx, plan, &b2, NULL), CLATTN_INVALID_ARGUMENT, "o:");
  b2 = hb;
  b2.workspace = small;
  CHECK_FAILS(clattn_hsa_run(ctx, plan, &b2, NULL), CLATTN_INVALID_ARGUMENT, "workspace");
  b2 = hb;
  b2.v_cache = NULL;
  CHECK_FAILS(clattn_hsa_decode(ctx, plan, &b2, NULL), CLATTN_INVALID_ARGUMENT, "v_cache");
  b2 = hb;
  b2.k_scale = 0.0f;
  CHECK_FAILS(clattn_hsa_select(ctx, plan, &b2, NULL), CLATTN_INVALID_ARGUMENT, "k_scale");
  b2 = hb;
  b2.candidates = bf->ids;
  CHECK_FAILS(clattn_hsa_select(ctx, plan, &b2, NULL), CLATTN_INVALID_ARGUMENT, "candidates");
  CHECK_FAILS(clattn_hsa_run(ctx, plan, NULL, NULL), CLATTN_INVALID_ARGUMENT, "buffers");
  CHECK_FAILS(clattn_hsa_run(NULL, plan, &hb, NULL), CLATTN_INVALID_ARGUMENT, "ctx");
  CHECK_FAILS(clattn_hsa_run(ctx, NULL, &hb, NULL), CLATTN_INVALID_ARGUMENT, "plan");
  int32_t ids[B * HKV * TOPK];
  float o[B * HQ * D];
  read_back(q, bf->sel, ids, sizeof ids);
  read_back(q, bf->o, o, sizeof o);
  int untouched = 1;
  for (int e = 0; e < nids; ++e) untouched &= ids[e] == 42;
  for (int e = 0; e < B * HQ * D; ++e) untouched &= o[e] == 777.0f;
  CHECK(untouched);
  clReleaseMemObject(wsm); clReleaseMemObject(small);
  clattn_hsa_plan_release(plan);
  clattn_hsa_plan_release(NULL);
}

int main(void) {
  clattn_context ctx;
  cl_command_queue q;
  cl_context c;
  if (!open_context(&ctx, &q, &c)) return report();
  for (int e = 0; e < PAGES * P * HKV * D; ++e) {
    kc[e] = (float)((int)((rnd() + 1.0f) * 3.5f) - 3); /* integers in [-3, 3] */
    vc[e] = rnd();
  }
  for (int e = 0; e < B * HQ * D; ++e) qh[e] = (float)((int)((rnd() + 1.0f) * 2.5f) - 2);
  /* Request 0: every landmark the same, so all its scores tie and the tie rule selects. */
  for (int j = 1; j < indptr[1]; ++j)
    memcpy(kc + at(indices[j], P - 1, 0), kc + at(indices[0], P - 1, 0), sizeof(float) * HKV * D);
  int32_t pt[B * MAXPG];
  for (int i = 0; i < B; ++i)
    for (int j = 0; j < MAXPG; ++j) pt[i * MAXPG + j] = j < indptr[i + 1] - indptr[i] ? indices[indptr[i] + j] : -1;
  Bufs bf;
  bf.q = buffer(c, sizeof qh, qh, q);
  bf.k = buffer(c, sizeof kc, kc, q);
  bf.v = buffer(c, sizeof vc, vc, q);
  bf.ids = buffer(c, sizeof indices, indices, q);
  bf.table = buffer(c, sizeof pt, pt, q);
  bf.sel = buffer(c, sizeof(int32_t) * B * HQ * TOPK, NULL, q);
  bf.sc = buffer(c, sizeof(float) * B * HQ * TOPK, NULL, q);
  bf.o = buffer(c, sizeof(float) * B * HQ * D, NULL, q);
  bf.lse = buffer(c, sizeof(float) * B * HQ, NULL, q);

  for (int head = 0; head < 2; ++head) {
    check_config(ctx, q, c, &bf, head, 0, 1, 0);
    check_config(ctx, q, c, &bf, head, 20, 1, head);  /* page table for the head strategy */
    check_config(ctx, q, c, &bf, head, 20, 0, 0);
  }
  check_candidates(ctx, q, c, &bf);
  check_errors(ctx, q, c, &bf);

  clReleaseMemObject(bf.q); clReleaseMemObject(bf.k); clReleaseMemObject(bf.v); clReleaseMemObject(bf.ids);
  clReleaseMemObject(bf.table); clReleaseMemObject(bf.sel); clReleaseMemObject(bf.sc); clReleaseMemObject(bf.o);
  clReleaseMemObject(bf.lse);
  clattn_context_release(ctx);
  return report();
}
