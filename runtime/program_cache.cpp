#include "runtime/program_cache.hpp"

#include <chrono>

#include "runtime/kernel_sources.hpp"
#include "runtime/log.hpp"
#include "runtime/ptx_retarget.hpp"
#include "runtime/sha256.hpp"

namespace clattn::rt {
namespace {
constexpr const char* kCacheFormat = "clattn-program-cache-v1";
}  // namespace

std::string build_log(cl_program p, cl_device_id d) {
  size_t n = 0;
  clGetProgramBuildInfo(p, d, CL_PROGRAM_BUILD_LOG, 0, nullptr, &n);
  std::string s(n, '\0');
  if (n) clGetProgramBuildInfo(p, d, CL_PROGRAM_BUILD_LOG, n, s.data(), nullptr);
  while (!s.empty() && (s.back() == '\0' || s.back() == '\n')) s.pop_back();
  return s;
}

std::vector<unsigned char> program_binary(cl_program p) {
  size_t size = 0;
  if (clGetProgramInfo(p, CL_PROGRAM_BINARY_SIZES, sizeof size, &size, nullptr) != CL_SUCCESS || size == 0) return {};
  std::vector<unsigned char> bin(size);
  unsigned char* ptr = bin.data();
  if (clGetProgramInfo(p, CL_PROGRAM_BINARIES, sizeof ptr, &ptr, nullptr) != CL_SUCCESS) return {};
  return bin;
}

cl_program rebuild_program_sm90a(cl_context ctx, cl_device_id dev, cl_program p, const std::string& options,
                                 cl_int* err) {
  const std::vector<unsigned char> bin = program_binary(p);
  clReleaseProgram(p);
  auto ptx = retarget_ptx_sm90a(std::string(bin.begin(), bin.end()), ptx_maxnreg_option(options));
  *err = CL_SUCCESS;
  if (!ptx) return nullptr;
  const unsigned char* ptr = reinterpret_cast<const unsigned char*>(ptx->c_str());
  size_t size = ptx->size() + 1;
  cl_int bin_status = CL_SUCCESS;
  cl_program q = clCreateProgramWithBinary(ctx, 1, &dev, &size, &ptr, &bin_status, err);
  if (*err == CL_SUCCESS && bin_status != CL_SUCCESS) *err = bin_status;
  if (*err == CL_SUCCESS) *err = clBuildProgram(q, 1, &dev, options.c_str(), nullptr, nullptr);
  return q;
}

size_t Kernel::max_work_group_size(cl_device_id dev) const {
  size_t n = 0;
  check_cl(clGetKernelWorkGroupInfo(k_, dev, CL_KERNEL_WORK_GROUP_SIZE, sizeof n, &n, nullptr),
           "clGetKernelWorkGroupInfo", name_);
  return n;
}

uint64_t Kernel::local_mem_size(cl_device_id dev) const {
  cl_ulong n = 0;
  check_cl(clGetKernelWorkGroupInfo(k_, dev, CL_KERNEL_LOCAL_MEM_SIZE, sizeof n, &n, nullptr),
           "clGetKernelWorkGroupInfo", name_);
  return n;
}

uint64_t Kernel::private_mem_size(cl_device_id dev) const {
  cl_ulong n = 0;
  check_cl(clGetKernelWorkGroupInfo(k_, dev, CL_KERNEL_PRIVATE_MEM_SIZE, sizeof n, &n, nullptr),
           "clGetKernelWorkGroupInfo", name_);
  return n;
}

Program::~Program() {
  kernels_.clear();
  if (p_) clReleaseProgram(p_);
}

Kernel& Program::kernel(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = kernels_.find(name);
  if (it != kernels_.end()) return *it->second;
  cl_int err = CL_SUCCESS;
  cl_kernel k = clCreateKernel(p_, name.c_str(), &err);
  check_cl(err, "clCreateKernel", "kernel '" + name + "' of " + label_);
  auto& slot = kernels_[name];
  slot = std::make_unique<Kernel>(k, name);
  return *slot;
}

std::string device_build_options(const DeviceProfile& p, const std::string& op_options) {
  // Intel's compiler (IGC) gives a thread 128 GRF registers unless asked for its large register
  // file; on Xe-HPG, Xe-HPC and Xe2 that mode has 256 (Intel oneAPI GPU Optimization Guide,
  // "Small register mode vs. large register mode"), which the attention kernels' per-lane tiles
  // need: with 128 their builds spill (clattn-kernel-report, dg2 / pvc). On Xe-HPC and Xe2 IGC
  // otherwise picks SIMD32 for kernels without a required sub-group size, which spills even with
  // 256; CLATTN_SIMD asks for SIMD16 (common.clh: SIMD_ATTR). Only for the real vendor's compiler
  // (a forced vendor's runs go to another compiler, which rejects these options).
  if (p.vendor != "intel" || !p.is_gpu) return "";
  const std::string& a = p.architecture;
  std::string o;
  // (A program whose parameters keep the small file says -DCLATTN_GRF=128.)
  const bool small = op_options.find("-DCLATTN_GRF=128") != std::string::npos;
  if ((a == "xe-hpg" || a == "xe-hpc" || a == "xe2") && !small) o = "-cl-intel-256-GRF-per-thread";
  if ((a == "xe-hpc" || a == "xe2") && p.intel_required_subgroup_size) o += std::string(o.empty() ? "" : " ") + "-DCLATTN_SIMD=16";
  return o;
}

std::string make_options(const std::map<std::string, std::string>& defines, const std::string& extra) {
  std::string s = "-cl-std=CL1.2";
  for (auto& [k, v] : defines) s += " -D" + k + "=" + v;
  if (!extra.empty()) s += " " + extra;
  return s;
}

ProgramCache::ProgramCache(cl_context ctx, cl_device_id dev) : ctx_(ctx), dev_(dev) {}

void ProgramCache::set_profile(const DeviceProfile& p) {
  identity_ = p.platform_name + "\n" + p.platform_version + "\n" + p.device_name + "\n" + p.driver_version;
  profile_ = p;
}

std::string ProgramCache::key(const std::string& source, const std::string& options) const {
  Sha256 h;
  h.update(std::string(kCacheFormat) + '\0' + source + '\0' + options + '\0' + identity_);
  return h.hex();
}

ProgramCache::Stats ProgramCache::stats() const { return {compiled_.load(), disk_hits_.load(), memory_hits_.load()}; }

namespace {
constexpr size_t kMaxNoteBytes = 4096;
}  // namespace

std::string with_device_options(const DeviceProfile& p, const std::string& op_options) {
  const std::string device = device_build_options(p, op_options);
  return device.empty() ? op_options : op_options + " " + device;
}

std::string ProgramCache::full_options(const std::string& op_options) const {
  return with_device_options(profile_, op_options);
}

std::optional<std::string> ProgramCache::note(const std::string& file, const std::string& op_options,
                                              const std::string& suffix, bool* from_disk, bool use_disk) {
  if (from_disk) *from_disk = false;
  const std::string options = full_options(op_options);
  const std::string name = file + '\n' + options + '\n' + suffix;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = notes_.find(name);
    if (it != notes_.end()) return it->second;
  }
  if (!use_disk || !disk_.enabled()) return std::nullopt;
  auto text = disk_.load_note(key(kernel_source(file), options), suffix, kMaxNoteBytes);
  if (!text) return std::nullopt;
  if (from_disk) *from_disk = true;
  std::lock_guard<std::mutex> lock(mu_);
  notes_[name] = *text;
  return text;
}

void ProgramCache::set_note(const std::string& file, const std::string& op_options, const std::string& suffix,
                            const std::string& text) {
  const std::string options = full_options(op_options);
  {
    std::lock_guard<std::mutex> lock(mu_);
    notes_[file + '\n' + options + '\n' + suffix] = text;
  }
  if (disk_.enabled()) disk_.store_note(key(kernel_source(file), options), suffix, text);
}

void ProgramCache::clear() {
  std::lock_guard<std::mutex> lock(mu_);
  programs_.clear();
  by_name_.clear();
}

std::shared_ptr<Program> ProgramCache::get(const std::string& file, const std::string& op_options) {
  const std::string options = full_options(op_options);
  // Fast path: this (file, options) was asked for before; skip reading and hashing the
  // source (tens of microseconds), which matters for per-step callers.
  const std::string name = file + '\n' + options;
  {
    std::shared_future<std::shared_ptr<Program>> fut;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = by_name_.find(name);
      if (it != by_name_.end()) fut = it->second;
    }
    if (fut.valid()) {
      ++memory_hits_;
      return fut.get();  // waits if another thread is building it; rethrows its failure
    }
  }
  std::string source = kernel_source(file);
  std::string k = key(source, options);
  std::promise<std::shared_ptr<Program>> promise;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = programs_.find(k);
    if (it != programs_.end()) {
      auto fut = it->second;
      by_name_.emplace(name, fut);
      ++memory_hits_;
      return fut.get();
    }
    auto fut = promise.get_future().share();
    programs_.emplace(k, fut);
    by_name_.emplace(name, fut);
  }
  try {
    auto prog = build(file, source, options, k);
    promise.set_value(prog);
    return prog;
  } catch (...) {
    promise.set_exception(std::current_exception());
    throw;
  }
}

// rebuild_program_sm90a with the cache's error reporting: failures raise Status::BuildFailed,
// so the op tries its next variant.
cl_program ProgramCache::rebuild_sm90a(cl_program p, const std::string& file, const std::string& options) {
  cl_int err = CL_SUCCESS;
  cl_program q = rebuild_program_sm90a(ctx_, dev_, p, options, &err);
  if (!q && err == CL_SUCCESS)
    throw Error(Status::BuildFailed, "building " + file + " with [" + options +
                                         "]: the program binary is not sm_90 PTX, so it cannot be retargeted to sm_90a");
  if (err != CL_SUCCESS) {
    std::string blog = q ? build_log(q, dev_) : std::string();
    if (q) clReleaseProgram(q);
    throw Error(Status::BuildFailed,
                "building " + file + " with [" + options + "] for sm_90a failed: " + cl_error_name(err) + "\n" + blog, err);
  }
  return q;
}

std::shared_ptr<Program> ProgramCache::build(const std::string& file, const std::string& source,
                                             const std::string& options, const std::string& k) {
  auto t0 = std::chrono::steady_clock::now();
  cl_int err = CL_SUCCESS;
  if (auto bin = disk_.load(k)) {
    const unsigned char* ptr = bin->data();
    size_t size = bin->size();
    cl_int bin_status = CL_SUCCESS;
    cl_program p = clCreateProgramWithBinary(ctx_, 1, &dev_, &size, &ptr, &bin_status, &err);
    if (err == CL_SUCCESS && bin_status == CL_SUCCESS && clBuildProgram(p, 1, &dev_, options.c_str(), nullptr, nullptr) == CL_SUCCESS) {
      ++disk_hits_;
      log().debug("program cache hit: {} [{}] {}", file, options, k.substr(0, 12));
      return std::make_shared<Program>(p, dev_, file);
    }
    if (p) clReleaseProgram(p);
    log().warn("program cache: entry {} for {} was rejected by the driver; rebuilding", k.substr(0, 12), file);
  }
  const char* src = source.c_str();
  size_t len = source.size();
  cl_program p = clCreateProgramWithSource(ctx_, 1, &src, &len, &err);
  check_cl(err, "clCreateProgramWithSource", file);
  err = clBuildProgram(p, 1, &dev_, options.c_str(), nullptr, nullptr);
  if (err != CL_SUCCESS) {
    std::string blog = build_log(p, dev_);
    clReleaseProgram(p);
    throw Error(Status::BuildFailed,
                "building " + file + " with [" + options + "] failed: " + cl_error_name(err) + "\n" + blog, err);
  }
  // A compiler's diagnostics go through the logger with the program they belong to (the
  // kernels build without warnings everywhere: tests/ops/test_kernel_warnings.cpp).
  const std::string blog = build_log(p, dev_);
  if (blog.find("warning:") != std::string::npos)
    log().warn("{} [{}]: the OpenCL compiler reported:\n{}", file, options, blog);
  else if (!blog.empty())
    log().debug("{} [{}]: build log:\n{}", file, options, blog);
  if (options.find(kPtxSm90aOption) != std::string::npos) p = rebuild_sm90a(p, file, options);
  ++compiled_;
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  log().debug("program built: {} [{}] in {:.1f} ms (cache miss {})", file, options, ms, k.substr(0, 12));
  disk_.store(k, program_binary(p));
  return std::make_shared<Program>(p, dev_, file);
}

}  // namespace clattn::rt
