/* DSA through the C ABI, compiled as C: the indexer (plans from CSR and page table, plan
 * info, run with and without scores) and sparse MLA decode (plans from CSR and page table,
 * index lists with -1, positions outside the request and repeats; the indexer's device
 * output driving it on one queue) against double-precision loops written here; rejected
 * calls name the argument and leave the outputs untouched.
 *
 * Indexer data are small integers, so every score is exact in float and double alike and
 * ties are common: indices and scores are compared exactly (ties to the lower position).
 * Cache slots no request holds are NaN, so a read outside a request's keys shows. */
#include <math.h>

#include "c_test_util.h"

enum { B = 4, P = 16, PAGES = 10, MAXPG = 4, HI = 4, DI = 32, TOPK = 12, H = 2, DC = 512, DR = 64 };
static const int32_t kv_len[B] = {50, 7, 0, 33};
static const int32_t indptr[B + 1] = {0, 4, 5, 5, 8};
static const int32_t indices[8] = {6, 1, 9, 3, 0, 7, 2, 5};
static const double kScale = 0.0625; /* MLA sm_scale */

static float kidx[PAGES * P * DI], qi[B * HI * DI], wi[B * HI];            /* indexer */
static uint16_t ckv16[PAGES * P * DC], kpe16[PAGES * P * DR];               /* latent, bf16 bits */
static float ckv[PAGES * P * DC], kpe[PAGES * P * DR], qn[B * H * DC], qp[B * H * DR];

static size_t slot(int i, int t) { return (size_t)indices[indptr[i] + t / P] * P + t % P; }

static uint16_t to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
static float from_bf16(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* Indexer of request i: the topk highest positions (ties: lower position) in ascending
 * order, then -1 / -inf. */
static void ref_index(int i, int32_t* idx, double* sc) {
  const int L = kv_len[i];
  double s[64];
  for (int t = 0; t < L; ++t) {
    s[t] = 0;
    for (int h = 0; h < HI; ++h) {
      double dot = 0;
      for (int d = 0; d < DI; ++d) dot += (double)qi[(i * HI + h) * DI + d] * kidx[slot(i, t) * DI + d];
      s[t] += wi[i * HI + h] * (dot > 0 ? dot : 0);
    }
  }
  int n = 0;
  for (int t = 0; t < L; ++t) {
    int rank = 0;
    for (int o = 0; o < L; ++o) rank += s[o] > s[t] || (s[o] == s[t] && o < t);
    if (rank < TOPK) { idx[n] = t; sc[n] = s[t]; ++n; }
  }
  for (; n < TOPK; ++n) { idx[n] = -1; sc[n] = -INFINITY; }
}

/* Sparse MLA decode of request i over list[0 .. TOPK): positions outside [0, L) add nothing,
 * repeats count each time. o [H, DC], natural lse [H]. */
static void ref_sparse(int i, const int32_t* list, double* o, double* lse) {
  for (int h = 0; h < H; ++h) {
    const float* a = qn + ((size_t)i * H + h) * DC;
    const float* r = qp + ((size_t)i * H + h) * DR;
    double s[TOPK], m = -INFINITY, den = 0;
    for (int j = 0; j < TOPK; ++j) {
      const int32_t p = list[j];
      s[j] = NAN;
      if (p < 0 || p >= kv_len[i]) continue;
      double dot = 0;
      for (int d = 0; d < DC; ++d) dot += (double)a[d] * ckv[slot(i, p) * DC + d];
      for (int d = 0; d < DR; ++d) dot += (double)r[d] * kpe[slot(i, p) * DR + d];
      s[j] = dot * kScale;
      if (s[j] > m) m = s[j];
    }
    for (int d = 0; d < DC; ++d) o[h * DC + d] = 0;
    for (int j = 0; j < TOPK; ++j) {
      if (isnan(s[j])) continue;
      const double w = exp(s[j] - m);
      den += w;
      for (int d = 0; d < DC; ++d) o[h * DC + d] += w * ckv[slot(i, list[j]) * DC + d];
    }
    for (int d = 0; d < DC; ++d) o[h * DC + d] = den > 0 ? o[h * DC + d] / den : 0;
    lse[h] = den > 0 ? m + log(den) : -INFINITY;
  }
}

typedef struct {
  cl_mem k, q, w, ids, table, idx, sc;              /* indexer */
  cl_mem ckv, kpe, qn, qp, o, lse;                  /* sparse MLA */
} Bufs;

static clattn_paged_kv index_cache(void) {
  clattn_paged_kv k = {PAGES, P, 1, DI, 0, 0, 0, 0, 0};
  return k;
}
static clattn_mla_cache latent_cache(void) {
  clattn_mla_cache m;
  memset(&m, 0, sizeof m);
  m.num_pages = PAGES; m.page_size = P; m.dtype = 2; /* bf16 */
  return m;
}
static clattn_csr make_csr(int32_t* last) {
  for (int i = 0; i < B; ++i) {
    const int np = indptr[i + 1] - indptr[i];
    last[i] = np ? kv_len[i] - (np - 1) * P : 0;
  }
  clattn_csr c = {B, P, indptr, indices, last, NULL, NULL};
  return c;
}
static clattn_page_table make_table(int32_t* pt) {
  for (int i = 0; i < B; ++i)
    for (int j = 0; j < MAXPG; ++j) pt[i * MAXPG + j] = j < indptr[i + 1] - indptr[i] ? indices[indptr[i] + j] : -1;
  clattn_page_table t = {B, P, MAXPG, pt, kv_len, NULL};
  return t;
}
static clattn_dsa_index_options index_options(void) {
  clattn_dsa_index_options o;
  clattn_dsa_index_options_init(&o);
  o.num_index_heads = HI; o.topk = TOPK; o.q_dtype = 0;
  return o;
}
static clattn_mla_options mla_options(void) {
  clattn_mla_options o;
  clattn_mla_options_init(&o);
  o.num_heads = H; o.q_dtype = o.o_dtype = 0; o.sm_scale = (float)kScale;
  o.params = "MMA=0"; /* the f32 kernel, checked to 2e-4 as in test_c_mla */
  return o;
}

static void fill_i32(cl_command_queue q, cl_mem m, int32_t x, int n) {
  int32_t* h = malloc(sizeof(int32_t) * n);
  for (int e = 0; e < n; ++e) h[e] = x;
  clEnqueueWriteBuffer(q, m, CL_TRUE, 0, sizeof(int32_t) * n, h, 0, NULL, NULL);
  free(h);
}

/* One indexer plan (CSR or page table), its info, a run (scores or none) against ref_index. */
static void check_index(clattn_context ctx, cl_command_queue q, cl_context c, const Bufs* bf, int table,
                        int with_scores) {
  fprintf(stderr, "indexer: %s, scores %s\n", table ? "page table" : "csr", with_scores ? "on" : "off");
  int32_t last[B], pt[B * MAXPG];
  clattn_csr csr = make_csr(last);
  clattn_page_table tab = make_table(pt);
  clattn_paged_kv cache = index_cache();
  clattn_dsa_index_options opt = index_options();
  clattn_dsa_index_plan plan = NULL;
  CHECK((table ? clattn_dsa_index_plan_page_table(ctx, &tab, &cache, &opt, &plan)
               : clattn_dsa_index_plan_csr(ctx, &csr, &cache, &opt, &plan)) == CLATTN_SUCCESS);
  if (!plan) return;
  clattn_dsa_index_plan_info info;
  CHECK(clattn_dsa_index_plan_info_get(plan, &info) == CLATTN_SUCCESS);
  CHECK(info.batch_size == B && info.num_index_heads == HI && info.index_dim == DI && info.page_size == P);
  CHECK(info.topk == TOPK && info.page_table == table && info.max_kv_len == 50);
  CHECK(info.page_ids_needed == (table ? B * MAXPG : 8));
  CHECK(strcmp(info.variant, "generic") == 0);
  int64_t ws = 0;
  CHECK(clattn_dsa_index_plan_workspace_bytes(plan, &ws) == CLATTN_SUCCESS && ws == info.workspace_bytes && ws > 0);

  cl_mem wsm = buffer(c, (size_t)ws, NULL, q);
  clattn_dsa_index_buffers b;
  memset(&b, 0, sizeof b);
  b.q = bf->q; b.weights = bf->w; b.k_cache = bf->k; b.page_ids = table ? bf->table : bf->ids;
  b.indices = bf->idx; b.scores = with_scores ? bf->sc : NULL; b.workspace = wsm; b.k_scale = 1.0f;
  fill_i32(q, bf->idx, 99, B * TOPK);
  CHECK(clattn_dsa_index_run(ctx, plan, &b, NULL) == CLATTN_SUCCESS);
  int32_t got[B * TOPK];
  float gsc[B * TOPK];
  read_back(q, bf->idx, got, sizeof got);
  read_back(q, bf->sc, gsc, sizeof gsc);
  int bad_idx = 0, bad_sc = 0;
  for (int i = 0; i < B; ++i) {
    int32_t idx[TOPK];
    double sc[TOPK];
    ref_index(i, idx, sc);
    for (int j = 0; j < TOPK; ++j) {
      bad_idx += got[i * TOPK + j] != idx[j];
      const float g = gsc[i * TOPK + j];
      if (with_scores) bad_sc += isinf(sc[j]) ? !(isinf(g) && g < 0) : g != sc[j];
    }
  }
  CHECK(bad_idx == 0);
  CHECK(bad_sc == 0);
  if (bad_idx || bad_sc) fprintf(stderr, "  %d indices, %d scores differ\n", bad_idx, bad_sc);
  clReleaseMemObject(wsm);
  clattn_dsa_index_plan_release(plan);
}

/* Runs a sparse MLA plan over the device list `list_dev` (host copy `list`) and compares. */
static void check_sparse_run(clattn_context ctx, cl_command_queue q, cl_context c, const Bufs* bf,
                             clattn_mla_plan plan, int table, cl_mem list_dev, const int32_t* list,
                             const clattn_enqueue* e) {
  int64_t ws = -1;
  CHECK(clattn_mla_plan_workspace_bytes(plan, &ws) == CLATTN_SUCCESS && ws >= 0);
  cl_mem wsm = ws > 0 ? buffer(c, (size_t)ws, NULL, q) : NULL;
  clattn_mla_buffers mb;
  memset(&mb, 0, sizeof mb);
  mb.q_nope = bf->qn; mb.q_pe = bf->qp; mb.ckv = bf->ckv; mb.kpe = bf->kpe;
  mb.page_ids = table ? bf->table : bf->ids; mb.o = bf->o; mb.lse = bf->lse; mb.workspace = wsm; mb.kv_scale = 1.0f;
  CHECK(clattn_mla_sparse_run(ctx, plan, &mb, list_dev, e) == CLATTN_SUCCESS);
  static float o[B * H * DC];
  static double want[B * H * DC];
  float lse[B * H];
  double want_lse[B * H];
  read_back(q, bf->o, o, sizeof o);
  read_back(q, bf->lse, lse, sizeof lse);
  for (int i = 0; i < B; ++i) ref_sparse(i, list + i * TOPK, want + (size_t)i * H * DC, want_lse + i * H);
  const double w = worst(o, want, B * H * DC);
  double wl = 0;
  for (int r = 0; r < B * H; ++r) {
    const double x = isinf(want_lse[r]) ? (isinf(lse[r]) && lse[r] < 0 ? 0 : INFINITY) : fabs(lse[r] - want_lse[r]);
    if (!(x <= wl)) wl = x;
  }
  CHECK(w < 2e-4);
  CHECK(wl < 2e-4);
  fprintf(stderr, "  max |o - ref| %.2g, max |lse - ref| %.2g\n", w, wl);
  if (wsm) clReleaseMemObject(wsm);
}

/* Sparse MLA over a given list: -1, positions at / past L, negative ones, INT32_MAX, repeats. */
static void check_sparse_given(clattn_context ctx, cl_command_queue q, cl_context c, const Bufs* bf, int table) {
  fprintf(stderr, "sparse MLA, given lists: %s\n", table ? "page table" : "csr");
  int32_t last[B], pt[B * MAXPG];
  clattn_csr csr = make_csr(last);
  clattn_page_table tab = make_table(pt);
  clattn_mla_cache cache = latent_cache();
  clattn_mla_options opt = mla_options();
  clattn_mla_plan plan = NULL;
  CHECK((table ? clattn_mla_sparse_decode_plan_page_table(ctx, &tab, &cache, &opt, TOPK, &plan)
               : clattn_mla_sparse_decode_plan_csr(ctx, &csr, &cache, &opt, TOPK, &plan)) == CLATTN_SUCCESS);
  if (!plan) return;
  const int32_t list[B * TOPK] = {
      3, 49, -1, 50, 3, 0, 17, -5, 2147483647, 33, 3, 48,  /* repeats of 3, 50 = L */
      6, 0, 7, 9, -1, -1, 6, 1, 2, 3, 4, 5,                /* 7, 9 past L = 7 */
      0, 1, -1, 2, 3, 4, 5, 6, 7, 8, 9, 10,                /* empty request: nothing */
      -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 32};     /* one key */
  cl_mem ld = buffer(c, sizeof list, list, q);
  check_sparse_run(ctx, q, c, bf, plan, table, ld, list, NULL);
  clReleaseMemObject(ld);
  clattn_mla_plan_release(plan);
}

/* The whole path: the indexer's indices stay on the device and drive sparse decode (event
 * chained), over one page table for the index and latent caches. */
static void check_whole_path(clattn_context ctx, cl_command_queue q, cl_context c, const Bufs* bf) {
  fprintf(stderr, "indexer -> sparse MLA decode (page table)\n");
  int32_t pt[B * MAXPG];
  clattn_page_table tab = make_table(pt);
  clattn_paged_kv icache = index_cache();
  clattn_mla_cache lcache = latent_cache();
  clattn_dsa_index_options iopt = index_options();
  clattn_mla_options mopt = mla_options();
  clattn_dsa_index_plan ip = NULL;
  clattn_mla_plan mp = NULL;
  CHECK(clattn_dsa_index_plan_page_table(ctx, &tab, &icache, &iopt, &ip) == CLATTN_SUCCESS);
  CHECK(clattn_mla_sparse_decode_plan_page_table(ctx, &tab, &lcache, &mopt, TOPK, &mp) == CLATTN_SUCCESS);
  if (!ip || !mp) return;
  int64_t ws = 0;
  clattn_dsa_index_plan_workspace_bytes(ip, &ws);
  cl_mem wsm = buffer(c, (size_t)ws, NULL, q), idx = buffer(c, sizeof(int32_t) * B * TOPK, NULL, q);
  clattn_dsa_index_buffers b;
  memset(&b, 0, sizeof b);
  b.q = bf->q; b.weights = bf->w; b.k_cache = bf->k; b.page_ids = bf->table; b.indices = idx; b.workspace = wsm;
  b.k_scale = 1.0f;
  cl_event ev = NULL;
  clattn_enqueue enq = {NULL, 0, NULL, &ev};
  CHECK(clattn_dsa_index_run(ctx, ip, &b, &enq) == CLATTN_SUCCESS);
  int32_t list[B * TOPK];
  double sc[TOPK];
  for (int i = 0; i < B; ++i) ref_index(i, list + i * TOPK, sc);
  clattn_enqueue after = {NULL, ev ? 1u : 0u, ev ? &ev : NULL, NULL};
  check_sparse_run(ctx, q, c, bf, mp, 1, idx, list, &after);
  if (ev) clReleaseEvent(ev);
  int32_t got[B * TOPK];
  read_back(q, idx, got, sizeof got);
  CHECK(memcmp(got, list, sizeof got) == 0);
  clReleaseMemObject(wsm); clReleaseMemObject(idx);
  clattn_dsa_index_plan_release(ip);
  clattn_mla_plan_release(mp);
}

/* Rejected plans and runs: the status, a message naming the argument, nothing written. */
static void check_errors(clattn_context ctx, cl_command_queue q, cl_context c, const Bufs* bf) {
  int32_t last[B];
  clattn_csr csr = make_csr(last);
  clattn_paged_kv cache = index_cache();
  clattn_dsa_index_options opt = index_options(), bad;
  clattn_dsa_index_options_init(&bad);
  CHECK(bad.q_dtype == 2 && bad.validate == 1 && bad.topk == 0 && bad.params == NULL);
  clattn_dsa_index_plan plan = (clattn_dsa_index_plan)&cache; /* a failed plan call sets it to NULL */
  bad = opt;
  bad.topk = 0;
  CHECK_FAILS(clattn_dsa_index_plan_csr(ctx, &csr, &cache, &bad, &plan), CLATTN_INVALID_ARGUMENT, "topk");
  CHECK(plan == NULL);
  bad.topk = CLATTN_DSA_MAX_TOPK + 1;
  CHECK_FAILS(clattn_dsa_index_plan_csr(ctx, &csr, &cache, &bad, &plan), CLATTN_INVALID_ARGUMENT, "topk");
  bad = opt;
  bad.num_index_heads = 0;
  CHECK_FAILS(clattn_dsa_index_plan_csr(ctx, &csr, &cache, &bad, &plan), CLATTN_INVALID_ARGUMENT, "num_index_heads");
  bad = opt;
  bad.q_dtype = 3;
  CHECK_FAILS(clattn_dsa_index_plan_csr(ctx, &csr, &cache, &bad, &plan), CLATTN_UNSUPPORTED, "q_dtype");
  bad = opt;
  bad.params = "NOPE=1";
  CHECK_FAILS(clattn_dsa_index_plan_csr(ctx, &csr, &cache, &bad, &plan), CLATTN_INVALID_ARGUMENT, "NOPE");
  bad.params = "TT=x";
  CHECK_FAILS(clattn_dsa_index_plan_csr(ctx, &csr, &cache, &bad, &plan), CLATTN_INVALID_ARGUMENT, "opt.params");
  CHECK_FAILS(clattn_dsa_index_plan_csr(ctx, &csr, &cache, NULL, &plan), CLATTN_INVALID_ARGUMENT, "opt");
  CHECK_FAILS(clattn_dsa_index_plan_csr(ctx, NULL, &cache, &opt, &plan), CLATTN_INVALID_ARGUMENT, "csr");
  CHECK_FAILS(clattn_dsa_index_plan_csr(ctx, &csr, NULL, &opt, &plan), CLATTN_INVALID_ARGUMENT, "index_cache");
  CHECK_FAILS(clattn_dsa_index_plan_csr(NULL, &csr, &cache, &opt, &plan), CLATTN_INVALID_ARGUMENT, "ctx");
  CHECK_FAILS(clattn_dsa_index_plan_page_table(ctx, NULL, &cache, &opt, &plan), CLATTN_INVALID_ARGUMENT, "table");
  clattn_paged_kv two = cache;
  two.num_kv_heads = 2;
  CHECK_FAILS(clattn_dsa_index_plan_csr(ctx, &csr, &two, &opt, &plan), CLATTN_INVALID_ARGUMENT, "num_kv_heads");
  int32_t bad_indices[8];
  memcpy(bad_indices, indices, sizeof bad_indices);
  bad_indices[2] = PAGES + 1;
  clattn_csr bcsr = csr;
  bcsr.kv_indices = bad_indices;
  CHECK_FAILS(clattn_dsa_index_plan_csr(ctx, &bcsr, &cache, &opt, &plan), CLATTN_INVALID_ARGUMENT, "kv_indices");
  int32_t starts[B] = {1, 0, 0, 0};
  bcsr = csr;
  bcsr.kv_start_offset = starts;
  CHECK_FAILS(clattn_dsa_index_plan_csr(ctx, &bcsr, &cache, &opt, &plan), CLATTN_UNSUPPORTED, "kv_start_offset");
  CHECK(plan == NULL);

  CHECK(clattn_dsa_index_plan_csr(ctx, &csr, &cache, &opt, &plan) == CLATTN_SUCCESS);
  if (!plan) return;
  CHECK_FAILS(clattn_dsa_index_plan_info_get(plan, NULL), CLATTN_INVALID_ARGUMENT, "out");
  CHECK_FAILS(clattn_dsa_index_plan_info_get(NULL, NULL), CLATTN_INVALID_ARGUMENT, "NULL");
  CHECK_FAILS(clattn_dsa_index_plan_workspace_bytes(NULL, NULL), CLATTN_INVALID_ARGUMENT, "NULL");
  int64_t ws = 0;
  clattn_dsa_index_plan_workspace_bytes(plan, &ws);
  cl_mem wsm = buffer(c, (size_t)ws, NULL, q), small = buffer(c, 16, NULL, q);
  fill_i32(q, bf->idx, 42, B * TOPK);
  clattn_dsa_index_buffers ib;
  memset(&ib, 0, sizeof ib);
  ib.q = bf->q; ib.weights = bf->w; ib.k_cache = bf->k; ib.page_ids = bf->ids; ib.indices = bf->idx;
  ib.workspace = wsm; ib.k_scale = 1.0f;
  clattn_dsa_index_buffers b2 = ib;
  b2.q = small;
  CHECK_FAILS(clattn_dsa_index_run(ctx, plan, &b2, NULL), CLATTN_INVALID_ARGUMENT, "q");
  b2 = ib, b2.weights = NULL;
  CHECK_FAILS(clattn_dsa_index_run(ctx, plan, &b2, NULL), CLATTN_INVALID_ARGUMENT, "weights");
  b2 = ib, b2.workspace = small;
  CHECK_FAILS(clattn_dsa_index_run(ctx, plan, &b2, NULL), CLATTN_INVALID_ARGUMENT, "workspace");
  b2 = ib, b2.scores = small;
  CHECK_FAILS(clattn_dsa_index_run(ctx, plan, &b2, NULL), CLATTN_INVALID_ARGUMENT, "scores");
  b2 = ib, b2.k_scale = 0.0f;
  CHECK_FAILS(clattn_dsa_index_run(ctx, plan, &b2, NULL), CLATTN_INVALID_ARGUMENT, "k_scale");
  b2 = ib, b2.k_cache = small;
  CHECK_FAILS(clattn_dsa_index_run(ctx, plan, &b2, NULL), CLATTN_INVALID_ARGUMENT, "k_cache");
  CHECK_FAILS(clattn_dsa_index_run(ctx, plan, NULL, NULL), CLATTN_INVALID_ARGUMENT, "buffers");
  CHECK_FAILS(clattn_dsa_index_run(NULL, plan, &ib, NULL), CLATTN_INVALID_ARGUMENT, "ctx");
  CHECK_FAILS(clattn_dsa_index_run(ctx, NULL, &ib, NULL), CLATTN_INVALID_ARGUMENT, "plan");
  b2 = ib, b2.indices = small;
  CHECK_FAILS(clattn_dsa_index_run(ctx, plan, &b2, NULL), CLATTN_INVALID_ARGUMENT, "indices");
  int32_t got[B * TOPK];
  read_back(q, bf->idx, got, sizeof got);
  int untouched = 1;
  for (int e = 0; e < B * TOPK; ++e) untouched &= got[e] == 42;
  CHECK(untouched);
  clattn_dsa_index_plan_release(plan);
  clattn_dsa_index_plan_release(NULL);

  /* sparse MLA */
  clattn_mla_cache lc = latent_cache();
  clattn_mla_options mo = mla_options(), mbad = mo;
  clattn_mla_plan sp = (clattn_mla_plan)&lc, dense = NULL;
  CHECK_FAILS(clattn_mla_sparse_decode_plan_csr(ctx, &csr, &lc, &mo, 0, &sp), CLATTN_INVALID_ARGUMENT, "topk");
  CHECK(sp == NULL);
  CHECK_FAILS(clattn_mla_sparse_decode_plan_csr(ctx, &csr, &lc, &mo, CLATTN_DSA_MAX_TOPK + 1, &sp),
              CLATTN_INVALID_ARGUMENT, "topk");
  mbad.sm_scale = 0.0f;
  CHECK_FAILS(clattn_mla_sparse_decode_plan_csr(ctx, &csr, &lc, &mbad, TOPK, &sp), CLATTN_INVALID_ARGUMENT,
              "sm_scale");
  CHECK_FAILS(clattn_mla_sparse_decode_plan_csr(ctx, &csr, NULL, &mo, TOPK, &sp), CLATTN_INVALID_ARGUMENT, "cache");
  CHECK_FAILS(clattn_mla_sparse_decode_plan_csr(ctx, &csr, &lc, NULL, TOPK, &sp), CLATTN_INVALID_ARGUMENT, "opt");
  CHECK_FAILS(clattn_mla_sparse_decode_plan_page_table(ctx, NULL, &lc, &mo, TOPK, &sp), CLATTN_INVALID_ARGUMENT,
              "table");
  CHECK_FAILS(clattn_mla_sparse_decode_plan_csr(ctx, &csr, &lc, &mo, TOPK, NULL), CLATTN_INVALID_ARGUMENT, "out");
  static const int32_t two_rows[B + 1] = {0, 2, 3, 3, 4}; /* passed through: decode takes one row each */
  clattn_csr ext = csr;
  ext.qo_indptr = two_rows;
  CHECK_FAILS(clattn_mla_sparse_decode_plan_csr(ctx, &ext, &lc, &mo, TOPK, &sp), CLATTN_INVALID_ARGUMENT,
              "exactly one");
  bcsr = csr;
  bcsr.kv_indices = bad_indices;
  CHECK_FAILS(clattn_mla_sparse_decode_plan_csr(ctx, &bcsr, &lc, &mo, TOPK, &sp), CLATTN_INVALID_ARGUMENT,
              "kv_indices");
  CHECK(clattn_mla_sparse_decode_plan_csr(ctx, &csr, &lc, &mo, TOPK, &sp) == CLATTN_SUCCESS);
  CHECK(clattn_mla_decode_plan_csr(ctx, &csr, &lc, &mo, &dense) == CLATTN_SUCCESS);
  if (sp && dense) {
    int64_t a = 0, d = 0;
    clattn_mla_plan_workspace_bytes(sp, &a);
    clattn_mla_plan_workspace_bytes(dense, &d);
    cl_mem mws = buffer(c, (size_t)(a > d ? a : d), NULL, q);
    static float sentinel[B * H * DC], o[B * H * DC];
    for (int e = 0; e < B * H * DC; ++e) sentinel[e] = 777.0f;
    clEnqueueWriteBuffer(q, bf->o, CL_TRUE, 0, sizeof sentinel, sentinel, 0, NULL, NULL);
    const int32_t zeros[B * TOPK] = {0};
    cl_mem list = buffer(c, sizeof zeros, zeros, q);
    clattn_mla_buffers mb;
    memset(&mb, 0, sizeof mb);
    mb.q_nope = bf->qn; mb.q_pe = bf->qp; mb.ckv = bf->ckv; mb.kpe = bf->kpe; mb.page_ids = bf->ids;
    mb.o = bf->o; mb.workspace = mws; mb.kv_scale = 1.0f;
    CHECK_FAILS(clattn_mla_run(ctx, sp, &mb, NULL), CLATTN_INVALID_ARGUMENT, "mla_sparse_run");
    CHECK_FAILS(clattn_mla_sparse_run(ctx, dense, &mb, list, NULL), CLATTN_INVALID_ARGUMENT,
                "mla_sparse_decode_plan");
    CHECK_FAILS(clattn_mla_sparse_run(ctx, sp, &mb, NULL, NULL), CLATTN_INVALID_ARGUMENT, "indices");
    CHECK_FAILS(clattn_mla_sparse_run(ctx, sp, &mb, small, NULL), CLATTN_INVALID_ARGUMENT, "indices");
    clattn_mla_buffers m2 = mb;
    m2.kv_scale = -1.0f;
    CHECK_FAILS(clattn_mla_sparse_run(ctx, sp, &m2, list, NULL), CLATTN_INVALID_ARGUMENT, "kv_scale");
    m2 = mb, m2.q_nope = NULL;
    CHECK_FAILS(clattn_mla_sparse_run(ctx, sp, &m2, list, NULL), CLATTN_INVALID_ARGUMENT, "q_nope");
    CHECK_FAILS(clattn_mla_sparse_run(ctx, sp, NULL, list, NULL), CLATTN_INVALID_ARGUMENT, "buffers");
    CHECK_FAILS(clattn_mla_sparse_run(NULL, sp, &mb, list, NULL), CLATTN_INVALID_ARGUMENT, "ctx");
    CHECK_FAILS(clattn_mla_sparse_run(ctx, NULL, &mb, list, NULL), CLATTN_INVALID_ARGUMENT, "plan");
    read_back(q, bf->o, o, sizeof o);
    CHECK(memcmp(o, sentinel, sizeof o) == 0);
    clReleaseMemObject(list); clReleaseMemObject(mws);
  }
  clattn_mla_plan_release(sp);
  clattn_mla_plan_release(dense);
  clReleaseMemObject(wsm); clReleaseMemObject(small);
}

int main(void) {
  clattn_context ctx;
  cl_command_queue q;
  cl_context c;
  if (!open_context(&ctx, &q, &c)) return report();
  /* Every slot NaN, then the requests' keys / latent rows. */
  for (int e = 0; e < PAGES * P * DI; ++e) kidx[e] = NAN;
  for (int e = 0; e < PAGES * P * DC; ++e) ckv16[e] = 0x7fc0; /* bf16 NaN */
  for (int e = 0; e < PAGES * P * DR; ++e) kpe16[e] = 0x7fc0;
  for (int i = 0; i < B; ++i)
    for (int t = 0; t < kv_len[i]; ++t) {
      for (int d = 0; d < DI; ++d) kidx[slot(i, t) * DI + d] = (float)((int)((rnd() + 1.0f) * 2.5f) - 2);
      for (int d = 0; d < DC; ++d) ckv16[slot(i, t) * DC + d] = to_bf16(rnd());
      for (int d = 0; d < DR; ++d) kpe16[slot(i, t) * DR + d] = to_bf16(rnd());
    }
  /* Request 0: positions 9, 30 and 44 repeat position 2's key (equal scores: the tie rule). */
  static const int ties[3] = {9, 30, 44};
  for (int j = 0; j < 3; ++j) memcpy(kidx + slot(0, ties[j]) * DI, kidx + slot(0, 2) * DI, sizeof(float) * DI);
  for (int e = 0; e < PAGES * P * DC; ++e) ckv[e] = from_bf16(ckv16[e]);
  for (int e = 0; e < PAGES * P * DR; ++e) kpe[e] = from_bf16(kpe16[e]);
  for (int e = 0; e < B * HI * DI; ++e) qi[e] = (float)((int)((rnd() + 1.0f) * 2.5f) - 2);
  for (int e = 0; e < B * HI; ++e) wi[e] = (float)((int)((rnd() + 1.0f) * 2.5f) - 2);
  for (int e = 0; e < B * H * DC; ++e) qn[e] = rnd();
  for (int e = 0; e < B * H * DR; ++e) qp[e] = rnd();
  int32_t pt[B * MAXPG];
  make_table(pt);

  Bufs bf;
  bf.k = buffer(c, sizeof kidx, kidx, q);
  bf.q = buffer(c, sizeof qi, qi, q);
  bf.w = buffer(c, sizeof wi, wi, q);
  bf.ids = buffer(c, sizeof indices, indices, q);
  bf.table = buffer(c, sizeof pt, pt, q);
  bf.idx = buffer(c, sizeof(int32_t) * B * TOPK, NULL, q);
  bf.sc = buffer(c, sizeof(float) * B * TOPK, NULL, q);
  bf.ckv = buffer(c, sizeof ckv16, ckv16, q);
  bf.kpe = buffer(c, sizeof kpe16, kpe16, q);
  bf.qn = buffer(c, sizeof qn, qn, q);
  bf.qp = buffer(c, sizeof qp, qp, q);
  bf.o = buffer(c, sizeof(float) * B * H * DC, NULL, q);
  bf.lse = buffer(c, sizeof(float) * B * H, NULL, q);

  check_index(ctx, q, c, &bf, 0, 1);
  check_index(ctx, q, c, &bf, 1, 0);
  check_sparse_given(ctx, q, c, &bf, 0);
  check_sparse_given(ctx, q, c, &bf, 1);
  check_whole_path(ctx, q, c, &bf);
  check_errors(ctx, q, c, &bf);

  cl_mem all[] = {bf.k, bf.q, bf.w, bf.ids, bf.table, bf.idx, bf.sc, bf.ckv, bf.kpe, bf.qn, bf.qp, bf.o, bf.lse};
  for (size_t m = 0; m < sizeof all / sizeof all[0]; ++m) clReleaseMemObject(all[m]);
  clattn_context_release(ctx);
  return report();
}
