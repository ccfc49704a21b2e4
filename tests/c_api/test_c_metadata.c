/* Metadata builders (host and device) and validation through the C ABI, compiled as C:
 * outputs against hand-computed tables; rejected calls name the argument and leave outputs
 * untouched. */
#include "c_test_util.h"

#if defined(__unix__)
#include <pthread.h>
/* A failing call on another thread: its message stays on that thread. */
static char other_msg[256];
static void* fail_elsewhere(void* arg) {
  int w;
  (void)arg;
  clattn_max_table_pages(8, -3, &w);
  snprintf(other_msg, sizeof other_msg, "%s", clattn_last_error());
  return NULL;
}
#endif

enum { P = 4, POOL = 3, CTX = 12, B = 2 };

/* req_to_token rows: row 0 owns pages 2, 5; row 1 page 7; row 2 pages 1, 3, 4. */
static int32_t r2t[POOL * CTX];
static void fill_rows(void) {
  static const int pages[POOL][3] = {{2, 5, -1}, {7, -1, -1}, {1, 3, 4}};
  for (int r = 0; r < POOL; ++r)
    for (int t = 0; t < CTX; ++t) {
      int pg = pages[r][t / P];
      r2t[r * CTX + t] = pg < 0 ? 0 : pg * P + t % P;
    }
}

static int eq(const int32_t* a, const int32_t* b, int n) { return memcmp(a, b, sizeof(int32_t) * (size_t)n) == 0; }
static int all(const int32_t* a, int n, int32_t v) {
  for (int i = 0; i < n; ++i)
    if (a[i] != v) return 0;
  return 1;
}

#if defined(__linux__)
#include <sys/resource.h>
/* Peak and current resident set, MiB. */
/* AddressSanitizer holds freed memory in quarantine: resident-size checks do not apply. */
#if defined(__SANITIZE_ADDRESS__)
#define CLATTN_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CLATTN_ASAN 1
#endif
#endif

static long peak_rss_mib(void) {
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss / 1024;
}
static long rss_mib(void) {
  long pages = 0, resident = 0;
  FILE* f = fopen("/proc/self/statm", "r");
  if (f) {
    if (fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    fclose(f);
  }
  return resident * 4 / 1024;
}
#endif

/* Hostile sizes (docs/metadata.md, "Overflow rules"). Three requests of 2, 1 and 1 tokens
 * at page_size INT_MAX have one page each (page 0); (seq + P - 1) / P once gave -1 pages:
 * kv_indptr {0,-1,0,1} with a write before the indices, and a crash converting the table. */
static void hostile_sizes(void) {
  static const int32_t r2t_h[4] = {0, 1, 2, 3}, rpi_h[3] = {0, 0, 0}, seq_h[3] = {2, 1, 1};
  const int HP = 2147483647;
  clattn_engine_batch hb = {r2t_h, 1, 4, rpi_h, seq_h, 3, NULL, NULL};
  static const int32_t e_ip[4] = {0, 1, 2, 3}, e_ix[3] = {0, 0, 0}, e_la[3] = {2, 1, 1};
  int32_t buf[8], ip[4], la[3];
  for (int i = 0; i < 8; ++i) buf[i] = -77;
  clattn_csr_out co = {ip, buf + 1, 4, la, NULL, NULL};
  int64_t n = 0;
  CHECK(clattn_build_csr(&hb, HP, -1, &co, &n) == CLATTN_SUCCESS);
  CHECK(n == 3 && eq(ip, e_ip, 4) && eq(buf + 1, e_ix, 3) && eq(la, e_la, 3) && buf[0] == -77 && buf[5] == -77);

  clattn_metadata_sizes sz;
  CHECK(clattn_metadata_sizes_get(&hb, HP, -1, &sz) == CLATTN_SUCCESS); /* was CLATTN_INTERNAL */
  CHECK(sz.csr_indices == 3 && sz.table_width == 1 && sz.num_slots == 3 && sz.num_qo_rows == 3);
  int w = 0;
  CHECK(clattn_max_table_pages(2147483647, 16, &w) == CLATTN_SUCCESS && w == 134217728); /* was 1 */

  int32_t tb[3];
  clattn_page_table_out to = {tb, 3, NULL, NULL, NULL};
  CHECK(clattn_build_page_table(&hb, HP, 0, &to, &w) == CLATTN_SUCCESS);
  CHECK(w == 1 && eq(tb, e_ix, 3)); /* was {-1, 0, 0} */

  clattn_page_table pt = {3, HP, 1, e_ix, seq_h, NULL};
  CHECK(clattn_validate_page_table(&pt, 1) == CLATTN_SUCCESS);
  for (int i = 0; i < 4; ++i) ip[i] = -77;
  clattn_csr_out co2 = {ip, buf + 1, 4, la, NULL, NULL};
  CHECK(clattn_page_table_to_csr(&pt, &co2, &n) == CLATTN_SUCCESS); /* was a crash */
  CHECK(n == 3 && eq(ip, e_ip, 4) && eq(buf + 1, e_ix, 3) && eq(la, e_la, 3));
  static const int32_t unset[3] = {-1, 0, 0}; /* request 0's one page is used: -1 is no page id */
  pt.page_table = unset;
  CHECK_FAILS(clattn_validate_page_table(&pt, 1), CLATTN_INVALID_ARGUMENT, "page_table[0][0] = -1");
  CHECK_FAILS(clattn_page_table_to_csr(&pt, &co2, &n), CLATTN_INVALID_ARGUMENT, "page_table[0][0]");

  /* two requests of INT_MAX tokens (2 pages of 2^30): cu_seqlens_k would pass int32 */
  static const int32_t l_ip[3] = {0, 2, 4}, l_ix[4] = {0, 0, 0, 0}, l_la[2] = {(1 << 30) - 1, (1 << 30) - 1};
  clattn_csr lc = {2, 1 << 30, l_ip, l_ix, l_la, NULL, NULL};
  int32_t cuk[3] = {-77, -77, -77};
  clattn_page_table_out lo = {tb, 3, NULL, cuk, NULL};
  CHECK_FAILS(clattn_csr_to_page_table(&lc, &lo, &w), CLATTN_INVALID_ARGUMENT, "cu_seqlens_k");
  CHECK(all(cuk, 3, -77));
}

/* A rejected call allocates nothing for the output, and a large successful one does not
 * keep its scratch: max_pages = 2^26 once took 256 MiB (per thread, kept) before the
 * capacity check failed. */
static void no_huge_scratch(void) {
#if defined(__linux__)
  static const int32_t r2t_h[4] = {0, 1, 2, 3}, rpi_h[1] = {0}, seq_h[1] = {2};
  clattn_engine_batch hb = {r2t_h, 1, 4, rpi_h, seq_h, 1, NULL, NULL};
  int32_t tb[16];
  for (int i = 0; i < 16; ++i) tb[i] = -77;
  int w = 0;
  const long peak0 = peak_rss_mib(), rss0 = rss_mib();
  clattn_page_table_out to = {tb, 16, NULL, NULL, NULL};
  CHECK_FAILS(clattn_build_page_table(&hb, 1, 1 << 26, &to, &w), CLATTN_INVALID_ARGUMENT, "page_table_capacity");
  CHECK(w == (1 << 26) && all(tb, 16, -77));
  CHECK_FAILS(clattn_build_block_table(&hb, 1, 1 << 26, tb, 16, &w), CLATTN_INVALID_ARGUMENT, "capacity");
  /* csr -> table: 4096 requests, the first with 65536 pages: a 2^28-entry table */
  {
    enum { NB = 4096, NP = 65536 };
    int32_t* ip = (int32_t*)calloc(NB + 1, sizeof(int32_t));
    int32_t* ix = (int32_t*)calloc(NP, sizeof(int32_t));
    int32_t* la = (int32_t*)calloc(NB, sizeof(int32_t));
    for (int i = 1; i <= NB; ++i) ip[i] = NP;
    la[0] = 1;
    clattn_csr wide = {NB, 1, ip, ix, la, NULL, NULL};
    CHECK_FAILS(clattn_csr_to_page_table(&wide, &to, &w), CLATTN_INVALID_ARGUMENT, "page_table_capacity");
    CHECK(w == NP && all(tb, 16, -77));
    free(ip);
    free(ix);
    free(la);
  }
  CHECK(peak_rss_mib() - peak0 < 64);

  /* a successful 2^23-entry table: its scratch is released after the copy */
  int32_t* out = (int32_t*)malloc(sizeof(int32_t) << 23);
  clattn_page_table_out big = {out, (int64_t)1 << 23, NULL, NULL, NULL};
  CHECK(clattn_build_page_table(&hb, 1, 1 << 23, &big, &w) == CLATTN_SUCCESS);
  CHECK(w == (1 << 23) && out[0] == 0 && out[1] == 1 && out[2] == -1 && out[(1 << 23) - 1] == -1);
  free(out);
#if !defined(CLATTN_ASAN)
  CHECK(rss_mib() - rss0 < 16); /* nothing above kept resident by the calls (ASan keeps freed memory) */
#endif
#endif
}

int main(void) {
  fill_rows();
  static const int32_t pool_idx[B] = {2, 0}, seq[B] = {10, 5}, prefix[B] = {6, 3}, ext[B] = {4, 2};
  clattn_engine_batch dec = {r2t, POOL, CTX, pool_idx, seq, B, NULL, NULL};
  clattn_engine_batch ex = dec;
  ex.prefix_lens = prefix;
  ex.extend_lens = ext;

  /* ---- sizes */
  clattn_metadata_sizes sz;
  CHECK(clattn_metadata_sizes_get(&dec, P, -1, &sz) == CLATTN_SUCCESS);
  CHECK(sz.csr_indices == 5 && sz.table_width == 3 && sz.num_slots == 2 && sz.num_qo_rows == 2);
  CHECK(clattn_metadata_sizes_get(&ex, P, -1, &sz) == CLATTN_SUCCESS);
  CHECK(sz.csr_indices == 5 && sz.num_slots == 6 && sz.num_qo_rows == 6);
  CHECK(clattn_metadata_sizes_get(&dec, P, 3, &sz) == CLATTN_SUCCESS);
  CHECK(sz.csr_indices == 4);
  int64_t mx = 0;
  int mw = 0;
  CHECK(clattn_max_csr_pages(B, CTX, P, &mx) == CLATTN_SUCCESS && mx == 6);
  CHECK(clattn_max_table_pages(CTX, P, &mw) == CLATTN_SUCCESS && mw == 3);
  CHECK_FAILS(clattn_max_table_pages(CTX, 0, &mw), CLATTN_INVALID_ARGUMENT, "page_size");
  CHECK_FAILS(clattn_metadata_sizes_get(NULL, P, -1, &sz), CLATTN_INVALID_ARGUMENT, "batch");

  /* ---- CSR, decode */
  int32_t indptr[B + 1], indices[8], last[B], qo[B + 1], start[B];
  clattn_csr_out co = {indptr, indices, 8, last, NULL, NULL};
  int64_t n = -1;
  CHECK(clattn_build_csr(&dec, P, -1, &co, &n) == CLATTN_SUCCESS);
  static const int32_t e_indptr[] = {0, 3, 5}, e_indices[] = {1, 3, 4, 2, 5}, e_last[] = {2, 1};
  CHECK(n == 5 && eq(indptr, e_indptr, 3) && eq(indices, e_indices, 5) && eq(last, e_last, 2));

  /* extend: same pages, qo_indptr from extend_lens */
  co.qo_indptr = qo;
  CHECK(clattn_build_csr(&ex, P, -1, &co, &n) == CLATTN_SUCCESS);
  static const int32_t e_qo[] = {0, 4, 6};
  CHECK(n == 5 && eq(indices, e_indices, 5) && eq(qo, e_qo, 3));

  /* window_left = 3 (decode): keys from position seq-4: request 0 from 6 (page 3, offset 2),
   * request 1 from 1 (page 2, offset 1). */
  co.qo_indptr = NULL;
  co.kv_start_offset = start;
  CHECK(clattn_build_csr(&dec, P, 3, &co, &n) == CLATTN_SUCCESS);
  static const int32_t w_indptr[] = {0, 2, 4}, w_indices[] = {3, 4, 2, 5}, w_start[] = {2, 1}, w_last[] = {2, 1};
  CHECK(n == 4 && eq(indptr, w_indptr, 3) && eq(indices, w_indices, 4) && eq(start, w_start, 2) &&
        eq(last, w_last, 2));
  /* without a window a given kv_start_offset is zeroed */
  CHECK(clattn_build_csr(&dec, P, -1, &co, &n) == CLATTN_SUCCESS && all(start, 2, 0));

  /* too small: rejected, nothing written, the size still reported */
  for (int i = 0; i < 8; ++i) indices[i] = -77;
  for (int i = 0; i < 3; ++i) indptr[i] = -77;
  co.kv_indices_capacity = 4;
  n = 0;
  CHECK_FAILS(clattn_build_csr(&dec, P, -1, &co, &n), CLATTN_INVALID_ARGUMENT, "kv_indices_capacity");
  CHECK(n == 5 && all(indices, 8, -77) && all(indptr, 3, -77));
  co.kv_indices_capacity = 8;
  /* window without kv_start_offset */
  co.kv_start_offset = NULL;
  CHECK_FAILS(clattn_build_csr(&dec, P, 3, &co, &n), CLATTN_INVALID_ARGUMENT, "kv_start_offset");
  clattn_csr_out nul = co;
  nul.kv_indptr = NULL;
  CHECK_FAILS(clattn_build_csr(&dec, P, -1, &nul, &n), CLATTN_INVALID_ARGUMENT, "out.kv_indptr");
  /* bad batch: pool index out of range, named with the request */
  int32_t bad_idx[B] = {2, 5};
  clattn_engine_batch bad = dec;
  bad.req_pool_indices = bad_idx;
  CHECK_FAILS(clattn_build_csr(&bad, P, -1, &co, &n), CLATTN_INVALID_ARGUMENT, "req_pool_indices");
  CHECK(all(indices, 8, -77));
  /* extend lengths that do not add up */
  int32_t bad_ext[B] = {4, 3};
  bad = ex;
  bad.extend_lens = bad_ext;
  CHECK_FAILS(clattn_build_csr(&bad, P, -1, &co, &n), CLATTN_INVALID_ARGUMENT, "extend_lens");

  /* ---- page table */
  int32_t table[12], cuq[B + 1], cuk[B + 1];
  clattn_page_table_out po = {table, 12, cuq, cuk, NULL};
  int width = 0;
  CHECK(clattn_build_page_table(&ex, P, 0, &po, &width) == CLATTN_SUCCESS);
  static const int32_t e_table[] = {1, 3, 4, 2, 5, -1}, e_cuk[] = {0, 10, 15};
  CHECK(width == 3 && eq(table, e_table, 6) && eq(cuq, e_qo, 3) && eq(cuk, e_cuk, 3));
  CHECK(clattn_build_page_table(&dec, P, 4, &po, &width) == CLATTN_SUCCESS);
  static const int32_t e_table4[] = {1, 3, 4, -1, 2, 5, -1, -1};
  CHECK(width == 4 && eq(table, e_table4, 8));
  for (int i = 0; i < 12; ++i) table[i] = -77;
  po.page_table_capacity = 5;
  CHECK_FAILS(clattn_build_page_table(&dec, P, 0, &po, &width), CLATTN_INVALID_ARGUMENT, "page_table_capacity");
  CHECK(width == 3 && all(table, 12, -77));
  po.page_table_capacity = 12;
  CHECK_FAILS(clattn_build_page_table(&dec, P, 2, &po, &width), CLATTN_INVALID_ARGUMENT, "max_pages");
  CHECK(all(table, 12, -77));

  /* ---- slot mapping */
  int32_t slots[8];
  int64_t ns = 0;
  CHECK(clattn_build_slot_mapping(&dec, slots, 8, &ns) == CLATTN_SUCCESS);
  static const int32_t e_dslots[] = {17, 20};
  CHECK(ns == 2 && eq(slots, e_dslots, 2));
  CHECK(clattn_build_slot_mapping(&ex, slots, 8, &ns) == CLATTN_SUCCESS);
  static const int32_t e_eslots[] = {14, 15, 16, 17, 11, 20};
  CHECK(ns == 6 && eq(slots, e_eslots, 6));
  for (int i = 0; i < 8; ++i) slots[i] = -77;
  CHECK_FAILS(clattn_build_slot_mapping(&ex, slots, 5, &ns), CLATTN_INVALID_ARGUMENT, "capacity");
  CHECK(ns == 6 && all(slots, 8, -77));
  CHECK_FAILS(clattn_build_slot_mapping(&ex, NULL, 8, &ns), CLATTN_INVALID_ARGUMENT, "slots");

  hostile_sizes();
  no_huge_scratch();

  /* ---- block table at block size 8: row 2 -> blocks of slots 4.. -> slot/8 of position 0, 8 */
  {
    /* block_size 8 needs 8-aligned pages: a separate table where pages are 8 slots wide. */
    int32_t r8[CTX * 2];
    for (int t = 0; t < CTX; ++t) { r8[t] = 16 + t; r8[CTX + t] = (t < 8 ? 40 : 8) + t % 8; }
    int32_t idx8[2] = {1, 0}, seq8[2] = {10, 3};
    clattn_engine_batch b8 = {r8, 2, CTX, idx8, seq8, 2, NULL, NULL};
    int32_t bt[4];
    int w8 = 0;
    CHECK(clattn_build_block_table(&b8, 8, 0, bt, 4, &w8) == CLATTN_SUCCESS);
    static const int32_t e_bt[] = {5, 1, 2, -1};
    CHECK(w8 == 2 && eq(bt, e_bt, 4));
    CHECK_FAILS(clattn_build_block_table(&b8, 8, 0, bt, 3, &w8), CLATTN_INVALID_ARGUMENT, "capacity");
  }

  /* ---- device builders: identical output from device-resident tables */
  {
    clattn_context ctx = NULL;
    CHECK(clattn_context_create(NULL, &ctx) == CLATTN_SUCCESS);
    if (ctx) {
      cl_command_queue q;
      cl_context c;
      cl_objects(ctx, &q, &c);
      cl_mem r2t_d = buffer(c, sizeof r2t, r2t, q), idx_d = buffer(c, sizeof pool_idx, pool_idx, q);
      cl_mem seq_d = buffer(c, sizeof seq, seq, q), pre_d = buffer(c, sizeof prefix, prefix, q);
      cl_mem ext_d = buffer(c, sizeof ext, ext, q);
      clattn_device_engine_batch db = {r2t_d, POOL, CTX, idx_d, seq_d, B, pre_d, ext_d};
      int32_t sent[16];
      for (int i = 0; i < 16; ++i) sent[i] = -77;
      cl_mem ip_d = buffer(c, 4 * (B + 1), sent, q), ix_d = buffer(c, 4 * 6, sent, q), la_d = buffer(c, 4 * B, sent, q);
      cl_mem qo_d = buffer(c, 4 * (B + 1), sent, q), so_d = buffer(c, 4 * B, sent, q);
      clattn_device_csr dc = {ip_d, ix_d, la_d, qo_d, NULL};
      /* rejected: window without kv_start_offset; nothing enqueued */
      CHECK_FAILS(clattn_build_csr_device(ctx, &db, P, 3, &dc, NULL), CLATTN_INVALID_ARGUMENT, "kv_start_offset");
      CHECK_FAILS(clattn_build_csr_device(ctx, NULL, P, -1, &dc, NULL), CLATTN_INVALID_ARGUMENT, "batch");
      CHECK_FAILS(clattn_build_csr_device(ctx, &db, P, -1, NULL, NULL), CLATTN_INVALID_ARGUMENT, "out");
      int32_t got[16];
      read_back(q, ip_d, got, 4 * (B + 1));
      CHECK(all(got, B + 1, -77));
      cl_event ev = NULL;
      clattn_enqueue en = {NULL, 0, NULL, &ev};
      CHECK(clattn_build_csr_device(ctx, &db, P, -1, &dc, &en) == CLATTN_SUCCESS);
      CHECK(ev != NULL);
      if (ev) { clWaitForEvents(1, &ev); clReleaseEvent(ev); }
      read_back(q, ip_d, got, 4 * (B + 1));
      CHECK(eq(got, e_indptr, 3));
      read_back(q, ix_d, got, 4 * 5);
      CHECK(eq(got, e_indices, 5));
      read_back(q, la_d, got, 4 * B);
      CHECK(eq(got, e_last, 2));
      read_back(q, qo_d, got, 4 * (B + 1));
      CHECK(eq(got, e_qo, 3));
      /* windowed decode batch */
      clattn_device_engine_batch dd = db;
      dd.prefix_lens = dd.extend_lens = NULL;
      dc.qo_indptr = NULL;
      dc.kv_start_offset = so_d;
      CHECK(clattn_build_csr_device(ctx, &dd, P, 3, &dc, NULL) == CLATTN_SUCCESS);
      read_back(q, ip_d, got, 4 * (B + 1));
      CHECK(eq(got, w_indptr, 3));
      read_back(q, ix_d, got, 4 * 4);
      CHECK(eq(got, w_indices, 4));
      read_back(q, so_d, got, 4 * B);
      CHECK(eq(got, w_start, 2));

      cl_mem pt_d = buffer(c, 4 * 6, sent, q), cuq_d = buffer(c, 4 * (B + 1), sent, q), cuk_d = buffer(c, 4 * (B + 1), sent, q);
      clattn_device_page_table dpt = {pt_d, NULL, cuq_d, cuk_d};
      CHECK_FAILS(clattn_build_page_table_device(ctx, &db, P, 4, &dpt, NULL), CLATTN_INVALID_ARGUMENT, "page_table");
      CHECK(clattn_build_page_table_device(ctx, &db, P, 3, &dpt, NULL) == CLATTN_SUCCESS);
      read_back(q, pt_d, got, 4 * 6);
      CHECK(eq(got, e_table, 6));
      read_back(q, cuq_d, got, 4 * (B + 1));
      CHECK(eq(got, e_qo, 3));
      read_back(q, cuk_d, got, 4 * (B + 1));
      CHECK(eq(got, e_cuk, 3));

      cl_mem sl_d = buffer(c, 4 * 6, sent, q), bt_d = buffer(c, 4 * 6, sent, q);
      CHECK(clattn_build_slot_mapping_device(ctx, &db, sl_d, NULL) == CLATTN_SUCCESS);
      read_back(q, sl_d, got, 4 * 6);
      CHECK(eq(got, e_eslots, 6));
      CHECK(clattn_build_block_table_device(ctx, &db, P, 3, bt_d, NULL) == CLATTN_SUCCESS);
      read_back(q, bt_d, got, 4 * 6);
      CHECK(eq(got, e_table, 6));
      CHECK_FAILS(clattn_build_slot_mapping_device(ctx, &db, NULL, NULL), CLATTN_INVALID_ARGUMENT, "slot_mapping");

      cl_mem all_m[] = {r2t_d, idx_d, seq_d, pre_d, ext_d, ip_d, ix_d, la_d, qo_d, so_d, pt_d, cuq_d, cuk_d, sl_d, bt_d};
      for (size_t i = 0; i < sizeof all_m / sizeof all_m[0]; ++i) clReleaseMemObject(all_m[i]);
      clattn_context_release(ctx);
    }
  }

  /* ---- conversions: CSR <-> page table, exact inverses */
  {
    clattn_csr ec = {B, P, e_indptr, e_indices, e_last, NULL, e_qo};
    int32_t t2[8], q2[B + 1], k2[B + 1], s2[B];
    clattn_page_table_out to = {t2, 8, q2, k2, s2};
    int w2 = 0;
    CHECK(clattn_csr_to_page_table(&ec, &to, &w2) == CLATTN_SUCCESS);
    CHECK(w2 == 3 && eq(t2, e_table, 6) && eq(q2, e_qo, 3) && eq(k2, e_cuk, 3) && eq(s2, seq, 2));
    clattn_page_table et = {B, P, 3, e_table, seq, e_qo};
    int32_t ip2[B + 1], ix2[8], la2[B], qo2[B + 1];
    clattn_csr_out co2 = {ip2, ix2, 8, la2, qo2, NULL};
    int64_t n2 = 0;
    CHECK(clattn_page_table_to_csr(&et, &co2, &n2) == CLATTN_SUCCESS);
    CHECK(n2 == 5 && eq(ip2, e_indptr, 3) && eq(ix2, e_indices, 5) && eq(la2, e_last, 2) && eq(qo2, e_qo, 3));
    /* a windowed CSR has no page-table form */
    clattn_csr wc = {B, P, w_indptr, w_indices, w_last, w_start, NULL};
    for (int i = 0; i < 8; ++i) t2[i] = -77;
    CHECK_FAILS(clattn_csr_to_page_table(&wc, &to, &w2), CLATTN_INVALID_ARGUMENT, "kv_start_offset");
    CHECK(all(t2, 8, -77));
    co2.kv_indices_capacity = 4;
    CHECK_FAILS(clattn_page_table_to_csr(&et, &co2, &n2), CLATTN_INVALID_ARGUMENT, "kv_indices_capacity");
  }

  /* ---- validation */
  clattn_csr csr = {B, P, e_indptr, e_indices, e_last, NULL, NULL};
  CHECK(clattn_validate_csr(&csr, 8, seq) == CLATTN_SUCCESS);
  CHECK_FAILS(clattn_validate_csr(&csr, 5, NULL), CLATTN_INVALID_ARGUMENT, "kv_indices");
  int32_t bad_last[B] = {2, 0};
  clattn_csr bc = csr;
  bc.kv_last_page_len = bad_last;
  CHECK_FAILS(clattn_validate_csr(&bc, 8, NULL), CLATTN_INVALID_ARGUMENT, "kv_last_page_len[1]");
  int32_t wrong_seq[B] = {10, 6};
  CHECK_FAILS(clattn_validate_csr(&csr, 8, wrong_seq), CLATTN_INVALID_ARGUMENT, "seq_len");
  int32_t bad_indptr[B + 1] = {0, 4, 3};
  bc = csr;
  bc.kv_indptr = bad_indptr;
  CHECK_FAILS(clattn_validate_csr(&bc, 8, NULL), CLATTN_INVALID_ARGUMENT, "kv_indptr");
  CHECK_FAILS(clattn_validate_csr(NULL, 8, NULL), CLATTN_INVALID_ARGUMENT, "csr");
  bc = csr;
  bc.qo_indptr = e_qo; /* 4 rows > kv_len? no: 4 <= 10, 2 <= 5: fine */
  CHECK(clattn_validate_csr(&bc, 8, NULL) == CLATTN_SUCCESS);
  int32_t big_qo[B + 1] = {0, 4, 11};
  bc.qo_indptr = big_qo;
  CHECK_FAILS(clattn_validate_csr(&bc, 8, NULL), CLATTN_INVALID_ARGUMENT, "qo");

  clattn_page_table pt = {B, P, 3, e_table, seq, NULL};
  CHECK(clattn_validate_page_table(&pt, 8) == CLATTN_SUCCESS);
  CHECK_FAILS(clattn_validate_page_table(&pt, 4), CLATTN_INVALID_ARGUMENT, "page_table");
  int32_t long_seq[B] = {13, 5};
  clattn_page_table bp = pt;
  bp.seq_lens = long_seq;
  CHECK_FAILS(clattn_validate_page_table(&bp, 8), CLATTN_INVALID_ARGUMENT, "seq_lens[0]");
  bp = pt;
  bp.page_table = NULL;
  CHECK_FAILS(clattn_validate_page_table(&bp, 8), CLATTN_INVALID_ARGUMENT, "table.page_table");

  static const int32_t sm32[] = {0, -1, 31};
  static const int64_t sm64[] = {0, 32};
  CHECK(clattn_validate_slot_mapping(sm32, 5, 3, 8, P) == CLATTN_SUCCESS);
  CHECK_FAILS(clattn_validate_slot_mapping(sm64, 6, 2, 8, P), CLATTN_INVALID_ARGUMENT, "32");
  CHECK_FAILS(clattn_validate_slot_mapping(sm32, 3, 3, 8, P), CLATTN_INVALID_ARGUMENT, "slot_dtype");
  CHECK(clattn_validate_engine_batch(&ex, 8, P) == CLATTN_SUCCESS);
  CHECK_FAILS(clattn_validate_engine_batch(&ex, 5, P), CLATTN_INVALID_ARGUMENT, "outside the cache");
  /* a misaligned token: row 0 position 3 moved to offset 2 of its page (expected 3) */
  r2t[0 * CTX + 3] = 2 * P + 2;
  CHECK_FAILS(clattn_validate_engine_batch(&ex, 8, P), CLATTN_INVALID_ARGUMENT, "req_to_token");
#if defined(__unix__)
  /* ---- the last error is per thread */
  {
    int w;
    CHECK_FAILS(clattn_max_table_pages(CTX, 0, &w), CLATTN_INVALID_ARGUMENT, "page_size");
    char mine[256];
    snprintf(mine, sizeof mine, "%s", clattn_last_error());
    pthread_t th;
    CHECK(pthread_create(&th, NULL, fail_elsewhere, NULL) == 0);
    pthread_join(th, NULL);
    CHECK(strstr(other_msg, "-3") != NULL);
    CHECK(strcmp(clattn_last_error(), mine) == 0);
    CHECK(clattn_max_table_pages(CTX, P, &w) == CLATTN_SUCCESS);
    CHECK(clattn_last_error()[0] == '\0');
  }
#endif
  return report();
}
