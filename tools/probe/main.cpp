// clattn-probe: every OpenCL device, its profile, what clattn would choose on it, and
// (with --bench) the bandwidth limits and program build times; with --self-check the
// runtime self-check and the self-validation verdict of every variant that needs one.
#include <algorithm>
#include <clattn/clattn.hpp>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>

#include "backends/dispatch/variant.hpp"
#include "backends/params/database.hpp"
#include "backends/params/variants.hpp"
#include "runtime/env.hpp"
#include "runtime/log.hpp"
#include "runtime/quirks.hpp"
#include "tools/cli.hpp"

using nlohmann::json;

namespace {

// Every key an op has rows for (built-in or in this device's tuned file), "*" first.
std::vector<std::string> keys_of(const clattn::DeviceProfile& p, const std::string& op) {
  std::set<std::string> k{"*"};
  for (auto& r : clattn::params::builtin_rows())
    if (r.op == op) k.insert(r.key);
  if (p.vendor_forced.empty())
    for (auto& r : clattn::params::tuned_rows(p))
      if (r.op == op) k.insert(r.key);
  std::vector<std::string> out{"*"};
  for (auto& x : k)
    if (x != "*") out.push_back(x);
  return out;
}

// The tuned-parameter file the runtime would read for this device, and what it holds.
json tuned_file_json(const clattn::DeviceProfile& p) {
  std::string file = clattn::params::tuned_file_for(p);
  json t{{"path", file}, {"present", false}};
  if (file.empty()) return t;
  if (std::ifstream(file)) {
    t["present"] = true;
    t["rows"] = clattn::params::tuned_rows(p).size();  // 0 when malformed or for another device (logged)
  }
  if (!p.vendor_forced.empty()) t["ignored"] = "CLATTN_FORCE_VENDOR=" + p.vendor_forced + " skips tuned rows";
  return t;
}

// "portable" (CLATTN_VARIANTS=portable: no vendor-specific variant) or "all".
const char* variants_mode(const clattn::DeviceProfile& p) { return p.portable_only ? "portable" : "all"; }

json choices_json(const clattn::DeviceProfile& p) {
  json ops = json::object();
  for (auto& op : clattn::parameter_ops()) {
    for (auto& key : keys_of(p, op)) {
      auto e = clattn::parameters(p, op, key);
      json j{{"level", e.level}, {"source", e.source}, {"params", e.values}, {"origins", e.origins}};
      if (key == "*") ops[op] = j;  // the op's default entry (backward compatible)
      else ops[op]["keys"][key] = j;
    }
  }
  json vars = json::array();
  for (auto& v : clattn::variants(p)) vars.push_back({{"name", v.name}, {"available", v.available}, {"reason", v.reason}});
  json chosen = json::object();
  for (auto& c : clattn::params::op_choices(p)) chosen[c.op] = c.variant;
  return json{{"ops", ops},
              {"variants_mode", variants_mode(p)},
              {"variants", vars},
              {"op_variants", chosen},
              {"tuned_file", tuned_file_json(p)}};
}

void print_text(const clattn::DeviceEntry& d, const json& bench) {
  const auto& p = d.profile;
  std::printf("[%d] %s\n", d.index, p.device_name.c_str());
  std::printf("    platform   %s (%s)\n", p.platform_name.c_str(), p.platform_version.c_str());
  std::printf("    vendor     %s%s%s  arch %s  type %s\n", p.vendor.c_str(),
              p.vendor_forced.empty() ? "" : "  (forced: ", p.vendor_forced.empty() ? "" : (p.vendor_forced + ")").c_str(),
              p.architecture.empty() ? "-" : p.architecture.c_str(), p.is_gpu ? "GPU" : p.is_cpu ? "CPU" : "other");
  std::printf("    driver     %s  device %s  OpenCL C %s\n", p.driver_version.c_str(), p.device_version.c_str(),
              p.opencl_c_version.c_str());
  std::printf("    CUs %u  max WG %zu  local %llu KiB  global %llu MiB  fp16 %d  fp64 %d  subgroups %d\n",
              p.compute_units, p.max_work_group_size, p.local_mem_bytes >> 10, p.global_mem_bytes >> 20, p.fp16,
              p.fp64, p.subgroups);
  if (p.nv_compute_capability)
    std::printf("    NVIDIA compute capability %d.%d, warp %u, inline PTX %s\n", p.nv_compute_capability / 10,
                p.nv_compute_capability % 10, p.warp_size, p.nv_inline_ptx ? "yes" : "no");
  if (p.amd_wavefront) std::printf("    AMD wavefront %u\n", p.amd_wavefront);
  if (p.command_buffer.empty())
    std::printf("    replay     launch by launch (no cl_khr_command_buffer)\n");
  else
    std::printf("    replay     one command buffer per step (cl_khr_command_buffer %s)\n", p.command_buffer.c_str());
  // Constrained-device limits and driver quirks in effect (docs/portability.md).
  std::string limits = p.device_limits.empty() ? "none" : "CLATTN_DEVICE_LIMITS " + p.device_limits;
  if (p.loop_trip_limit) limits += ", a work-item's loops bounded at " + std::to_string(p.loop_trip_limit) + " iterations";
  std::printf("    limits     %s\n", limits.c_str());
  std::string quirks;
  for (const auto& q : clattn::rt::known_quirks())
    if (std::find(p.quirks.begin(), p.quirks.end(), q.name) != p.quirks.end())
      quirks += std::string("\n      ") + q.name + ": " + q.what + " (" + q.repro + ")";
  std::printf("    quirks     %s\n", quirks.empty() ? "none" : quirks.c_str() + 1);
  std::printf("    variants mode %s\n", p.portable_only ? "portable (CLATTN_VARIANTS=portable: no vendor-specific variant)"
                                                         : "all (every variant the device can run)");
  std::printf("    variants:\n");
  for (auto& v : clattn::variants(p))
    std::printf("      %-16s %-3s %s\n", v.name.c_str(), v.available ? "yes" : "no", v.reason.c_str());
  std::printf("    chosen variant per op (usual call; dtypes or shapes may still fall back to generic):\n");
  for (auto& c : clattn::params::op_choices(p)) std::printf("      %-16s %s\n", c.op.c_str(), c.variant.c_str());
  json tf = tuned_file_json(p);
  std::printf("    tuned file %s (%s)\n", tf["path"].get<std::string>().c_str(),
              tf.contains("ignored")   ? tf["ignored"].get<std::string>().c_str()
              : !tf["present"].get<bool>() ? "absent: run clattn-tune to write it"
                                         : (std::to_string(tf["rows"].get<size_t>()) + " rows").c_str());
  std::printf("    parameters (op [key]: source -> values; 'from' = where the most specific row's numbers come from):\n");
  for (auto& op : clattn::parameter_ops()) {
    for (auto& key : keys_of(p, op)) {
      auto e = clattn::parameters(p, op, key);
      std::string vals;
      for (auto& [k, v] : e.values) vals += " " + k + "=" + std::to_string(v);
      std::string name = key == "*" ? op : op + " [" + key + "]";
      std::printf("      %-22s %-22s%s\n", name.c_str(), e.source.c_str(), vals.c_str());
      if (!e.origins.empty()) std::printf("        from %s\n", e.origins.back().c_str());
    }
  }
  if (!bench.is_null()) {
    if (bench.contains("error")) {
      std::printf("    bench: %s\n", bench["error"].get<std::string>().c_str());
    } else if (bench.contains("copy_gbps")) {
      std::printf("    copy bandwidth        %8.1f GB/s (read + write)\n", bench["copy_gbps"].get<double>());
      std::printf("    streaming read        %8.1f GB/s  <- decode limit used by benchmarks\n",
                  bench["stream_read_gbps"].get<double>());
      std::printf("    program build         cold %.1f ms, warm %.1f ms (disk cache hit: %s)\n",
                  bench["build_cold_ms"].get<double>(), bench["build_warm_ms"].get<double>(),
                  bench["build_warm_disk_hit"].get<bool>() ? "yes" : "no");
    }
    if (bench.contains("self_check")) std::printf("    %s\n", bench["self_check"].get<std::string>().c_str());
    if (bench.contains("tiles")) {
      std::printf("    tiles built by the self-check (op variant tile; local bytes estimated / reported; shrinks):\n");
      for (auto& t : bench["tiles"])
        std::printf("      %-12s %-16s %s; %llu / %llu; %d\n", t["op"].get<std::string>().c_str(),
                    t["variant"].get<std::string>().c_str(), t["tile"].get<std::string>().c_str(),
                    t["estimate"].get<unsigned long long>(), t["driver"].get<unsigned long long>(), t["shrinks"].get<int>());
    }
    if (bench.contains("variant_checks")) {
      std::printf("    self-validation of variants never run on hardware of their kind:\n");
      for (auto& v : bench["variant_checks"]) {
        const std::string status = v["status"], detail = v["detail"];
        const std::string line = status == "not applicable" ? "not applicable: " + detail : detail;
        std::printf("      %s %s: %s\n", v["op"].get<std::string>().c_str(), v["variant"].get<std::string>().c_str(),
                    line.c_str());
      }
    }
  }
}

json run_bench(const clattn::DeviceEntry& d, bool check_only) {
  try {
    auto ctx = clattn::Context::create(std::to_string(d.index));
    json b;
    b["self_check"] = clattn::self_check(ctx);
    json checks = json::array();
    for (auto& v : clattn::check_variants(ctx))
      checks.push_back({{"op", v.op},
                        {"variant", v.variant},
                        {"status", v.status},
                        {"cached", v.cached},
                        {"max_error", v.max_error},
                        {"tolerance", v.tolerance},
                        {"detail", v.detail}});
    b["variant_checks"] = checks;
    json tiles = json::array();
    std::set<std::string> seen;
    for (const auto& r : clattn::ops::recent_builds())
      if (seen.insert(r.op + " " + r.variant + " " + r.tile).second)
        tiles.push_back({{"op", r.op}, {"variant", r.variant}, {"tile", r.tile.empty() ? "-" : r.tile},
                         {"estimate", r.estimate}, {"driver", r.driver}, {"shrinks", r.shrinks}});
    b["tiles"] = tiles;
    if (check_only) return b;
    auto L = clattn::measure_limits(ctx);
    b["copy_gbps"] = L.copy_gbps;
    b["stream_read_gbps"] = L.stream_read_gbps;
    b["bytes"] = L.bytes;
    b["method"] = L.method;
    auto t = clattn::measure_build_times(ctx);
    b["build_cold_ms"] = t.cold_ms;
    b["build_warm_ms"] = t.warm_ms;
    b["build_warm_disk_hit"] = t.warm_was_disk_hit;
    return b;
  } catch (const clattn::Error& e) {
    return json{{"error", std::string(clattn::status_name(e.status())) + ": " + e.what()}};
  }
}

// Why list_devices() found nothing, and what to install.
std::string no_device_hint() {
  cl_uint np = 0;
  if (clGetPlatformIDs(0, nullptr, &np) != CL_SUCCESS || np == 0)
    return "no OpenCL platform found: the OpenCL ICD loader found no driver (see /etc/OpenCL/vendors/*.icd, "
           "OCL_ICD_VENDORS). Install one, e.g. PoCL for this CPU: sudo apt-get install pocl-opencl-icd";
  return std::to_string(np) + " OpenCL platform(s) but no device on any of them (is the driver for the device "
         "installed and the device visible here?)";
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"clattn-probe: OpenCL devices and what clattn chooses on each"};
  bool as_json = false, bench = false, check = false, check_args = false;
  std::string device;
  app.add_flag("--json", as_json, "print one JSON document");
  app.add_flag("--bench", bench, "measure copy/streaming-read bandwidth and cold/warm build time per device");
  app.add_flag("--self-check", check, "run the runtime self-check on the selected device and show the self-validation "
               "verdict of each variant that needs one (running its check where none is cached)");
  app.add_option("--device", device, "only this device (index, vendor or name substring; default: all)");
  clattn::cli::add_check_args(app, &check_args);
  return clattn::cli::run("clattn-probe", app, argc, argv, [&]() -> int {
    if (check_args) return 0;
    clattn::rt::log();  // built now: a CLATTN_LOG_LEVEL that is not a level is reported first
    auto devs = clattn::list_devices();
    json doc{{"clattn_version", clattn::version()}, {"devices", json::array()}};
    if (devs.empty()) {
      if (as_json) std::cout << doc.dump(2) << "\n";
      std::fprintf(stderr, "clattn-probe: %s\n", no_device_hint().c_str());
      return clattn::cli::kFailed;
    }
    // The selector (--device, else CLATTN_DEVICE when set) must name a device: one that
    // matches nothing is a bad argument, listed with the devices there are.
    const std::string env_device = clattn::rt::env("CLATTN_DEVICE");
    std::vector<clattn::DeviceEntry> chosen = devs;
    if (!device.empty() || check || !env_device.empty()) {
      std::unique_ptr<clattn::Context> ctx;
      try {
        ctx = std::make_unique<clattn::Context>(clattn::Context::create(device));
      } catch (const clattn::Error& e) {
        if (e.status() != clattn::Status::DeviceNotFound) throw;
        std::fprintf(stderr, "clattn-probe: %s\n", e.what());
        return clattn::cli::kBadArgument;
      }
      if (!device.empty() || check) {
        chosen.clear();
        for (auto& d : devs)
          if (d.device == ctx->cl_device()) chosen.push_back(d);
      } else if (!as_json) {
        std::printf("default device (CLATTN_DEVICE=%s): %s\n", env_device.c_str(), ctx->profile().device_name.c_str());
      }
    }
    for (auto& d : chosen) {
      json b = (bench || check) ? run_bench(d, check && !bench) : json();
      if (as_json) {
        json dj{{"index", d.index}, {"profile", json::parse(clattn::profile_json(d.profile))}, {"choices", choices_json(d.profile)}};
        if (!b.is_null()) dj["bench"] = b;
        doc["devices"].push_back(dj);
      } else {
        print_text(d, b);
      }
      if (b.contains("error")) {
        if (!as_json) std::fprintf(stderr, "clattn-probe: %s\n", b["error"].get<std::string>().c_str());
        if (as_json) std::cout << doc.dump(2) << "\n";
        return clattn::cli::kFailed;
      }
    }
    if (as_json) std::cout << doc.dump(2) << "\n";
    return 0;
  });
}
