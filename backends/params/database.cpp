#include "backends/params/database.hpp"

#include <cstdio>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>

#include "runtime/disk_cache.hpp"
#include "runtime/env.hpp"
#include "runtime/error.hpp"
#include "runtime/log.hpp"

namespace clattn::params {

namespace {
constexpr size_t kMaxTunedBytes = size_t(4) << 20;
}  // namespace

const char* level_name(Level l) {
  switch (l) {
    case Level::Generic: return "generic";
    case Level::Vendor: return "vendor";
    case Level::Arch: return "arch";
    case Level::Device: return "device";
    case Level::Tuned: return "tuned";
  }
  return "?";
}

int Entry::get(const std::string& name) const {
  auto it = values.find(name);
  if (it == values.end()) throw Error(Status::Internal, "parameter " + name + " missing from " + source);
  return it->second;
}

int Entry::get_or(const std::string& name, int fallback) const {
  auto it = values.find(name);
  return it == values.end() ? fallback : it->second;
}

std::map<std::string, std::string> Entry::defines() const {
  std::map<std::string, std::string> d;
  for (auto& [k, v] : values) d[k] = std::to_string(v);
  return d;
}

namespace {

std::string safe_name(std::string s) {
  for (char& c : s)
    if (!std::isalnum((unsigned char)c) && c != '-' && c != '_' && c != '.') c = '_';
  return s;
}

// Applies the best row of `rows` at `level` (exact key beats "*").
bool apply(const std::vector<Row>& rows, Level level, const std::string& match, const std::string& op,
           const std::string& key, Entry& e, const std::string& source) {
  const Row* star = nullptr;
  const Row* exact = nullptr;
  for (auto& r : rows) {
    if (r.level != level || r.op != op || r.match != match) continue;
    if (r.key == key) exact = &r;
    else if (r.key == "*") star = &r;
  }
  bool any = false;
  for (const Row* r : {star, exact}) {
    if (!r) continue;
    for (auto& [k, v] : r->values) e.values[k] = v;
    e.origins.push_back(source + " [" + r->key + "]: " + r->origin);
    any = true;
  }
  if (any) {
    e.level = level;
    e.source = source;
  }
  return any;
}

}  // namespace

// AMD: gfx10xx and later are RDNA (wave32 native), gfx9xx and earlier GCN / CDNA (wave64)
// (AMD RDNA and CDNA ISA reference guides). Other vendors: no family ("").
std::string arch_family(const std::string& vendor, const std::string& arch) {
  if (vendor != "amd" || arch.rfind("gfx", 0) != 0) return {};
  size_t i = 3, n = 0;
  while (i < arch.size() && std::isdigit((unsigned char)arch[i])) ++i, ++n;
  // "gfx1030" / "gfx1100" / "gfx10" -> RDNA; "gfx90a" / "gfx942" / "gfx803" / "gfx9" -> GCN.
  if (n >= 4 || (n == 2 && arch[3] == '1')) return "rdna";
  if (n >= 1) return "gcn";
  return {};
}

namespace {

std::mutex& override_mutex() {
  static std::mutex m;
  return m;
}
std::map<std::string, Values>& overrides() {
  static std::map<std::string, Values> o;
  return o;
}

}  // namespace

void set_override(const std::string& op, const Values& values) {
  std::lock_guard<std::mutex> lock(override_mutex());
  if (values.empty()) overrides().erase(op);
  else overrides()[op] = values;
}

void clear_overrides() {
  std::lock_guard<std::mutex> lock(override_mutex());
  overrides().clear();
}

TunedLocation tuned_location(const DeviceProfile& p) {
  TunedLocation at;
  at.path = rt::env("CLATTN_TUNED_FILE");
  if (!at.path.empty()) {
    at.named = true;
    return at;
  }
  at.cache_dir = rt::DiskCache::default_dir();
  if (at.cache_dir.empty()) return at;
  at.name = safe_name(p.device_name) + ".json";
  at.path = at.cache_dir + "/" + kTunedSubdir + "/" + at.name;
  return at;
}

std::string tuned_file_for(const DeviceProfile& p) { return tuned_location(p).path; }

std::optional<std::string> read_tuned_text(const TunedLocation& at) {
  if (at.path.empty()) return std::nullopt;
  if (at.named) return rt::read_trusted_file(at.path, kMaxTunedBytes, "tuned parameters");
  rt::DiskCache cache(at.cache_dir);  // logs why, when the directory is not trusted
  return cache.read_file(kTunedSubdir, at.name, kMaxTunedBytes, "tuned parameters");
}

namespace {

// Parameter names are C identifiers: they name -D options and kernel macros.
bool param_name(const std::string& s) {
  if (s.empty() || s.size() > 64 || std::isdigit((unsigned char)s[0])) return false;
  for (char c : s)
    if (!std::isalnum((unsigned char)c) && c != '_') return false;
  return true;
}

// A tuned value must be an integer in [0, kMaxParamValue]: values become build options,
// work-group and tile sizes and loop counts, and a negative or huge one would reach size
// arithmetic and local-memory sizing unchecked.
int param_value(const std::string& op, const std::string& key, const std::string& name,
                const nlohmann::json& v) {
  const bool ok = v.is_number_unsigned()  ? v.get<uint64_t>() <= uint64_t(kMaxParamValue)
                  : v.is_number_integer() ? v.get<int64_t>() >= 0 && v.get<int64_t>() <= kMaxParamValue
                                          : false;
  if (!ok)
    throw std::invalid_argument(op + " [" + key + "] " + name + " = " + v.dump() + " is not an integer in [0, " +
                                std::to_string(kMaxParamValue) + "]");
  return v.get<int>();
}

// Rows of a tuned file's text; throws (nlohmann or std::invalid_argument) when malformed.
std::vector<Row> parse_tuned(const std::string& text, const DeviceProfile& p, const std::string& file) {
  std::vector<Row> rows;
  nlohmann::json j = nlohmann::json::parse(text);
  if (j.value("device", std::string()) != p.device_name) {
    rt::log().warn("tuned parameters {} are for '{}', not '{}': ignored", file, j.value("device", std::string()),
                   p.device_name);
    return rows;
  }
  for (auto& [op, keys] : j.at("ops").items())
    for (auto& [key, body] : keys.items()) {
      if (!key.empty() && key[0] == '_') continue;  // {"_error": ...}: an op the tuner could not tune
      std::string origin = "clattn-tune " + j.value("date", std::string("?"));
      // Optional fields of the tuner's output (docs/tuning.md): the measured figure.
      if (body.contains("value") && body["value"].is_number() && body.contains("metric")) {
        char fig[64];
        std::snprintf(fig, sizeof fig, " (%.4g %s)", body["value"].get<double>(),
                      body["metric"].get<std::string>().c_str());
        origin += fig;
      }
      Row r{op, Level::Tuned, p.device_name, key, {}, origin};
      for (auto& [name, v] : body.at("params").items()) {
        if (!param_name(name)) throw std::invalid_argument(op + " [" + key + "]: '" + name + "' is not a parameter name");
        r.values[name] = param_value(op, key, name, v);
      }
      rows.push_back(std::move(r));
    }
  return rows;
}

}  // namespace

std::vector<Row> tuned_rows(const DeviceProfile& p, std::string* file_out) {
  const TunedLocation at = tuned_location(p);
  if (file_out) *file_out = at.path;
  auto text = read_tuned_text(at);
  if (!text) return {};
  try {
    return parse_tuned(*text, p, at.path);
  } catch (const std::exception& ex) {
    rt::log().warn("tuned parameters {} ignored: {}", at.path, ex.what());
    return {};
  }
}

Entry lookup(const DeviceProfile& p, const std::string& op, const std::string& key) {
  Entry e;
  e.source = "generic";
  const auto& rows = builtin_rows();
  apply(rows, Level::Generic, "", op, key, e, "generic");
  const std::string& vendor = p.param_vendor();
  apply(rows, Level::Vendor, vendor, op, key, e, "vendor:" + vendor);
  if (p.vendor_forced.empty()) {
    const auto& vr = rows;
    if (!p.architecture.empty()) {
      // Family rows first ("rdna", "gcn"), then rows for the exact architecture.
      std::string fam = arch_family(p.vendor, p.architecture);
      if (!fam.empty() && fam != p.architecture) apply(vr, Level::Arch, fam, op, key, e, "arch:" + fam);
      apply(vr, Level::Arch, p.architecture, op, key, e, "arch:" + p.architecture);
    }
    apply(vr, Level::Device, p.device_name, op, key, e, "device:" + p.device_name);
    // Tuned files are read once per (device name, file path) per process.
    static std::mutex mu;
    static std::map<std::string, std::pair<std::string, std::vector<Row>>> tuned;
    std::pair<std::string, std::vector<Row>>* t;
    {
      std::lock_guard<std::mutex> lock(mu);
      const std::string id = p.device_name + "\n" + tuned_file_for(p);
      auto it = tuned.find(id);
      if (it == tuned.end()) {
        std::string file;
        auto rows = tuned_rows(p, &file);
        it = tuned.emplace(id, std::make_pair(file, std::move(rows))).first;
      }
      t = &it->second;
    }
    apply(t->second, Level::Tuned, p.device_name, op, key, e, "tuned:" + t->first);
  }
  {
    std::lock_guard<std::mutex> lock(override_mutex());
    auto it = overrides().find(op);
    if (it != overrides().end()) {
      for (auto& [k, v] : it->second) e.values[k] = v;
      e.source = "override";
      e.origins.push_back("override: set_override() (clattn-tune candidate)");
    }
  }
  if (e.values.empty()) throw Error(Status::Internal, "no parameter entry for op '" + op + "'");
  return e;
}

const std::vector<Row>& builtin_rows() {
  static const std::vector<Row> all = [] {
    std::vector<Row> v;
    for (auto* table : {&rows_stream_read, &rows_metadata, &rows_decode, &rows_merge, &rows_append_kv, &rows_linear,
                          &rows_extend, &rows_mla, &rows_hsa, &rows_dsa_index, &rows_rope})
      for (auto& r : table()) v.push_back(r);
    return v;
  }();
  return all;
}

std::vector<std::string> known_ops() {
  std::set<std::string> s;
  for (auto& r : builtin_rows()) s.insert(r.op);
  return {s.begin(), s.end()};
}

}  // namespace clattn::params
