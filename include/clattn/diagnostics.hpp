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

struct Limits {
  double copy_gbps = 0;         // clEnqueueCopyBuffer, read + write bytes per second
  double stream_read_gbps = 0;  // streaming-read kernel: the limit of memory-bound ops
  std::size_t bytes = 0;        // buffer size used
  std::string method;           // how it was measured
};
// Measures on the context's queue (blocking). bytes = 0 picks a size from the device.
CLATTN_API Limits measure_limits(const Context& ctx, std::size_t bytes = 0);

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
