// Builds OpenCL programs from the embedded sources, once per (source, options) per
// context, backed by the on-disk binary cache. Kernels are handed out with a lock so
// several threads may enqueue the same kernel (clSetKernelArg is not thread-safe).
#pragma once
#include <atomic>
#include <cstring>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "clattn/context.hpp"
#include "runtime/disk_cache.hpp"
#include "runtime/error.hpp"
#include "runtime/recording.hpp"

namespace clattn::rt {

// A __local argument of the given size.
struct LocalMem {
  size_t bytes;
};

class Kernel {
 public:
  Kernel(cl_kernel k, std::string name) : k_(k), name_(std::move(name)) {}
  ~Kernel() { if (k_) clReleaseKernel(k_); }
  Kernel(const Kernel&) = delete;
  Kernel& operator=(const Kernel&) = delete;

  const std::string& name() const { return name_; }
  size_t max_work_group_size(cl_device_id dev) const;
  // Local memory the compiled kernel uses (its __local arrays and any local arguments set).
  uint64_t local_mem_size(cl_device_id dev) const;
  // Private memory one work-item of the compiled kernel uses (CL_KERNEL_PRIVATE_MEM_SIZE).
  uint64_t private_mem_size(cl_device_id dev) const;

  // Sets all arguments and enqueues, under this kernel's lock. dims = 1..3. Plain values
  // equal to the ones this kernel last took at the same index are not set again (OpenCL
  // keeps a kernel's arguments until they are changed, and every argument goes through
  // here); buffers are always set, since a released cl_mem's handle may come back as
  // another buffer.
  template <class... Args>
  void launch(cl_command_queue q, cl_uint dims, const size_t* global, const size_t* local, cl_uint num_wait,
              const cl_event* wait, cl_event* ev, const Args&... args) {
    if (Recording* r = recording_for(q)) return record(*r, dims, global, local, num_wait, wait, ev, args...);
    std::lock_guard<std::mutex> lock(mu_);
    if (last_.size() < sizeof...(Args)) last_.resize(sizeof...(Args));
    cl_uint idx = 0;
    (set_arg(idx++, args), ...);
    const cl_int err = clEnqueueNDRangeKernel(q, k_, dims, nullptr, global, local, num_wait, wait, ev);
    if (err != CL_SUCCESS) throw_cl(err, "clEnqueueNDRangeKernel", "launching " + name_);  // formatted only on failure
  }

 private:
  // A launch under capture (runtime/recording.hpp): a kernel object of its own with the
  // arguments set once. What it waits for is finished now, so every replay finds it done.
  template <class... Args>
  void record(Recording& r, cl_uint dims, const size_t* global, const size_t* local, cl_uint num_wait,
              const cl_event* wait, cl_event* ev, const Args&... args) {
    if (num_wait) check_cl(clWaitForEvents(num_wait, wait), "clWaitForEvents", "recording " + name_);
    cl_program prog = nullptr;
    check_cl(clGetKernelInfo(k_, CL_KERNEL_PROGRAM, sizeof prog, &prog, nullptr), "clGetKernelInfo", name_);
    cl_int err = CL_SUCCESS;
    cl_kernel k = clCreateKernel(prog, name_.c_str(), &err);
    check_cl(err, "clCreateKernel", "recording " + name_);
    cl_uint idx = 0;
    err = CL_SUCCESS;
    ((err = err != CL_SUCCESS ? err : set_once(k, idx++, args)), ...);
    if (err != CL_SUCCESS) {
      clReleaseKernel(k);
      throw_cl(err, "clSetKernelArg", "recording " + name_);
    }
    r.add(k, dims, global, local);  // owns k from here, also when it throws
    if (ev) *ev = r.complete_event();
  }
  // One clSetKernelArg: a local-memory size, or a plain value.
  template <class T>
  static cl_int set_once(cl_kernel k, cl_uint i, const T& v) {
    if constexpr (std::is_same_v<T, LocalMem>) {
      return clSetKernelArg(k, i, v.bytes, nullptr);
    } else {
      static_assert(std::is_trivially_copyable_v<T>, "kernel arguments are plain values");
      return clSetKernelArg(k, i, sizeof(T), &v);
    }
  }
  // The value last set at an index: its size (0: none, or a buffer) and bytes.
  struct LastArg {
    size_t size = 0;
    unsigned char bytes[8] = {};
  };
  template <class T>
  void set_arg(cl_uint i, const T& v) {
    cl_int err;
    LastArg& last = last_[i];
    if constexpr (std::is_same_v<T, LocalMem> || std::is_same_v<T, cl_mem> || sizeof(T) > sizeof(LastArg::bytes)) {
      last.size = 0;
      err = set_once(k_, i, v);
    } else {
      if (last.size == sizeof(T) && std::memcmp(last.bytes, &v, sizeof(T)) == 0) return;
      last.size = 0;  // unknown until the driver takes it
      err = set_once(k_, i, v);
      if (err == CL_SUCCESS) last.size = sizeof(T), std::memcpy(last.bytes, &v, sizeof(T));
    }
    if (err != CL_SUCCESS) throw_cl(err, "clSetKernelArg", name_ + " arg " + std::to_string(i));
  }
  cl_kernel k_;
  std::string name_;
  std::mutex mu_;
  std::vector<LastArg> last_;
};

class Program {
 public:
  Program(cl_program p, cl_device_id dev, std::string label) : p_(p), dev_(dev), label_(std::move(label)) {}
  ~Program();
  Program(const Program&) = delete;
  Program& operator=(const Program&) = delete;

  cl_program get() const { return p_; }
  Kernel& kernel(const std::string& name);  // created on first use, then reused
  const std::string& label() const { return label_; }

 private:
  cl_program p_;
  cl_device_id dev_;
  std::string label_;
  std::mutex mu_;
  std::map<std::string, std::unique_ptr<Kernel>> kernels_;
};

// A program's build log for `d` (trailing newlines dropped) and its binary (empty when the
// driver gives none).
std::string build_log(cl_program p, cl_device_id d);
std::vector<unsigned char> program_binary(cl_program p);

// `p` (built; released here) rebuilt from its own PTX by retarget_ptx_sm90a with `options`
// (runtime/ptx_retarget.hpp). Returns the new program with *err = the create / build status
// (a program whose build failed is returned for its log; nullptr if creating it failed), or
// nullptr with *err = CL_SUCCESS when p's binary is not sm_90 PTX (nothing was attempted).
cl_program rebuild_program_sm90a(cl_context ctx, cl_device_id dev, cl_program p, const std::string& options,
                                 cl_int* err);

// Options a program gets on this device after the op's own `op_options` (ProgramCache::get
// appends them): compiler register-file and SIMD choices (Intel GPUs).
std::string device_build_options(const DeviceProfile& p, const std::string& op_options);
// `op_options` followed by the device's: what ProgramCache::get builds with.
std::string with_device_options(const DeviceProfile& p, const std::string& op_options);

// Build options from named defines, sorted so equal sets give equal keys.
std::string make_options(const std::map<std::string, std::string>& defines, const std::string& extra = {});

class ProgramCache {
 public:
  ProgramCache(cl_context ctx, cl_device_id dev);
  void set_profile(const DeviceProfile& p);

  // The program for `file` (a cl_kernels/ name) built with `options` and the device's own
  // (device_build_options). Thread-safe; each
  // distinct (source, options) is built at most once per context. Build failures raise
  // Status::BuildFailed with the compiler log.
  std::shared_ptr<Program> get(const std::string& file, const std::string& options);

  // Cache key = SHA-256 of format, source, options, platform, device, driver.
  std::string key(const std::string& source, const std::string& options) const;

  // Small text notes about a program, kept per (file, options as get() builds them, suffix):
  // this context's map, else the note <key><suffix> beside the program's binary on disk
  // (*from_disk set; not with `use_disk` false), which then joins the map. nullopt when
  // neither has one. Suffixes: ".verdict" (self-validation, backends/dispatch/
  // self_validation.hpp), ".tile" (the tile a shrunk build settled on, backends/dispatch/
  // select.cpp).
  std::optional<std::string> note(const std::string& file, const std::string& options, const std::string& suffix,
                                  bool* from_disk = nullptr, bool use_disk = true);
  // Records a note in the map and, when the disk cache is on, beside the binary.
  void set_note(const std::string& file, const std::string& options, const std::string& suffix,
                const std::string& text);

  struct Stats {
    int compiled = 0;      // built from source
    int disk_hits = 0;     // loaded from the binary cache
    int memory_hits = 0;   // served from this context's map
  };
  Stats stats() const;
  const DiskCache& disk() const { return disk_; }
  void clear();

 private:
  // The options a program is built with: the op's, then the device's (device_build_options).
  std::string full_options(const std::string& op_options) const;
  std::shared_ptr<Program> build(const std::string& file, const std::string& source, const std::string& options,
                                 const std::string& key);
  cl_program rebuild_sm90a(cl_program p, const std::string& file, const std::string& options);
  cl_context ctx_;
  cl_device_id dev_;
  std::string identity_;  // platform + device + driver, folded into keys
  DeviceProfile profile_;  // for device_build_options
  DiskCache disk_;
  mutable std::mutex mu_;
  std::map<std::string, std::shared_future<std::shared_ptr<Program>>> programs_;  // by cache key
  std::map<std::string, std::shared_future<std::shared_ptr<Program>>> by_name_;   // by file + options
  std::map<std::string, std::string> notes_;  // by file + options + suffix
  std::atomic<int> compiled_{0}, disk_hits_{0}, memory_hits_{0};
};

}  // namespace clattn::rt
