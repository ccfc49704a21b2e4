#include <atomic>
#include <algorithm>
#include <cctype>
#include <mutex>

#include "runtime/buffer.hpp"
#include "runtime/context_impl.hpp"
#include "runtime/env.hpp"
#include "runtime/error.hpp"
#include "runtime/log.hpp"
#include "runtime/profile.hpp"

namespace clattn {

const char* version() noexcept { return CLATTN_VERSION_STRING; }

namespace {
// Enumeration is serialised: the first clGetPlatformIDs/clGetDeviceIDs of a process
// initialise the ICD loader and its drivers, and that is not thread-safe everywhere
// (PoCL crashes or reports no device when threads race it).
std::mutex g_enumeration;
}  // namespace

std::vector<DeviceEntry> list_devices() {
  std::lock_guard<std::mutex> lock(g_enumeration);
  std::vector<DeviceEntry> out;
  cl_uint np = 0;
  cl_int err = clGetPlatformIDs(0, nullptr, &np);
  if (err == -1001 /* CL_PLATFORM_NOT_FOUND_KHR: ICD loader found no platform */ || np == 0) return out;
  rt::check_cl(err, "clGetPlatformIDs");
  std::vector<cl_platform_id> ps(np);
  rt::check_cl(clGetPlatformIDs(np, ps.data(), nullptr), "clGetPlatformIDs");
  for (cl_platform_id p : ps) {
    cl_uint nd = 0;
    if (clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, 0, nullptr, &nd) != CL_SUCCESS || nd == 0) continue;
    std::vector<cl_device_id> ds(nd);
    if (clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, nd, ds.data(), nullptr) != CL_SUCCESS) continue;
    for (cl_device_id d : ds) {
      DeviceEntry e;
      e.index = int(out.size());
      e.platform = p;
      e.device = d;
      e.profile = rt::query_profile(p, d);
      out.push_back(std::move(e));
    }
  }
  return out;
}

namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return (char)std::tolower(c); });
  return s;
}

std::string describe(const std::vector<DeviceEntry>& devs) {
  if (devs.empty()) return "no OpenCL device found (is an ICD such as pocl-opencl-icd installed?)";
  std::string s = "available devices:";
  for (auto& d : devs)
    s += "\n  [" + std::to_string(d.index) + "] " + d.profile.device_name + " (" + d.profile.vendor + ", " +
         d.profile.platform_name + ")";
  return s;
}

const DeviceEntry& select(const std::vector<DeviceEntry>& devs, const std::string& selector_arg) {
  std::string selector = selector_arg.empty() ? rt::env("CLATTN_DEVICE") : selector_arg;
  const char* from = selector_arg.empty() ? "CLATTN_DEVICE" : "device selector";
  if (devs.empty()) throw Error(Status::DeviceNotFound, describe(devs));
  if (selector.empty()) {
    for (auto& d : devs) if (d.profile.is_gpu) return d;
    for (auto& d : devs) if (d.profile.is_cpu) return d;
    return devs.front();
  }
  std::string sel = lower(selector);
  if (std::all_of(sel.begin(), sel.end(), [](unsigned char c) { return std::isdigit(c); })) {
    size_t idx = std::stoul(sel);
    if (idx < devs.size()) return devs[idx];
  } else {
    for (auto& d : devs) if (d.profile.vendor == sel) return d;
    if (sel == "gpu") for (auto& d : devs) if (d.profile.is_gpu) return d;
    for (auto& d : devs) if (lower(d.profile.device_name).find(sel) != std::string::npos) return d;
    for (auto& d : devs) if (lower(d.profile.platform_name).find(sel) != std::string::npos) return d;
  }
  throw Error(Status::DeviceNotFound,
              std::string(from) + "='" + selector + "' matches no device (use an index, a vendor or a name substring); " +
                  describe(devs));
}

}  // namespace

namespace detail {

ContextImpl::ContextImpl(cl_platform_id p, cl_context c, cl_device_id d, cl_command_queue q, bool adopt,
                         const ContextOptions& options)
    : platform(p), ctx(c), device(d), queue(q), adopted(adopt), programs(c, d) {
  cl_command_queue_properties props = 0;
  clGetCommandQueueInfo(q, CL_QUEUE_PROPERTIES, sizeof props, &props, nullptr);
  profiling = (props & CL_QUEUE_PROFILING_ENABLE) != 0;
  try {
    profile = rt::query_profile(p, d, options);
  } catch (...) {
    release();  // the destructor does not run for a throwing constructor
    throw;
  }
  programs.set_profile(profile);
  cl_int err = CL_SUCCESS;
  const cl_int zero = 0;
  // Initialised from the host at creation: no command on a (possibly adopted) queue.
  faults = rt::create_buffer(c, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, sizeof zero, &err,
                             const_cast<cl_int*>(&zero));
  if (err != CL_SUCCESS) {
    release();  // the destructor does not run for a throwing constructor
    rt::throw_cl(err, "clCreateBuffer", "the context's device fault word");
  }
}

void ContextImpl::on_release(void (*hook)()) {
  std::lock_guard<std::mutex> lock(release_mu);
  if (std::find(release_hooks.begin(), release_hooks.end(), hook) == release_hooks.end())
    release_hooks.push_back(hook);
}

void ContextImpl::release() {
  std::vector<void (*)()> hooks;
  {
    std::lock_guard<std::mutex> lock(release_mu);
    hooks.swap(release_hooks);
  }
  for (auto hook : hooks) {
    try {
      hook();
    } catch (const std::exception& e) {
      rt::log().warn("context release: a release hook failed: {}", e.what());
    }
  }
  {
    std::lock_guard<std::mutex> lock(memo_mu);
    memo.clear();  // (may hold programs: before the program cache goes)
  }
  programs.clear();
  if (faults) clReleaseMemObject(faults);
  if (queue) clReleaseCommandQueue(queue);
  if (ctx) clReleaseContext(ctx);
  if (device) clReleaseDevice(device);
  faults = nullptr, queue = nullptr, ctx = nullptr, device = nullptr;
}

ContextImpl::~ContextImpl() { release(); }

}  // namespace detail

Context Context::create(const std::string& selector) { return create(selector, ContextOptions{}); }

Context Context::create(const std::string& selector, const ContextOptions& options) {
  auto devs = list_devices();
  const DeviceEntry& e = select(devs, selector);
  cl_int err = CL_SUCCESS;
  cl_context ctx = clCreateContext(nullptr, 1, &e.device, nullptr, nullptr, &err);
  rt::check_cl(err, "clCreateContext", "creating a context on " + e.profile.device_name);
  cl_queue_properties qp[] = {CL_QUEUE_PROPERTIES, CL_QUEUE_PROFILING_ENABLE, 0};
  cl_command_queue q = clCreateCommandQueueWithProperties(ctx, e.device, qp, &err);
  if (err != CL_SUCCESS) {
    clReleaseContext(ctx);
    rt::throw_cl(err, "clCreateCommandQueueWithProperties", "creating the queue on " + e.profile.device_name);
  }
  clRetainDevice(e.device);
  auto impl = std::make_shared<detail::ContextImpl>(e.platform, ctx, e.device, q, false, options);
  rt::log().debug("context on [{}] {} ({}, driver {}){}", e.index, e.profile.device_name, e.profile.platform_name,
                  e.profile.driver_version, impl->profile.portable_only ? ", portable-only variants" : "");
  return Context(impl);
}

Context Context::adopt(cl_context ctx, cl_device_id dev, cl_command_queue queue) {
  return adopt(ctx, dev, queue, ContextOptions{});
}

Context Context::adopt(cl_context ctx, cl_device_id dev, cl_command_queue queue, const ContextOptions& options) {
  if (!ctx) rt::invalid("adopt: ctx is null");
  if (!dev) rt::invalid("adopt: device is null");
  if (!queue) rt::invalid("adopt: queue is null");
  cl_context qctx = nullptr;
  rt::check_cl(clGetCommandQueueInfo(queue, CL_QUEUE_CONTEXT, sizeof qctx, &qctx, nullptr), "clGetCommandQueueInfo",
               "checking the adopted queue");
  if (qctx != ctx) rt::invalid("adopt: queue does not belong to ctx");
  cl_device_id qdev = nullptr;
  rt::check_cl(clGetCommandQueueInfo(queue, CL_QUEUE_DEVICE, sizeof qdev, &qdev, nullptr), "clGetCommandQueueInfo");
  if (qdev != dev) rt::invalid("adopt: queue is not on device");
  cl_platform_id platform = nullptr;
  rt::check_cl(clGetDeviceInfo(dev, CL_DEVICE_PLATFORM, sizeof platform, &platform, nullptr), "clGetDeviceInfo");
  // Retain what we adopt: the engine keeps its own references and releases them itself.
  rt::check_cl(clRetainContext(ctx), "clRetainContext");
  clRetainDevice(dev);
  rt::check_cl(clRetainCommandQueue(queue), "clRetainCommandQueue");
  return Context(std::make_shared<detail::ContextImpl>(platform, ctx, dev, queue, true, options));
}

cl_context Context::cl_ctx() const { return impl_->ctx; }
cl_device_id Context::cl_device() const { return impl_->device; }
cl_command_queue Context::cl_queue() const { return impl_->queue; }
const DeviceProfile& Context::profile() const { return impl_->profile; }
bool Context::profiling_enabled() const { return impl_->profiling; }
void Context::finish() const { rt::check_cl(clFinish(impl_->queue), "clFinish"); }

std::uint32_t Context::device_faults(bool clear) const {
  cl_int bits = 0;
  rt::check_cl(clEnqueueReadBuffer(impl_->queue, impl_->faults, CL_TRUE, 0, sizeof bits, &bits, 0, nullptr, nullptr),
               "clEnqueueReadBuffer", "reading the device fault word");
  if (clear && bits) {
    const cl_int zero = 0;
    rt::check_cl(clEnqueueWriteBuffer(impl_->queue, impl_->faults, CL_TRUE, 0, sizeof zero, &zero, 0, nullptr, nullptr),
                 "clEnqueueWriteBuffer", "clearing the device fault word");
  }
  return std::uint32_t(bits);
}

namespace {
std::atomic<unsigned long long> g_allocations{0};
}
namespace rt {
cl_mem create_buffer(cl_context ctx, cl_mem_flags flags, std::size_t bytes, cl_int* err, void* host) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  return clCreateBuffer(ctx, flags, bytes ? bytes : 1, host, err);
}
}  // namespace rt
unsigned long long device_allocation_count() noexcept { return g_allocations.load(std::memory_order_relaxed); }

DeviceBuffer::DeviceBuffer(const Context& ctx, std::size_t bytes, cl_mem_flags flags) : bytes_(bytes) {
  const std::string what = "DeviceBuffer: bytes = " + std::to_string(bytes);
  rt::check_alloc_size(ctx.profile(), bytes, what);
  cl_int err = CL_SUCCESS;
  mem_ = rt::create_buffer(ctx.cl_ctx(), flags, bytes, &err);
  if (err == CL_MEM_OBJECT_ALLOCATION_FAILURE || err == CL_OUT_OF_RESOURCES || err == CL_OUT_OF_HOST_MEMORY)
    throw Error(Status::OutOfMemory, what + ": cannot allocate", err);
  rt::check_cl(err, "clCreateBuffer", "allocating " + std::to_string(bytes) + " bytes");
  try {
    rt::zero_fill(ctx.cl_queue(), {{mem_, bytes, "DeviceBuffer"}});
  } catch (...) {
    clReleaseMemObject(mem_);
    mem_ = nullptr;
    throw;
  }
}
DeviceBuffer::~DeviceBuffer() {
  if (mem_) clReleaseMemObject(mem_);
}
DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept : mem_(o.mem_), bytes_(o.bytes_) {
  o.mem_ = nullptr;
  o.bytes_ = 0;
}
DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (mem_) clReleaseMemObject(mem_);
    mem_ = o.mem_;
    bytes_ = o.bytes_;
    o.mem_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}
void DeviceBuffer::write(const Context& ctx, const void* src, std::size_t bytes, std::size_t offset) {
  if (offset + bytes > bytes_) rt::invalid("DeviceBuffer::write: range past the end of the buffer");
  if (bytes == 0) return;
  rt::check_cl(clEnqueueWriteBuffer(ctx.cl_queue(), mem_, CL_TRUE, offset, bytes, src, 0, nullptr, nullptr),
               "clEnqueueWriteBuffer");
}
void DeviceBuffer::read(const Context& ctx, void* dst, std::size_t bytes, std::size_t offset) const {
  if (offset + bytes > bytes_) rt::invalid("DeviceBuffer::read: range past the end of the buffer");
  if (bytes == 0) return;
  rt::check_cl(clEnqueueReadBuffer(ctx.cl_queue(), mem_, CL_TRUE, offset, bytes, dst, 0, nullptr, nullptr),
               "clEnqueueReadBuffer");
}
void DeviceBuffer::fill_bytes(const Context& ctx, unsigned char value) {
  if (!bytes_) return;
  rt::check_cl(clEnqueueFillBuffer(ctx.cl_queue(), mem_, &value, 1, 0, bytes_, 0, nullptr, nullptr),
               "clEnqueueFillBuffer");
  rt::check_cl(clFinish(ctx.cl_queue()), "clFinish");
}

}  // namespace clattn
