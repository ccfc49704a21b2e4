// Device selection, adopting an engine's OpenCL objects, and the runtime self-check.
#include <chrono>
#include <cstdlib>
#include <thread>

#include "support/test_support.hpp"

using namespace clattn;

namespace {
cl_uint refcount_ctx(cl_context c) {
  cl_uint n = 0;
  clGetContextInfo(c, CL_CONTEXT_REFERENCE_COUNT, sizeof n, &n, nullptr);
  return n;
}
cl_uint refcount_queue(cl_command_queue q) {
  cl_uint n = 0;
  clGetCommandQueueInfo(q, CL_QUEUE_REFERENCE_COUNT, sizeof n, &n, nullptr);
  return n;
}
}  // namespace

TEST(Context, ListsDevicesWithProfiles) {
  auto devs = list_devices();
  ASSERT_FALSE(devs.empty());
  for (auto& d : devs) {
    EXPECT_FALSE(d.profile.device_name.empty());
    EXPECT_FALSE(d.profile.vendor.empty());
    EXPECT_GT(d.profile.compute_units, 0u);
    EXPECT_GT(d.profile.max_work_group_size, 0u);
  }
}

TEST(Context, SelectorsByIndexVendorAndName) {
  auto devs = list_devices();
  auto& d0 = devs.front();
  EXPECT_EQ(Context::create("0").cl_device(), d0.device);
  EXPECT_EQ(Context::create(d0.profile.vendor).profile().vendor, d0.profile.vendor);
  std::string part = d0.profile.device_name.substr(0, 6);
  EXPECT_NE(Context::create(part).profile().device_name.find(part), std::string::npos);
}

TEST(Context, BadSelectorListsDevices) {
  EXPECT_TRUE(test::throws_error([] { Context::create("no-such-device-xyz"); }, Status::DeviceNotFound,
                                 "available devices"));
  EXPECT_TRUE(test::throws_error([] { Context::create("99"); }, Status::DeviceNotFound, "'99'"));
  setenv("CLATTN_DEVICE", "no-such-device-xyz", 1);
  EXPECT_TRUE(test::throws_error([] { Context::create(); }, Status::DeviceNotFound, "CLATTN_DEVICE"));
  unsetenv("CLATTN_DEVICE");
}

TEST(Context, UnknownForcedVendorIsAnError) {
  const char* old = std::getenv("CLATTN_FORCE_VENDOR");
  std::string saved = old ? old : "";
  setenv("CLATTN_FORCE_VENDOR", "acme", 1);
  EXPECT_TRUE(test::throws_error([] { Context::create(); }, Status::InvalidArgument, "CLATTN_FORCE_VENDOR='acme'"));
  setenv("CLATTN_FORCE_VENDOR", "amd", 1);
  EXPECT_EQ(Context::create().profile().param_vendor(), "amd");
  if (saved.empty()) unsetenv("CLATTN_FORCE_VENDOR");
  else setenv("CLATTN_FORCE_VENDOR", saved.c_str(), 1);
}

TEST(Context, AdoptedObjectsAreRetainedNotReleased) {
  auto devs = list_devices();
  cl_device_id dev = test::ctx().cl_device();
  cl_int err = 0;
  cl_context c = clCreateContext(nullptr, 1, &dev, nullptr, nullptr, &err);
  ASSERT_EQ(err, CL_SUCCESS);
  cl_command_queue q = clCreateCommandQueueWithProperties(c, dev, nullptr, &err);
  ASSERT_EQ(err, CL_SUCCESS);
  {
    Context adopted = Context::adopt(c, dev, q);
    EXPECT_EQ(adopted.cl_ctx(), c);
    EXPECT_EQ(adopted.cl_queue(), q);
    EXPECT_FALSE(adopted.profiling_enabled());
    EXPECT_GT(refcount_ctx(c), 1u);
    DeviceBuffer b(adopted, 64);
    b.fill_bytes(adopted, 0x11);
    Context copy = adopted;  // handles share one impl: still one release
  }
  // A driver may hold the queue briefly for a command that just completed (PoCL releases
  // its event's reference asynchronously), so wait until only the engine's reference can
  // remain: clattn must not keep one.
  cl_uint refs = 0;
  for (int i = 0; i < 200; ++i) {
    clFinish(q);
    if ((refs = refcount_queue(q)) == 1u) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(refs, 1u);
  // The engine's objects still work after clattn let go of them.
  cl_mem m = clCreateBuffer(c, CL_MEM_READ_WRITE, 16, nullptr, &err);
  ASSERT_EQ(err, CL_SUCCESS);
  EXPECT_EQ(clFinish(q), CL_SUCCESS);
  clReleaseMemObject(m);
  clReleaseCommandQueue(q);
  clReleaseContext(c);
}

TEST(Context, AdoptRejectsMismatchedObjects) {
  EXPECT_TRUE(test::throws_error([] { Context::adopt(nullptr, nullptr, nullptr); }, Status::InvalidArgument, "ctx"));
  cl_device_id dev = test::ctx().cl_device();
  cl_int err = 0;
  cl_context other = clCreateContext(nullptr, 1, &dev, nullptr, nullptr, &err);
  EXPECT_TRUE(test::throws_error([&] { Context::adopt(other, dev, test::ctx().cl_queue()); },
                                 Status::InvalidArgument, "queue does not belong"));
  clReleaseContext(other);
}

TEST(Context, SelfCheckPasses) { EXPECT_NE(self_check(test::ctx()).find("passed"), std::string::npos); }

TEST(Context, DeviceBufferBoundsAreChecked) {
  DeviceBuffer b(test::ctx(), 16);
  char data[32] = {};
  EXPECT_TRUE(test::throws_error([&] { b.write(test::ctx(), data, 32); }, Status::InvalidArgument, "past the end"));
}

// A size the device cannot take in one buffer fails at construction, not at first use
// (PoCL accepts it and fails lazily); a new buffer starts zeroed.
TEST(DeviceBuffer, LargerThanMaxAllocFailsAtCreationAndNewIsZero) {
  const auto max = test::ctx().profile().max_alloc_bytes;
  ASSERT_GT(max, 0u);
  EXPECT_TRUE(test::throws_error([&] { DeviceBuffer(test::ctx(), size_t(max) + 1); }, Status::OutOfMemory,
                                 "CL_DEVICE_MAX_MEM_ALLOC_SIZE"));
  EXPECT_TRUE(test::throws_error([&] { DeviceBuffer(test::ctx(), size_t(400) << 30); }, Status::OutOfMemory,
                                 "DeviceBuffer: bytes = " + std::to_string(size_t(400) << 30)));
  DeviceBuffer b(test::ctx(), 1001);
  std::vector<unsigned char> got(1001, 0xff);
  b.read(test::ctx(), got.data(), got.size());
  EXPECT_EQ(got, std::vector<unsigned char>(1001, 0));
}
