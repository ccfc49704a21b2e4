/* The C ABI compiled as C: contexts, errors, profile JSON, self-check. Prints the plain
 * "N passed, N failed" line and exits non-zero on any failure. */
#include "c_test_util.h"

int main(void) {
  clattn_context ctx = NULL;
  CHECK(strlen(clattn_version()) > 0);
  CHECK(clattn_context_create(NULL, &ctx) == CLATTN_SUCCESS);
  CHECK(ctx != NULL);
  CHECK(strcmp(clattn_last_error(), "") == 0);

  clattn_context bad = NULL;
  CHECK(clattn_context_create("no-such-device-xyz", &bad) == CLATTN_DEVICE_NOT_FOUND);
  CHECK(bad == NULL);
  CHECK(strstr(clattn_last_error(), "available devices") != NULL);
  CHECK(clattn_context_create(NULL, NULL) == CLATTN_INVALID_ARGUMENT);
  CHECK(strstr(clattn_last_error(), "out") != NULL);

  size_t needed = 0;
  CHECK(clattn_device_profile_json(ctx, NULL, 0, &needed) == CLATTN_SUCCESS);
  CHECK(needed > 10);
  char buf[16];
  CHECK(clattn_device_profile_json(ctx, buf, sizeof buf, &needed) == CLATTN_SUCCESS);
  CHECK(buf[0] == '{' && strlen(buf) == sizeof buf - 1);
  CHECK(clattn_self_check(ctx) == CLATTN_SUCCESS);
  CHECK(strcmp(clattn_status_name(CLATTN_BUILD_FAILED), "build failed") == 0);

  /* Adopt the context's own objects: retained, so releasing both handles is safe. */
  cl_command_queue q = NULL;
  CHECK(clattn_context_queue(ctx, &q) == CLATTN_SUCCESS);
  cl_context clctx = NULL;
  cl_device_id dev = NULL;
  clGetCommandQueueInfo(q, CL_QUEUE_CONTEXT, sizeof clctx, &clctx, NULL);
  clGetCommandQueueInfo(q, CL_QUEUE_DEVICE, sizeof dev, &dev, NULL);
  clattn_context adopted = NULL;
  CHECK(clattn_context_adopt(clctx, dev, q, &adopted) == CLATTN_SUCCESS);
  clattn_context_release(adopted);
  CHECK(clFinish(q) == CL_SUCCESS);

  /* Portable-only mode as a context option: shown by the device info and the profile JSON. */
  clattn_context portable = NULL;
  CHECK(clattn_context_create_with_variants(NULL, "portable", &portable) == CLATTN_SUCCESS);
  clattn_device_info info;
  CHECK(clattn_device_info_get(portable, &info) == CLATTN_SUCCESS);
  CHECK(info.portable_only == 1);
  size_t json_size = 0;
  CHECK(clattn_device_profile_json(portable, NULL, 0, &json_size) == CLATTN_SUCCESS);
  char* json = (char*)malloc(json_size);
  CHECK(json && clattn_device_profile_json(portable, json, json_size, NULL) == CLATTN_SUCCESS);
  CHECK(json && strstr(json, "\"clattn_portable_only\":true") != NULL);
  free(json);
  clattn_context_release(portable);
  CHECK(clattn_context_adopt_with_variants(clctx, dev, q, "all", &adopted) == CLATTN_SUCCESS);
  CHECK(clattn_device_info_get(adopted, &info) == CLATTN_SUCCESS);
  CHECK(info.portable_only == 0);
  clattn_context_release(adopted);
  bad = NULL;
  CHECK_FAILS(clattn_context_create_with_variants(NULL, "fastest", &bad), CLATTN_INVALID_ARGUMENT, "variants");
  CHECK(bad == NULL);
  clattn_context_release(ctx);

  return report();
}
