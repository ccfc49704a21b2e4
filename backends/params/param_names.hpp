// The parameter names an op takes as overrides (DecodeOptions::params and the like, the
// tuner's candidates, clattn-bench --param / --grid): every name the op's rows set, plus the
// names its code reads with a built-in default that no row sets.
#pragma once
#include <string>
#include <vector>

#include "backends/params/database.hpp"

namespace clattn::params {

// Sorted; empty for an op without rows.
std::vector<std::string> param_names(const std::string& op);

// Throws InvalidArgument when `overrides` names a parameter none of `ops` takes: the message
// names it, says where it came from (`what`, e.g. "--param") and lists the names the ops take.
void check_param_names(const std::vector<std::string>& ops, const Values& overrides, const std::string& what);

}  // namespace clattn::params
