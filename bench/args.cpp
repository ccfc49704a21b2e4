// Argument handling the ops share (bench.hpp): --check-args and the checked --param / --grid.
#include "backends/params/param_names.hpp"
#include "bench/bench.hpp"

namespace clattn::bench {

bool& check_args_only() {
  static bool on = false;
  return on;
}

std::map<std::string, int> op_params(const std::vector<std::string>& args, const std::vector<std::string>& ops) {
  std::map<std::string, int> out;
  for (const auto& a : args) out.insert(parse_param(a));
  params::check_param_names(ops, out, "--param");
  return out;
}

std::vector<std::map<std::string, int>> op_grid(const std::string& grid, const std::vector<std::string>& ops) {
  auto sets = parse_grid(grid);
  for (const auto& s : sets) params::check_param_names(ops, s, "--grid");
  return sets;
}

}  // namespace clattn::bench
