// Parameter names per op (param_names.hpp).
#include "backends/params/param_names.hpp"

#include <map>
#include <set>

#include "clattn/types.hpp"

namespace clattn::params {

namespace {

// Read by the op's code (backends/ops/<op>.cpp) with a default where no row sets them; a
// test (tests/tools/test_param_names.cpp) scans those files so that this list keeps up.
const std::map<std::string, std::vector<std::string>>& default_only() {
  static const std::map<std::string, std::vector<std::string>> m = {
      {"decode", {"FP8_FAST", "GMAX", "MERGE_BATCH", "SUBGROUP_SHUFFLE", "TPT", "UNROLL_HINTS"}},
      {"extend", {"MMA_TMA_PAGES", "PUNROLL", "QRES", "SUB_TX", "SUNROLL"}},
      {"mla_decode", {"FP8_FAST", "FUSE_MAX_PARTS", "FUSE_MERGE", "L2_AHEAD", "LOCAL_BUFS", "UNROLL_HINTS"}},
      // (the extend plan reads the split-K names too, through the tile both plans share)
      {"mla_extend", {"FP8_FAST", "FUSE_MAX_PARTS", "FUSE_MERGE", "L2_AHEAD", "LOCAL_BUFS", "MAX_SPLITS", "MIN_CHUNK",
                      "UNROLL_HINTS", "WGS_PER_CU"}},
      {"linear_prefill", {"PF_MMA_SPLIT"}},
  };
  return m;
}

}  // namespace

std::vector<std::string> param_names(const std::string& op) {
  std::set<std::string> names;
  for (const Row& r : builtin_rows())
    if (r.op == op)
      for (const auto& kv : r.values) names.insert(kv.first);
  auto it = default_only().find(op);
  if (it != default_only().end()) names.insert(it->second.begin(), it->second.end());
  return {names.begin(), names.end()};
}

void check_param_names(const std::vector<std::string>& ops, const Values& overrides, const std::string& what) {
  if (overrides.empty()) return;  // the usual plan: no name list built
  std::set<std::string> known;
  for (const auto& op : ops)
    for (auto& n : param_names(op)) known.insert(n);
  for (const auto& kv : overrides) {
    if (known.count(kv.first)) continue;
    std::string list, op_list;
    for (const auto& n : known) list += " " + n;
    for (const auto& op : ops) op_list += (op_list.empty() ? "" : "/") + op;
    throw Error(Status::InvalidArgument,
                what + ": " + op_list + " has no parameter '" + kv.first + "' (its parameters:" + list + ")");
  }
}

}  // namespace clattn::params
