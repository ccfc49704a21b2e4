#include "backends/ops/variant.hpp"

#include <mutex>

#include "backends/params/variants.hpp"
#include "runtime/error.hpp"
#include "runtime/log.hpp"

namespace clattn::ops {

namespace {

std::mutex g_records_mu;
std::vector<BuildRecord> g_records;

void record(const std::string& op, const BuiltVariant& b) {
  std::lock_guard<std::mutex> lock(g_records_mu);
  if (g_records.size() >= 64) g_records.erase(g_records.begin());
  g_records.push_back({op, b.variant.name, b.variant.local_bytes, b.driver_local_bytes});
}

// Why the compiled kernel cannot launch as `v` says ("" when it can).
std::string misfit(const detail::ContextImpl& c, const Variant& v, rt::Kernel& k, uint64_t local) {
  if (v.check_wg) {
    const size_t limit = k.max_work_group_size(c.device);
    if (limit < v.wg)
      return "the compiled kernel allows " + std::to_string(limit) + " work-items per group, the tile needs " +
             std::to_string(v.wg);
  }
  // Drivers count their own per-group reservation in the kernel's figure (NVIDIA: 4 to 16
  // bytes on the H100, whose kernels still launch with the 48 KiB it reports all in use), so
  // only a kernel past the device's figure by more than such a reservation is refused.
  constexpr uint64_t kReservation = 1024;
  if (c.profile.local_mem_bytes && local > c.profile.local_mem_bytes + kReservation)
    return "the compiled kernel uses " + std::to_string(local) + " bytes of local memory, the device has " +
           std::to_string(c.profile.local_mem_bytes);
  return "";
}

}  // namespace

BuiltVariant select_and_build(detail::ContextImpl& c, const std::string& op, const std::vector<Variant>& cands,
                              const SelfCheck& check) {
  Error last(Status::Unsupported, op + ": no kernel variant applies");
  for (size_t i = 0; i < cands.size(); ++i) {
    const Variant& v = cands[i];
    const char* next = i + 1 < cands.size() ? cands[i + 1].name.c_str() : "nothing";
    const std::string why_not = !v.why_not.empty() ? v.why_not : pinned_out(op, v);
    if (!why_not.empty()) {
      rt::log().debug("{}: {} not used ({}); trying {}", op, v.name, why_not, next);
      last = Error(Status::Unsupported, op + ": " + v.name + ": " + why_not);
      continue;
    }
    if (v.local_bytes && c.profile.local_mem_bytes && v.local_bytes > c.profile.local_mem_bytes) {
      last = Error(Status::Unsupported, op + ": " + v.name + " needs " + std::to_string(v.local_bytes) +
                                            " bytes of local memory, the device has " +
                                            std::to_string(c.profile.local_mem_bytes));
      rt::log().debug("{}; trying {}", last.what(), next);
      continue;
    }
    try {
      BuiltVariant b;
      b.variant = v;
      b.program = c.programs.get(v.file, v.options);
      b.kernel = &b.program->kernel(v.kernel);
      b.driver_local_bytes = b.kernel->local_mem_size(c.device);
      const std::string why = misfit(c, v, *b.kernel, b.driver_local_bytes);
      if (why.empty() && !in_self_check() && params::needs_self_validation(v.name) &&
          !validate(c, op, v, check).pass) {
        last = Error(Status::Unsupported, op + ": " + v.name + ": failed self-validation on this device");
        continue;  // (validate logged it)
      }
      if (why.empty()) {
        if (v.local_bytes && v.local_bytes != b.driver_local_bytes)
          rt::log().debug("{}: {} estimated {} bytes of local memory, the driver reports {}", op, v.name,
                          v.local_bytes, b.driver_local_bytes);
        record(op, b);
        return b;
      }
      last = Error(Status::Unsupported, op + ": " + v.name + ": " + why);
      rt::log().warn("{}: variant {} not used: {}; trying {}", op, v.name, why, next);
    } catch (const Error& e) {
      if (e.status() != Status::BuildFailed) throw;
      last = e;
      rt::log().warn("{}: variant {} failed to build, trying {}: {}", op, v.name, next, e.what());
    }
  }
  throw last;
}

std::vector<BuildRecord> recent_builds() {
  std::lock_guard<std::mutex> lock(g_records_mu);
  return g_records;
}

}  // namespace clattn::ops
