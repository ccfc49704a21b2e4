// Kernel parameter database: per op and key (dtype class / head-dim bucket), looked up
// tuned JSON -> device name -> architecture -> vendor -> generic, each more specific
// level overriding the values of the one before (CLBlast's Database::GetDefines order).
#pragma once
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "clattn/context.hpp"

namespace clattn::params {

using Values = std::map<std::string, int>;

enum class Level { Generic = 0, Vendor = 1, Arch = 2, Device = 3, Tuned = 4 };
const char* level_name(Level l);

// One row of a built-in table. `match` is the vendor, architecture or device name the row
// applies to ("" for generic); `key` is "*" or an exact key such as "bf16.d128".
struct Row {
  std::string op;
  Level level;
  std::string match;
  std::string key;
  Values values;
  std::string origin;  // where the numbers come from (vendor doc, tuner run, ...)
};

struct Entry {
  Values values;
  Level level = Level::Generic;  // most specific level that contributed
  std::string source;            // "generic", "vendor:nvidia", "arch:sm_90", "device:<name>", "tuned:<file>"
  std::vector<std::string> origins;

  int get(const std::string& name) const;            // throws Internal if absent
  int get_or(const std::string& name, int fallback) const;
  std::map<std::string, std::string> defines() const;  // NAME -> value for -D options
};

// The entry for `op` with `key` on this device (CLATTN_FORCE_VENDOR respected: a forced
// vendor skips the real device's device/arch/tuned rows).
Entry lookup(const DeviceProfile& profile, const std::string& op, const std::string& key = "*");

// The architecture family whose Level::Arch rows apply before the exact architecture's:
// "rdna" (AMD gfx10xx and later, wave32) or "gcn" (AMD gfx9xx and earlier, GCN and CDNA,
// wave64); "" for other vendors.
std::string arch_family(const std::string& vendor, const std::string& architecture);

// Every op the database has rows for (for the probe).
std::vector<std::string> known_ops();

// Built-in tables, one file per op (rows_<op>.cpp, like CLBlast's database/kernels/<kernel>),
// each holding that op's generic, vendor, architecture and device rows.
const std::vector<Row>& rows_stream_read();
const std::vector<Row>& rows_metadata();
const std::vector<Row>& rows_decode();
const std::vector<Row>& rows_merge();
const std::vector<Row>& rows_hsa();
const std::vector<Row>& rows_append_kv();
const std::vector<Row>& rows_linear();
const std::vector<Row>& rows_extend();
const std::vector<Row>& rows_mla();
const std::vector<Row>& rows_dsa_index();
const std::vector<Row>& rows_rope();
// Every built-in row (the tables above, concatenated once).
const std::vector<Row>& builtin_rows();

// Where this device's tuned file is: $CLATTN_TUNED_FILE (`named`: a file the user chose),
// else `name` (<device name, non-alphanumerics as _>.json) in the subdirectory tuned/ of the
// cache directory `cache_dir`. `path` is empty when there is none (cache off).
struct TunedLocation {
  std::string path;
  bool named = false;
  std::string cache_dir, name;
};
constexpr const char* kTunedSubdir = "tuned";
TunedLocation tuned_location(const DeviceProfile& profile);
std::string tuned_file_for(const DeviceProfile& profile);  // tuned_location().path

// The tuned file's text under the trust rules of docs/runtime.md: in the cache, those of
// the program cache (no symlinks, ours, not writable by group or others; rt::DiskCache::
// read_file); a named file must be ours or root's and not writable by group or others
// (rt::read_trusted_file). nullopt when absent or refused (logged, never fatal).
std::optional<std::string> read_tuned_text(const TunedLocation& at);

// Tuned parameter values are integers in [0, kMaxParamValue]; names are C identifiers.
constexpr int kMaxParamValue = 65536;

// Tuned rows for this device (written by clattn-tune; format in docs/tuning.md), read
// through read_tuned_text. Empty when absent or refused; a malformed file, one with a value
// outside [0, kMaxParamValue] or one written for another device is ignored with a warning
// naming the file (and the op, key and parameter), never fatal. lookup() reads each file
// once per process (per device name and path).
std::vector<Row> tuned_rows(const DeviceProfile& profile, std::string* file = nullptr);

// Process-wide overrides applied on top of every level, forced vendor or not (source
// "override"). For tools and tests that must steer ops without a public per-call override
// (clattn-tune: merge, metadata); empty `values` removes the op's override. Thread-safe,
// but it changes what every thread's next plan of `op` uses: not for serving processes.
void set_override(const std::string& op, const Values& values);
void clear_overrides();

}  // namespace clattn::params
