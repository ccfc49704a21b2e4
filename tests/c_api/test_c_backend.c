/* The engine backend through the C ABI, compiled as C: a KV pool and a "paged" backend for
 * one GQA layer; an extend step (6 prompt tokens) then a decode step, each checked against
 * a double-precision loop here; the same decode on "hsa" with every key covered; registry
 * and batch errors; no allocation when a decode step repeats; the decode step captured and
 * replayed, op-level capture's errors; int8 and int4 pools (their
 * scale caches, byte counts and refused configurations). */
#include <math.h>

#include "c_test_util.h"

enum { HQ = 4, HKV = 2, D = 64, P = 4, PAGES = 8, MAXCTX = 16, T0 = 6 };

static float qv[T0 + 1][HQ * D], kv[T0 + 1][HKV * D], vv[T0 + 1][HKV * D];

/* Causal attention of query row `pos` over keys 0..pos, head h (double precision). */
static void reference(int pos, const float* q, double* o) {
  for (int h = 0; h < HQ; ++h) {
    const int g = h / (HQ / HKV);
    double m = -1e300, s[T0 + 1], sum = 0;
    for (int t = 0; t <= pos; ++t) {
      double dot = 0;
      for (int d = 0; d < D; ++d) dot += (double)q[h * D + d] * kv[t][g * D + d];
      s[t] = dot / sqrt((double)D);
      if (s[t] > m) m = s[t];
    }
    for (int d = 0; d < D; ++d) o[h * D + d] = 0;
    for (int t = 0; t <= pos; ++t) {
      const double w = exp(s[t] - m);
      sum += w;
      for (int d = 0; d < D; ++d) o[h * D + d] += w * vv[t][g * D + d];
    }
    for (int d = 0; d < D; ++d) o[h * D + d] /= sum;
  }
}

static int close_rows(const float* got, const double* want, int n) {
  for (int i = 0; i < n; ++i)
    if (fabs(got[i] - want[i]) > 1e-4 + 1e-4 * fabs(want[i])) {
      fprintf(stderr, "element %d: got %g want %g\n", i, got[i], want[i]);
      return 0;
    }
  return 1;
}

int main(void) {
  clattn_context ctx;
  cl_command_queue q;
  cl_context c;
  if (!open_context(&ctx, &q, &c)) return report();

  clattn_layer_spec layer;
  clattn_layer_spec_init(&layer);
  layer.kind = CLATTN_LAYER_MHA;
  layer.num_qo_heads = HQ, layer.num_kv_heads = HKV, layer.head_dim = D;
  clattn_kv_pool_config pc;
  clattn_kv_pool_config_init(&pc);
  pc.num_pages = PAGES, pc.page_size = P, pc.kv_dtype = 0; /* f32 */
  clattn_kv_pool pool = NULL;
  CHECK(clattn_kv_pool_create(ctx, &pc, &layer, 1, 1, &pool) == CLATTN_SUCCESS);
  clattn_backend_config bc;
  clattn_backend_config_init(&bc);
  bc.act_dtype = 0; /* f32 */
  clattn_backend be = NULL;
  CHECK_FAILS(clattn_backend_create(ctx, "flash", pool, &layer, 1, &bc, &be), CLATTN_INVALID_ARGUMENT, "flash");
  CHECK(strstr(clattn_backend_names(), "hybrid") != NULL);
  CHECK(clattn_backend_create(ctx, "paged", pool, &layer, 1, &bc, &be) == CLATTN_SUCCESS);
  if (!be) return report();

  for (int t = 0; t <= T0; ++t) {
    for (int i = 0; i < HQ * D; ++i) qv[t][i] = rnd();
    for (int i = 0; i < HKV * D; ++i) kv[t][i] = rnd(), vv[t][i] = rnd();
  }
  /* Pool row 0 owns pages 3 and 6: positions 0..3 -> slots 12..15, 4..7 -> 24..27. */
  int32_t r2t[2 * MAXCTX];
  for (int t = 0; t < MAXCTX; ++t) r2t[t] = (t < 4 ? 3 * P + t : 6 * P + (t - 4)), r2t[MAXCTX + t] = 0;
  int32_t row = 0, seq = T0, prefix = 0, ext = T0;
  cl_mem qb = buffer(c, sizeof qv, qv, q), kb = buffer(c, sizeof kv, kv, q), vb = buffer(c, sizeof vv, vv, q);
  cl_mem ob = buffer(c, sizeof qv, NULL, q);

  clattn_forward_batch fb;
  memset(&fb, 0, sizeof fb);
  fb.mode = CLATTN_MODE_EXTEND, fb.batch_size = 1, fb.req_to_token = r2t, fb.pool_size = 2, fb.max_ctx = MAXCTX;
  fb.req_pool_indices = &row, fb.seq_lens = &seq, fb.prefix_lens = &prefix, fb.extend_lens = &ext;
  clattn_layer_io io;
  memset(&io, 0, sizeof io);
  io.q = qb, io.k = kb, io.v = vb, io.o = ob;
  CHECK_FAILS(clattn_backend_forward(be, 0, &io, 1), CLATTN_INVALID_ARGUMENT, "init_forward_metadata");
  CHECK(clattn_backend_init_forward_metadata(be, &fb) == CLATTN_SUCCESS);
  CHECK(clattn_backend_forward(be, 0, &io, 1) == CLATTN_SUCCESS);
  static float got[T0 + 1][HQ * D];
  static double want[HQ * D];
  read_back(q, ob, got, sizeof(float) * T0 * HQ * D);
  int ok = 1;
  for (int t = 0; t < T0; ++t) {
    reference(t, qv[t], want);
    ok &= close_rows(got[t], want, HQ * D);
  }
  CHECK(ok);

  /* Decode the 7th token: its q/k/v are row T0 of the host arrays. */
  cl_mem q1 = buffer(c, sizeof qv[0], qv[T0], q), k1 = buffer(c, sizeof kv[0], kv[T0], q);
  cl_mem v1 = buffer(c, sizeof vv[0], vv[T0], q);
  memset(&fb, 0, sizeof fb);
  seq = T0 + 1;
  fb.mode = CLATTN_MODE_DECODE, fb.batch_size = 1, fb.req_to_token = r2t, fb.pool_size = 2, fb.max_ctx = MAXCTX;
  fb.req_pool_indices = &row, fb.seq_lens = &seq;
  io.q = q1, io.k = k1, io.v = v1;
  CHECK(clattn_backend_init_forward_metadata(be, &fb) == CLATTN_SUCCESS);
  CHECK(clattn_backend_forward(be, 0, &io, 1) == CLATTN_SUCCESS);
  read_back(q, ob, got[0], sizeof(float) * HQ * D);
  reference(T0, qv[T0], want);
  CHECK(close_rows(got[0], want, HQ * D));
  /* The same decode step again allocates nothing (metadata, plan table, workspace reused). */
  const unsigned long long before = clattn_device_allocation_count();
  CHECK(clattn_backend_init_forward_metadata(be, &fb) == CLATTN_SUCCESS);
  CHECK(clattn_backend_forward(be, 0, &io, 0) == CLATTN_SUCCESS);
  clFinish(q);
  CHECK(clattn_device_allocation_count() == before);

  /* The same decode step captured and replayed (engine-side req_to_token on the device). */
  cl_mem r2t_dev = buffer(c, sizeof r2t, r2t, q);
  clattn_replay_config rc;
  clattn_replay_config_init(&rc);
  rc.max_bs = 2, rc.req_to_token = r2t_dev, rc.pool_size = 2, rc.max_ctx = MAXCTX;
  CHECK_FAILS(clattn_backend_replay(be, 1, &row, &seq), CLATTN_INVALID_ARGUMENT, "init_replay_state");
  CHECK(clattn_backend_init_replay_state(be, &rc) == CLATTN_SUCCESS);
  CHECK(clattn_backend_begin_capture(be, 1) == CLATTN_SUCCESS);
  CHECK(clattn_backend_forward(be, 0, &io, 1) == CLATTN_SUCCESS);
  CHECK(clattn_backend_end_capture(be) == CLATTN_SUCCESS);
  int bucket = 0, launches = 0, cbuf = -1;
  CHECK(clattn_backend_replay_bucket(be, 2, &bucket) == CLATTN_SUCCESS && bucket == 2);
  CHECK(clattn_backend_replay_info(be, 1, &launches, &cbuf) == CLATTN_SUCCESS && launches > 0 && cbuf >= 0);
  memset(got[0], 0, sizeof got[0]);
  clEnqueueWriteBuffer(q, ob, CL_TRUE, 0, sizeof(float) * HQ * D, got[0], 0, NULL, NULL);
  CHECK(clattn_backend_replay(be, 1, &row, &seq) == CLATTN_SUCCESS);
  read_back(q, ob, got[0], sizeof(float) * HQ * D);
  CHECK(close_rows(got[0], want, HQ * D));
  CHECK_FAILS(clattn_backend_replay(be, 3, &row, &seq), CLATTN_INVALID_ARGUMENT, "max_bs");
  /* Op-level capture: an engine kernel outside a capture is refused; an empty recording replays. */
  clattn_capture cap = NULL;
  CHECK(clattn_capture_create(ctx, NULL, 1, &cap) == CLATTN_SUCCESS);
  const size_t one = 1;
  CHECK_FAILS(clattn_capture_kernel(q, NULL, 1, &one, NULL), CLATTN_INVALID_ARGUMENT, "no capture");
  CHECK_FAILS(clattn_capture_replay(cap, NULL), CLATTN_INVALID_ARGUMENT, "Capture::end");
  CHECK(clattn_capture_begin(cap) == CLATTN_SUCCESS && clattn_capture_end(cap) == CLATTN_SUCCESS);
  CHECK(clattn_capture_replay(cap, NULL) == CLATTN_SUCCESS);
  CHECK(clattn_capture_info(cap, &launches, &cbuf) == CLATTN_SUCCESS && launches == 0);
  clattn_capture_release(cap);
  clFinish(q);
  clReleaseMemObject(r2t_dev);

  /* "hsa": at 7 keys with page 4 and window 3, the one candidate page ends where the window
   * starts, so topk 1 covers every key: the dense result. Bad fields are named. */
  clattn_backend hb = NULL;
  clattn_backend_config hc = bc;
  CHECK_FAILS(clattn_backend_create(ctx, "hsa", pool, &layer, 1, &hc, &hb), CLATTN_INVALID_ARGUMENT, "hsa.topk");
  hc.hsa_topk = 1, hc.hsa_strategy = 5;
  CHECK_FAILS(clattn_backend_create(ctx, "hsa", pool, &layer, 1, &hc, &hb), CLATTN_INVALID_ARGUMENT, "hsa.strategy");
  hc.hsa_strategy = 1, hc.hsa_window_size = 3, hc.num_hsa_layers = 1;
  CHECK_FAILS(clattn_backend_create(ctx, "hsa", pool, &layer, 1, &hc, &hb), CLATTN_INVALID_ARGUMENT, "hsa_layers");
  const int32_t hsa_ids[1] = {0};
  hc.hsa_layers = hsa_ids;
  CHECK(clattn_backend_create(ctx, "hsa", pool, &layer, 1, &hc, &hb) == CLATTN_SUCCESS);
  if (hb) {
    CHECK(clattn_backend_init_forward_metadata(hb, &fb) == CLATTN_SUCCESS);
    CHECK(clattn_backend_forward(hb, 0, &io, 0) == CLATTN_SUCCESS);
    read_back(q, ob, got[0], sizeof(float) * HQ * D);
    CHECK(close_rows(got[0], want, HQ * D));
    clattn_backend_release(hb);
  }

  /* Batch errors name the field. */
  seq = 0;
  CHECK_FAILS(clattn_backend_init_forward_metadata(be, &fb), CLATTN_INVALID_ARGUMENT, "seq_lens[0]");
  fb.mode = 7;
  CHECK_FAILS(clattn_backend_init_forward_metadata(be, &fb), CLATTN_INVALID_ARGUMENT, "mode");
  CHECK_FAILS(clattn_backend_init_forward_metadata(be, NULL), CLATTN_INVALID_ARGUMENT, "batch");

  int64_t alloc = 0, per_page = 0;
  CHECK(clattn_kv_pool_bytes(pool, &alloc, &per_page, NULL) == CLATTN_SUCCESS);
  CHECK(per_page == 2 * P * HKV * D * 4 && alloc == per_page * PAGES);

  /* int8 pool (f16 scales): the scale caches are allocated, counted per page and required. */
  clattn_kv_pool_config ic = pc;
  ic.kv_dtype = 7, ic.scale_dtype = 1;
  clattn_kv_pool ip = NULL, owned = NULL;
  CHECK(clattn_kv_pool_create(ctx, &ic, &layer, 1, 1, &ip) == CLATTN_SUCCESS);
  cl_mem ksc = NULL, vsc = NULL, kc8 = NULL, vc8 = NULL;
  CHECK(clattn_kv_pool_get_layer_scales(ip, 0, &ksc, &vsc) == CLATTN_SUCCESS && ksc && vsc);
  CHECK(clattn_kv_pool_get_layer(ip, 0, &kc8, &vc8) == CLATTN_SUCCESS);
  CHECK(clattn_kv_pool_bytes(ip, &alloc, &per_page, NULL) == CLATTN_SUCCESS);
  CHECK(per_page == 2 * P * HKV * D + 2 * P * HKV * 2 && alloc == per_page * PAGES);
  CHECK_FAILS(clattn_kv_pool_set_layer_scales(pool, 0, ksc, vsc), CLATTN_INVALID_ARGUMENT, "no scale caches");
  CHECK(clattn_kv_pool_create(ctx, &ic, &layer, 1, 0, &owned) == CLATTN_SUCCESS);
  CHECK(clattn_kv_pool_set_layer(owned, 0, kc8, vc8) == CLATTN_SUCCESS);
  clattn_backend ib = NULL;
  CHECK_FAILS(clattn_backend_create(ctx, "paged", owned, &layer, 1, &bc, &ib), CLATTN_INVALID_ARGUMENT, "no scale caches");
  CHECK(clattn_kv_pool_set_layer_scales(owned, 0, ksc, vsc) == CLATTN_SUCCESS);
  CHECK(clattn_backend_create(ctx, "paged", owned, &layer, 1, &bc, &ib) == CLATTN_SUCCESS);
  clattn_backend_release(ib);
  clattn_kv_pool_release(owned);
  clattn_kv_pool_release(ip);
  ic.scale_dtype = 2; /* bf16 */
  CHECK_FAILS(clattn_kv_pool_create(ctx, &ic, &layer, 1, 1, &ip), CLATTN_INVALID_ARGUMENT, "scale_dtype");

  /* int8 pool with an MLA layer (f16 pairs): one scale cache, the latent's (ckv, kpe) pairs, in
   * k_scale_cache; an engine-owned layer passes it with v_scale_cache NULL. */
  clattn_layer_spec ml;
  clattn_layer_spec_init(&ml);
  ml.kind = CLATTN_LAYER_MLA, ml.num_qo_heads = 2, ml.sm_scale = 0.0625f;
  ic.scale_dtype = 1;
  CHECK(clattn_kv_pool_create(ctx, &ic, &ml, 1, 1, &ip) == CLATTN_SUCCESS);
  ksc = vsc = NULL;
  CHECK(clattn_kv_pool_get_layer_scales(ip, 0, &ksc, &vsc) == CLATTN_SUCCESS && ksc && !vsc);
  CHECK(clattn_kv_pool_bytes(ip, &alloc, &per_page, NULL) == CLATTN_SUCCESS);
  CHECK(per_page == P * (512 + 64) + P * 2 * 2 && alloc == per_page * PAGES);
  CHECK(clattn_kv_pool_get_layer(ip, 0, &kc8, &vc8) == CLATTN_SUCCESS);
  CHECK(clattn_kv_pool_create(ctx, &ic, &ml, 1, 0, &owned) == CLATTN_SUCCESS);
  CHECK(clattn_kv_pool_set_layer(owned, 0, kc8, vc8) == CLATTN_SUCCESS);
  CHECK_FAILS(clattn_backend_create(ctx, "mla", owned, &ml, 1, &bc, &ib), CLATTN_INVALID_ARGUMENT,
              "no scale cache");
  CHECK_FAILS(clattn_kv_pool_set_layer_scales(owned, 0, ksc, ksc), CLATTN_INVALID_ARGUMENT, "v_scale_cache");
  CHECK(clattn_kv_pool_set_layer_scales(owned, 0, ksc, NULL) == CLATTN_SUCCESS);
  CHECK(clattn_backend_create(ctx, "mla", owned, &ml, 1, &bc, &ib) == CLATTN_SUCCESS);
  clattn_backend_release(ib);
  clattn_kv_pool_release(owned);
  clattn_kv_pool_release(ip);

  /* int4 pool (groups of 32, f32 pairs): nibbles plus a [scale, zero] pair per group, the
   * group checked against the head dim. */
  clattn_kv_pool_config i4;
  clattn_kv_pool_config_init(&i4);
  CHECK(i4.quant_group == 64);
  i4.num_pages = PAGES, i4.page_size = P, i4.kv_dtype = 8, i4.quant_group = 32;
  CHECK(clattn_kv_pool_create(ctx, &i4, &layer, 1, 1, &ip) == CLATTN_SUCCESS);
  ksc = vsc = NULL;
  CHECK(clattn_kv_pool_get_layer_scales(ip, 0, &ksc, &vsc) == CLATTN_SUCCESS && ksc && vsc);
  CHECK(clattn_kv_pool_bytes(ip, &alloc, &per_page, NULL) == CLATTN_SUCCESS);
  CHECK(per_page == 2 * P * HKV * D / 2 + 2 * P * HKV * (D / 32) * 2 * 4 && alloc == per_page * PAGES);
  clattn_kv_pool_release(ip);
  i4.quant_group = 48;
  CHECK_FAILS(clattn_kv_pool_create(ctx, &i4, &layer, 1, 1, &ip), CLATTN_INVALID_ARGUMENT, "quant_group = 48");
  i4.quant_group = 128; /* does not divide D = 64 */
  CHECK_FAILS(clattn_kv_pool_create(ctx, &i4, &layer, 1, 1, &ip), CLATTN_INVALID_ARGUMENT, "head_dim 64");

  clattn_backend_release(be);
  clattn_kv_pool_release(pool);
  clReleaseMemObject(qb), clReleaseMemObject(kb), clReleaseMemObject(vb), clReleaseMemObject(ob);
  clReleaseMemObject(q1), clReleaseMemObject(k1), clReleaseMemObject(v1);
  clattn_context_release(ctx);
  return report();
}
