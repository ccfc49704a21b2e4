// What clattn would choose on a device, the self-check, and the measured limits that
// benchmarks divide by.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "clattn/context.hpp"

namespace clattn {

// One parameter-database entry as applied on a device.
struct ParamEntry {
  std::map<std::string, int> values;
  std::string level;                 // tuned | device | arch | vendor | generic
  std::string source;                // e.g. "vendor:nvidia"
  std::vector<std::string> origins;  // where each contributing row's numbers come from
};
CLATTN_API ParamEntry parameters(const DeviceProfile& profile, const std::string& op, const std::string& key = "*");
CLATTN_API std::vector<std::string> parameter_ops();

// A capability-gated kernel variant and whether this device can run it.
struct VariantInfo {
  std::string name;
  bool available = false;
  std::string reason;
};
CLATTN_API std::vector<VariantInfo> variants(const DeviceProfile& profile);

// Builds the self-check program and round-trips values through every dtype's
// load/store path; throws clattn::Error on any mismatch. Returns a one-line summary.
CLATTN_API std::string self_check(const Context& ctx);

// Kernel variants that have never run on hardware of their kind are used on a device only
// after they matched the portable kernel there on a small case; the verdict is cached beside
// the program binary (docs/runtime.md, "Self-validation of variants"). For each op and each
// such variant: the op's usual call planned with the variant forced, which runs its check or
// finds the verdict.
struct VariantCheck {
  std::string op, variant;
  std::string status;   // "pass", "fail" or "not applicable"
  bool cached = false;  // the verdict was known (this context or the disk cache), not checked now
  double max_error = 0, tolerance = 0;
  std::string detail;   // the verdict in words, or why the variant does not apply
};
CLATTN_API std::vector<VariantCheck> check_variants(const Context& ctx);

struct Limits {
  double copy_gbps = 0;         // clEnqueueCopyBuffer, read + write bytes per second
  double stream_read_gbps = 0;  // streaming-read kernel: the limit of memory-bound ops
  std::size_t bytes = 0;        // buffer size used
  std::string method;           // how it was measured
};
// Measures on the context's queue (blocking). bytes = 0 picks a size from the device.
CLATTN_API Limits measure_limits(const Context& ctx, std::size_t bytes = 0);

// Compute ceilings: what portable OpenCL FP32 reaches on the device, for compute-bound ops.
struct ComputeCeiling {
  bool available = false;  // false: not measured here (`method` says why)
  double tflops = 0;
  std::string method;      // how it was measured
};

// FP32 FMA-loop peak (cl_kernels/fma_peak.cl): independent fma() chains in every work-item,
// enough work-groups to fill every compute unit; the best of `samples` timed launches of
// about `target_ms` each. 0 in a field = the device's default (see backends/diagnostics/
// fma_peak.cpp); the kernel tunables VEC, CHAINS and UNROLL are its -D options.
struct FmaPeakOptions {
  int vec = 0, chains = 0, unroll = 0;  // lanes per chain (1, 2, 4, 8, 16), chains, steps per loop
  int wg = 0, groups_per_cu = 0;        // work-group size, work-groups per compute unit
  double target_ms = 20;
  int samples = 5;
};
// Blocking; needs a queue with profiling (Context::create's).
CLATTN_API ComputeCeiling measure_fma_peak(const Context& ctx, const FmaPeakOptions& options = {});

// CLBlast SGEMM C = A x B, n x n x n, f32, row-major: what a tuned portable OpenCL FP32 GEMM
// reaches on the device (2 n^3 FLOPs per call; the best of `samples` calls, timed between
// markers on the context's queue, after one untimed call that builds CLBlast's kernels).
// Not available when clattn was built without CLBlast or CLBlast fails on the device.
CLATTN_API ComputeCeiling measure_sgemm(const Context& ctx, int n = 4096, int samples = 5);

}  // namespace clattn

namespace clattn {
// Cold build (source -> binary, nothing cached) vs warm build (binary from the on-disk
// cache into a fresh in-memory cache) of one of the library's kernel files.
struct BuildTimes {
  double cold_ms = 0, warm_ms = 0;
  bool warm_was_disk_hit = false;
  std::string file;
};
CLATTN_API BuildTimes measure_build_times(const Context& ctx, const std::string& file = "selfcheck.cl");
}  // namespace clattn

namespace clattn {
// The profile as one JSON object (clinfo-style CL_* keys plus clattn_* derived keys).
CLATTN_API std::string profile_json(const DeviceProfile& profile);
}  // namespace clattn
