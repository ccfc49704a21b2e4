/* Shared helpers of the C ABI tests (plain C99). */
#ifndef CLATTN_C_TEST_UTIL_H
#define CLATTN_C_TEST_UTIL_H
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clattn/clattn.h"

static int passed = 0, failed = 0;
#define CHECK(cond)                                                                                 \
  do {                                                                                              \
    if (cond) ++passed;                                                                             \
    else { ++failed; fprintf(stderr, "FAILED %s:%d: %s (last error: %s)\n", __FILE__, __LINE__,     \
                             #cond, clattn_last_error()); }                                         \
  } while (0)
/* A call that must fail with `status` and a message containing `word`. */
#define CHECK_FAILS(call, status, word)                                                             \
  do {                                                                                              \
    clattn_status st_ = (call);                                                                     \
    CHECK(st_ == (status));                                                                         \
    if (strstr(clattn_last_error(), (word)) == NULL) {                                              \
      ++failed;                                                                                     \
      fprintf(stderr, "FAILED %s:%d: message \"%s\" does not name \"%s\"\n", __FILE__, __LINE__,    \
              clattn_last_error(), (word));                                                         \
    } else ++passed;                                                                                \
  } while (0)

static unsigned lcg_state = 12345u;
static float rnd(void) {
  lcg_state = lcg_state * 1664525u + 1013904223u;
  return (float)((lcg_state >> 8) & 0xffff) / 32768.0f - 1.0f;
}

static cl_mem buffer(cl_context c, size_t bytes, const void* init, cl_command_queue q) {
  cl_int err;
  cl_mem m = clCreateBuffer(c, CL_MEM_READ_WRITE, bytes ? bytes : 4, NULL, &err);
  if (err != CL_SUCCESS) { fprintf(stderr, "clCreateBuffer(%zu) failed: %d\n", bytes, err); exit(2); }
  if (init && bytes) clEnqueueWriteBuffer(q, m, CL_TRUE, 0, bytes, init, 0, NULL, NULL);
  return m;
}

static void read_back(cl_command_queue q, cl_mem m, void* dst, size_t bytes) {
  clEnqueueReadBuffer(q, m, CL_TRUE, 0, bytes, dst, 0, NULL, NULL);
}

/* The context's queue and cl_context. */
static void cl_objects(clattn_context ctx, cl_command_queue* q, cl_context* c) {
  clattn_context_queue(ctx, q);
  clGetCommandQueueInfo(*q, CL_QUEUE_CONTEXT, sizeof *c, c, NULL);
}

/* Creates the default-device context and returns its queue and cl_context; 0 on failure
 * (counted as a failed check). */
static int open_context(clattn_context* ctx, cl_command_queue* q, cl_context* c) {
  *ctx = NULL;
  CHECK(clattn_context_create(NULL, ctx) == CLATTN_SUCCESS);
  if (!*ctx) return 0;
  cl_objects(*ctx, q, c);
  return 1;
}

/* Largest |got - want|; a NaN counts as the worst. */
static double worst(const float* got, const double* want, int n) {
  double w = 0;
  for (int i = 0; i < n; ++i) {
    double e = fabs(got[i] - want[i]);
    if (!(e <= w)) w = e;
  }
  return w;
}

static int report(void) {
  printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
#endif
