/* Linear attention through the C ABI, compiled as C: Gated DeltaNet and gated linear
 * attention, decode and varlen prefill over a pooled state, zero/copy slots, against a
 * double-precision recurrence written here; rejected calls name the argument and leave
 * the state pool and the output untouched. */
#include <math.h>

#include "c_test_util.h"

enum { HQK = 1, HV = 2, DK = 64, DV = 64, SLOTS = 4, TMAX = 5, SLOT = HV * DK * DV };
static float pool0[SLOTS * SLOT], pool[SLOTS * SLOT];
static float qh[TMAX * HQK * DK], kh[TMAX * HQK * DK], vh[TMAX * HV * DV], gh[TMAX * HV], bh[TMAX * HV];
static double S[HV * DK * DV], want_o[TMAX * HV * DV], want_pool[SLOTS * SLOT];

/* One token of request state S (all v-heads). */
static void step(int gdn, int t, double scale) {
  for (int h = 0; h < HV; ++h) {
    double* s = S + (size_t)h * DK * DV;
    const float* q = qh + (size_t)t * HQK * DK + (h / (HV / HQK)) * DK;
    const float* k = kh + (size_t)t * HQK * DK + (h / (HV / HQK)) * DK;
    const float* v = vh + ((size_t)t * HV + h) * DV;
    double decay = exp((double)gh[t * HV + h]);
    for (int e = 0; e < DK * DV; ++e) s[e] *= decay;
    if (gdn) {
      double u[DV];
      for (int j = 0; j < DV; ++j) {
        double sk = 0;
        for (int i = 0; i < DK; ++i) sk += s[i * DV + j] * k[i];
        u[j] = v[j] - sk;
      }
      for (int i = 0; i < DK; ++i)
        for (int j = 0; j < DV; ++j) s[i * DV + j] += bh[t * HV + h] * k[i] * u[j];
    } else {
      for (int i = 0; i < DK; ++i)
        for (int j = 0; j < DV; ++j) s[i * DV + j] += (double)k[i] * v[j];
    }
    for (int j = 0; j < DV; ++j) {
      double o = 0;
      for (int i = 0; i < DK; ++i) o += s[i * DV + j] * q[i] * scale;
      want_o[((size_t)t * HV + h) * DV + j] = o;
    }
  }
}

/* The batch: request r covers tokens cu[r]..cu[r+1]-1 and state slot idx[r] (-1 = zero, discarded). */
static void ref_batch(int gdn, int B, const int32_t* cu, const int32_t* idx) {
  const double scale = 1.0 / sqrt((double)DK);
  for (int e = 0; e < SLOTS * SLOT; ++e) want_pool[e] = pool0[e];
  for (int r = 0; r < B; ++r) {
    for (int e = 0; e < SLOT; ++e) S[e] = idx[r] >= 0 ? pool0[(size_t)idx[r] * SLOT + e] : 0.0;
    for (int t = cu[r]; t < cu[r + 1]; ++t) step(gdn, t, scale);
    if (idx[r] >= 0)
      for (int e = 0; e < SLOT; ++e) want_pool[(size_t)idx[r] * SLOT + e] = S[e];
  }
}

int main(void) {
  clattn_context ctx;
  cl_command_queue q;
  cl_context c;
  if (!open_context(&ctx, &q, &c)) return report();
  for (int e = 0; e < SLOTS * SLOT; ++e) pool0[e] = rnd() * 0.1f;
  for (int e = 0; e < TMAX * HQK * DK; ++e) { qh[e] = rnd(); kh[e] = rnd() * 0.125f; }
  for (int e = 0; e < TMAX * HV * DV; ++e) vh[e] = rnd();
  for (int e = 0; e < TMAX * HV; ++e) { gh[e] = -0.05f - 0.3f * (rnd() + 1.0f) * 0.5f; bh[e] = 0.5f * (rnd() + 1.0f); }

  cl_mem qd = buffer(c, sizeof qh, qh, q), kd = buffer(c, sizeof kh, kh, q), vd = buffer(c, sizeof vh, vh, q);
  cl_mem gd = buffer(c, sizeof gh, gh, q), bd = buffer(c, sizeof bh, bh, q);
  static float osent[TMAX * HV * DV], out[TMAX * HV * DV];
  for (int e = 0; e < TMAX * HV * DV; ++e) osent[e] = 777.0f;
  cl_mem od = buffer(c, sizeof osent, osent, q), sd = buffer(c, sizeof pool0, pool0, q);

  clattn_linear_config cfg;
  clattn_linear_config_init(&cfg);
  cfg.num_qk_heads = HQK; cfg.num_v_heads = HV; cfg.head_dim_k = DK; cfg.head_dim_v = DV; cfg.dtype = 0;
  clattn_linear_tensors tn = {qd, kd, vd, gd, bd, od};
  clattn_linear_state_pool sp = {sd, SLOTS, 0};

  /* ---- decode, both kinds: requests in slots 2 and 0 */
  static const int32_t dec_idx[2] = {2, 0}, dec_cu[3] = {0, 1, 2};
  cl_mem dec_idx_d = buffer(c, sizeof dec_idx, dec_idx, q);
  clattn_linear_batch db;
  memset(&db, 0, sizeof db);
  db.batch_size = 2; db.state_indices = dec_idx; db.state_indices_dev = dec_idx_d;

  /* rejected first: duplicate slot, bad slot, missing arguments; nothing written */
  static const int32_t dup_idx[2] = {1, 1}, far_idx[2] = {1, SLOTS};
  clattn_linear_batch bad = db;
  bad.state_indices = dup_idx;
  CHECK_FAILS(clattn_gdn_decode(ctx, &cfg, &tn, &sp, &bad, NULL), CLATTN_INVALID_ARGUMENT, "state_indices");
  bad.state_indices = far_idx;
  CHECK_FAILS(clattn_gla_decode(ctx, &cfg, &tn, &sp, &bad, NULL), CLATTN_INVALID_ARGUMENT, "state_indices[1]");
  CHECK_FAILS(clattn_gdn_decode(ctx, NULL, &tn, &sp, &db, NULL), CLATTN_INVALID_ARGUMENT, "cfg");
  CHECK_FAILS(clattn_gdn_decode(ctx, &cfg, NULL, &sp, &db, NULL), CLATTN_INVALID_ARGUMENT, "tensors");
  CHECK_FAILS(clattn_gdn_decode(ctx, &cfg, &tn, NULL, &db, NULL), CLATTN_INVALID_ARGUMENT, "pool");
  CHECK_FAILS(clattn_gdn_decode(ctx, &cfg, &tn, &sp, NULL, NULL), CLATTN_INVALID_ARGUMENT, "batch");
  CHECK_FAILS(clattn_gdn_decode(NULL, &cfg, &tn, &sp, &db, NULL), CLATTN_INVALID_ARGUMENT, "ctx");
  clattn_linear_tensors nob = tn;
  nob.beta = NULL;
  CHECK_FAILS(clattn_gdn_decode(ctx, &cfg, &nob, &sp, &db, NULL), CLATTN_INVALID_ARGUMENT, "beta");
  clattn_linear_config bad_cfg = cfg;
  bad_cfg.head_dim_k = 48;
  CHECK_FAILS(clattn_gdn_decode(ctx, &bad_cfg, &tn, &sp, &db, NULL), CLATTN_INVALID_ARGUMENT, "head_dim_k");
  read_back(q, od, out, sizeof out);
  read_back(q, sd, pool, sizeof pool);
  CHECK(memcmp(out, osent, sizeof out) == 0 && memcmp(pool, pool0, sizeof pool) == 0);

  for (int gdn = 1; gdn >= 0; --gdn) {
    clEnqueueWriteBuffer(q, sd, CL_TRUE, 0, sizeof pool0, pool0, 0, NULL, NULL);
    /* GLA waits on a user event released only after the call: the wait list holds. */
    cl_event ev = NULL, gate = gdn ? NULL : clCreateUserEvent(c, NULL);
    clattn_enqueue en = {q, gate ? 1u : 0u, gate ? &gate : NULL, &ev};
    CHECK((gdn ? clattn_gdn_decode : clattn_gla_decode)(ctx, &cfg, &tn, &sp, &db, &en) == CLATTN_SUCCESS);
    CHECK(ev != NULL);
    if (gate) {
      cl_int st = CL_COMPLETE;
      clGetEventInfo(ev, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof st, &st, NULL);
      CHECK(st != CL_COMPLETE); /* still gated */
      clSetUserEventStatus(gate, CL_COMPLETE);
      clReleaseEvent(gate);
    }
    if (ev) { clWaitForEvents(1, &ev); clReleaseEvent(ev); }
    read_back(q, od, out, sizeof out);
    read_back(q, sd, pool, sizeof pool);
    ref_batch(gdn, 2, dec_cu, dec_idx);
    double wo = worst(out, want_o, 2 * HV * DV), ws = worst(pool, want_pool, SLOTS * SLOT);
    CHECK(wo < 1e-4 && ws < 1e-4);
    printf("%s decode: max |o - ref| %.2g, max |state - ref| %.2g\n", gdn ? "gdn" : "gla", wo, ws);
  }

  /* ---- prefill: request 0 (3 tokens) in slot 1, request 1 (2 tokens) without a state */
  static const int32_t pf_idx[2] = {1, -1}, pf_cu[3] = {0, 3, 5};
  cl_mem pf_idx_d = buffer(c, sizeof pf_idx, pf_idx, q), pf_cu_d = buffer(c, sizeof pf_cu, pf_cu, q);
  clattn_linear_batch pb;
  memset(&pb, 0, sizeof pb);
  pb.batch_size = 2; pb.state_indices = pf_idx; pb.state_indices_dev = pf_idx_d;
  pb.cu_seqlens = pf_cu; pb.cu_seqlens_dev = pf_cu_d; pb.num_tokens = 5;
  bad = pb;
  static const int32_t bad_cu[3] = {0, 4, 3};
  bad.cu_seqlens = bad_cu;
  clEnqueueWriteBuffer(q, sd, CL_TRUE, 0, sizeof pool0, pool0, 0, NULL, NULL);
  clEnqueueWriteBuffer(q, od, CL_TRUE, 0, sizeof osent, osent, 0, NULL, NULL);
  CHECK_FAILS(clattn_gdn_prefill(ctx, &cfg, &tn, &sp, &bad, NULL), CLATTN_INVALID_ARGUMENT, "cu_seqlens");
  read_back(q, od, out, sizeof out);
  CHECK(memcmp(out, osent, sizeof out) == 0);
  for (int gdn = 1; gdn >= 0; --gdn) {
    clEnqueueWriteBuffer(q, sd, CL_TRUE, 0, sizeof pool0, pool0, 0, NULL, NULL);
    CHECK((gdn ? clattn_gdn_prefill : clattn_gla_prefill)(ctx, &cfg, &tn, &sp, &pb, NULL) == CLATTN_SUCCESS);
    read_back(q, od, out, sizeof out);
    read_back(q, sd, pool, sizeof pool);
    ref_batch(gdn, 2, pf_cu, pf_idx);
    double wo = worst(out, want_o, 5 * HV * DV), ws = worst(pool, want_pool, SLOTS * SLOT);
    CHECK(wo < 1e-4 && ws < 1e-4);
    printf("%s prefill: max |o - ref| %.2g, max |state - ref| %.2g\n", gdn ? "gdn" : "gla", wo, ws);
  }

  /* ---- zero / copy slots (pool back to pool0 first) */
  clEnqueueWriteBuffer(q, sd, CL_TRUE, 0, sizeof pool0, pool0, 0, NULL, NULL);
  static const int32_t zs[1] = {0}, bad_zs[1] = {SLOTS};
  CHECK_FAILS(clattn_linear_zero_slots(ctx, &cfg, &sp, bad_zs, 1, NULL), CLATTN_INVALID_ARGUMENT, "slot");
  CHECK_FAILS(clattn_linear_zero_slots(ctx, &cfg, &sp, NULL, 1, NULL), CLATTN_INVALID_ARGUMENT, "slots");
  CHECK_FAILS(clattn_linear_copy_slot(ctx, &cfg, &sp, 2, -1, NULL), CLATTN_INVALID_ARGUMENT, "-1");
  read_back(q, sd, pool, sizeof pool);
  CHECK(memcmp(pool, pool0, sizeof pool) == 0);
  CHECK(clattn_linear_zero_slots(ctx, &cfg, &sp, zs, 1, NULL) == CLATTN_SUCCESS);
  CHECK(clattn_linear_copy_slot(ctx, &cfg, &sp, 2, 3, NULL) == CLATTN_SUCCESS);
  read_back(q, sd, pool, sizeof pool);
  int zero_ok = 1;
  for (int e = 0; e < SLOT; ++e) zero_ok &= pool[e] == 0.0f;
  CHECK(zero_ok);
  CHECK(memcmp(pool + 3 * SLOT, pool0 + 2 * SLOT, SLOT * 4) == 0);
  CHECK(memcmp(pool + 1 * SLOT, pool0 + 1 * SLOT, 2 * SLOT * 4) == 0);

  clReleaseMemObject(qd); clReleaseMemObject(kd); clReleaseMemObject(vd); clReleaseMemObject(gd);
  clReleaseMemObject(bd); clReleaseMemObject(od); clReleaseMemObject(sd); clReleaseMemObject(dec_idx_d);
  clReleaseMemObject(pf_idx_d); clReleaseMemObject(pf_cu_d);
  clattn_context_release(ctx);
  return report();
}
