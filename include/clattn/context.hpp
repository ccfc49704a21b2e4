// Devices, contexts and device buffers: the runtime as engines see it. Also what every op
// takes from the caller besides its buffers: where its work goes (Enqueue) and the memory
// a plan may upload its table into (PlanBuffer).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 300
#endif
#include <CL/cl.h>

#include "clattn/types.hpp"

namespace clattn {

namespace detail { class ContextImpl; }

// Bits of Context::device_faults (match CLATTN_FAULT_* in cl_kernels/common.clh and the C ABI).
enum DeviceFault : std::uint32_t {
  FaultPageId = 1,      // a KV page id outside [0, num_pages): that key was masked
  FaultSlot = 2,        // an append slot outside the cache: that token was not written
  FaultStateIndex = 4,  // a linear-attention state index outside the pool: zero state, not written back
  FaultTokenRange = 8,  // a token range outside its tensors (device-side lengths): clamped
  FaultPosition = 16,   // a RoPE position < 0 or past the cos/sin cache: that token was not written
};

// What clattn knows about one OpenCL device (the device profile, minus tuned parameters).
struct DeviceProfile {
  std::string vendor;            // normalised: nvidia amd intel apple arm qualcomm cpu generic
  std::string vendor_forced;     // CLATTN_FORCE_VENDOR value in effect ("" when none)
  // Portable-only mode (CLATTN_VARIANTS=portable or ContextOptions::variants = "portable"):
  // no vendor-specific kernel variant (inline PTX, vendor extensions or builtins) is chosen;
  // standard cl_khr_* paths and the vendor's parameter rows still apply.
  bool portable_only = false;
  std::string device_name, device_vendor, driver_version, device_version;
  std::string platform_name, platform_vendor, platform_version, opencl_c_version;
  std::string architecture;      // "sm_90", "gfx90a", "xe-hpg", "" when unknown
  bool is_gpu = false, is_cpu = false;
  unsigned compute_units = 0;
  std::size_t max_work_group_size = 0;
  unsigned long long local_mem_bytes = 0, global_mem_bytes = 0, max_alloc_bytes = 0;
  bool fp16 = false, fp64 = false;
  bool subgroups = false;        // cl_khr_subgroups / OpenCL 3.0 sub-groups with max > 0
  std::vector<unsigned> subgroup_sizes;   // from cl_intel_required_subgroup_size, wavefront, warp
  bool intel_subgroups = false, intel_required_subgroup_size = false, integer_dot_product = false;
  bool nv_inline_ptx = false;    // NVIDIA platform: inline PTX asm() accepted by the compiler
  int nv_compute_capability = 0; // major*10+minor from cl_nv_device_attribute_query, 0 if none
  unsigned amd_wavefront = 0;    // cl_amd_device_attribute_query, 0 if none
  unsigned warp_size = 0;        // hardware SIMD width where known (nvidia 32, amd wavefront)
  std::vector<std::string> extensions;
  // cl_khr_command_buffer's version ("0.9.4"; "?" when the driver does not report it), empty
  // without it: captured steps then replay launch by launch (docs/replay.md).
  std::string command_buffer;
  // Features emulated for tests (CLATTN_EMULATE, comma-separated; docs/runtime.md): a variant
  // that needs one is available here and built with an emulation header (local memory,
  // barriers) implementing the builtins' documented semantics. Never for serving.
  std::vector<std::string> emulated;
  // Limits that hold beyond the device's own figures (docs/portability.md): the compiled
  // kernel's work-group size (CL_KERNEL_WORK_GROUP_SIZE) and private memory
  // (CL_KERNEL_PRIVATE_MEM_SIZE) count as at most these (0: the driver's figure alone), and
  // one work-item runs at most loop_trip_limit loop iterations in all (0: unbounded; set by
  // a driver quirk). Constrained-device runs (CLATTN_DEVICE_LIMITS, ContextOptions::
  // device_limits) lower max_work_group_size, local_mem_bytes, fp16 and subgroups too.
  std::size_t kernel_work_group_cap = 0;
  unsigned long long private_mem_cap = 0;
  long long loop_trip_limit = 0;
  // A driver quirk: its CL_KERNEL_LOCAL_MEM_SIZE is this many times the kernel's __local bytes
  // (the post-build check divides by it; 1 elsewhere).
  unsigned kernel_local_mem_overcount = 1;
  std::string device_limits;          // the constrained-device spec in effect ("" none)
  std::vector<std::string> quirks;    // driver quirks in effect (runtime/quirks.cpp names)

  // The vendor whose parameter tables apply (forced one if set).
  const std::string& param_vendor() const { return vendor_forced.empty() ? vendor : vendor_forced; }
  CLATTN_API bool has_extension(const std::string& e) const;
  CLATTN_API bool emulates(const std::string& feature) const;
};

struct DeviceEntry {
  int index = 0;                 // global index across platforms, as CLATTN_DEVICE=<n> uses
  cl_platform_id platform = nullptr;
  cl_device_id device = nullptr;
  DeviceProfile profile;
};

// Every device on every platform, in platform order.
CLATTN_API std::vector<DeviceEntry> list_devices();

// How a context chooses kernels.
struct ContextOptions {
  // Kernel variants ops may choose: "" = $CLATTN_VARIANTS (unset: "all"); "all" = every
  // variant the device can run; "portable" = portable-only mode (DeviceProfile::portable_only).
  // Any other value is InvalidArgument. Set here, it wins over the environment.
  std::string variants;
  // Constrained-device limits, as CLATTN_DEVICE_LIMITS takes them ("local=16384,wg=64,
  // kernel_wg=32,private=2048,fp16=0,subgroups=0,loop_trips=65535"; docs/portability.md):
  // the context acts as a device with at most these. "" = $CLATTN_DEVICE_LIMITS. A bad spec
  // is InvalidArgument naming the key.
  std::string device_limits;
};

// A device + context + in-order queue. Either owns its OpenCL objects or adopts an
// engine's (adopted objects are retained and released once, never double-released).
class CLATTN_API Context {
 public:
  // selector: "" = $CLATTN_DEVICE, else first GPU, else first CPU. Otherwise an index
  // ("0"), a vendor ("nvidia", "cpu", ...), or a substring of the device name.
  static Context create(const std::string& selector = "");
  static Context create(const std::string& selector, const ContextOptions& options);
  static Context adopt(cl_context ctx, cl_device_id dev, cl_command_queue queue);
  static Context adopt(cl_context ctx, cl_device_id dev, cl_command_queue queue, const ContextOptions& options);

  cl_context cl_ctx() const;
  cl_device_id cl_device() const;
  cl_command_queue cl_queue() const;  // the default queue ops enqueue on
  const DeviceProfile& profile() const;
  bool profiling_enabled() const;

  void finish() const;               // blocking: waits for the default queue

  // Device fault bits (DeviceFault) that kernels recorded since the context was made or
  // last cleared: indices met on the device that lie outside their pool (page ids from
  // device-built or unvalidated metadata, append slots, state indices) were skipped, not
  // followed. Blocking read on the default queue; finish the queues you enqueued on first.
  // `clear` resets the word to 0 (bits set by kernels still running may be lost).
  std::uint32_t device_faults(bool clear = true) const;

  std::shared_ptr<detail::ContextImpl> impl() const { return impl_; }

 private:
  explicit Context(std::shared_ptr<detail::ContextImpl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<detail::ContextImpl> impl_;
};

// Device buffers clattn has created in this process (DeviceBuffer and plan tables): lets
// engines and tests check that steady-state steps allocate nothing.
CLATTN_API unsigned long long device_allocation_count() noexcept;

// Owning device buffer helper for tools, tests and engines that want one.
class CLATTN_API DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(const Context& ctx, std::size_t bytes, cl_mem_flags flags = CL_MEM_READ_WRITE);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  cl_mem get() const { return mem_; }
  std::size_t bytes() const { return bytes_; }
  // Blocking host<->device copies on the context's queue.
  void write(const Context& ctx, const void* src, std::size_t bytes, std::size_t offset = 0);
  void read(const Context& ctx, void* dst, std::size_t bytes, std::size_t offset = 0) const;
  void fill_bytes(const Context& ctx, unsigned char value);

 private:
  cl_mem mem_ = nullptr;
  std::size_t bytes_ = 0;
};

// ---- what an op takes from the caller besides its buffers: its queue and plan memory ----

// Where an op's work goes. queue nullptr = the context's queue. The op's first command
// waits for `wait`; `event`, when set, receives the op's last command (caller releases).
struct Enqueue {
  cl_command_queue queue = nullptr;
  cl_uint num_wait = 0;
  const cl_event* wait = nullptr;
  cl_event* event = nullptr;
};

// Caller-owned device memory a plan uploads its work table into (FlashInfer's
// int_workspace_buffer idea): with one per plan kind, reused step after step on one
// in-order queue, re-planning allocates nothing. Too small or null: the plan allocates its
// own table (see the plan's table_bytes for the size to provide next time). The caller
// must not reuse the buffer for another plan while this plan's runs are still queued
// on a different queue.
struct PlanBuffer {
  cl_mem mem = nullptr;
  std::size_t bytes = 0;
};

}  // namespace clattn
