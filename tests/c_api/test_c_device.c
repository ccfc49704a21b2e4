/* Device listing and the device profile as a struct through the C ABI, compiled as C. */
#include "c_test_util.h"

int main(void) {
  int n = -1;
  CHECK(clattn_device_count(&n) == CLATTN_SUCCESS);
  CHECK(n >= 1);
  CHECK_FAILS(clattn_device_count(NULL), CLATTN_INVALID_ARGUMENT, "out");
  clattn_device_info info, sentinel;
  memset(&sentinel, 0x5a, sizeof sentinel);
  for (int i = 0; i < n; ++i) {
    CHECK(clattn_device_info_at(i, &info) == CLATTN_SUCCESS);
    CHECK(info.index == i);
    CHECK(info.vendor[0] != '\0' && info.device_name[0] != '\0');
    CHECK(info.compute_units > 0 && info.local_mem_bytes > 0 && info.max_work_group_size > 0);
    CHECK(info.num_subgroup_sizes >= 0 && info.num_subgroup_sizes <= 8);
    printf("device %d: %s (%s, driver %s, arch \"%s\"): %u CUs, %llu KiB local, fp16 %d, subgroups %d",
           info.index, info.device_name, info.vendor, info.driver_version, info.architecture, info.compute_units,
           (unsigned long long)(info.local_mem_bytes / 1024), info.fp16, info.subgroups);
    for (int s = 0; s < info.num_subgroup_sizes; ++s) printf("%s%u", s ? "," : " [", info.subgroup_sizes[s]);
    printf("%s, nv cc %d\n", info.num_subgroup_sizes ? "]" : "", info.nv_compute_capability);
  }
  info = sentinel;
  CHECK_FAILS(clattn_device_info_at(n, &info), CLATTN_INVALID_ARGUMENT, "index");
  CHECK(memcmp(&info, &sentinel, sizeof info) == 0);
  CHECK_FAILS(clattn_device_info_at(-1, &info), CLATTN_INVALID_ARGUMENT, "index");
  CHECK_FAILS(clattn_device_info_at(0, NULL), CLATTN_INVALID_ARGUMENT, "out");

  clattn_context ctx = NULL;
  CHECK(clattn_context_create(NULL, &ctx) == CLATTN_SUCCESS);
  if (!ctx) return report();
  CHECK(clattn_device_info_get(ctx, &info) == CLATTN_SUCCESS);
  CHECK(info.index >= 0 && info.index < n);
  clattn_device_info at;
  CHECK(clattn_device_info_at(info.index, &at) == CLATTN_SUCCESS);
  CHECK(strcmp(at.device_name, info.device_name) == 0 && at.compute_units == info.compute_units);
  /* the JSON form names the same device */
  char json[16384];
  size_t need = 0;
  CHECK(clattn_device_profile_json(ctx, json, sizeof json, &need) == CLATTN_SUCCESS);
  CHECK(strstr(json, info.device_name) != NULL);
  CHECK_FAILS(clattn_device_info_get(NULL, &info), CLATTN_INVALID_ARGUMENT, "ctx");
  CHECK_FAILS(clattn_device_info_get(ctx, NULL), CLATTN_INVALID_ARGUMENT, "out");
  clattn_context_release(ctx);
  return report();
}
