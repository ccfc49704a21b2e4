// clattn-bench: one case file per op registers a subcommand; every case prints its achieved
// rate and the percentage of a limit measured in the same process. The timing itself is the
// harness (harness/harness.hpp, shared with clattn-tune).
#pragma once
#include <CLI/CLI.hpp>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "harness/harness.hpp"

namespace clattn::bench {

using Registrar = std::function<void(CLI::App& app, Harness& h)>;
// Each case file adds itself in bench/main.cpp's list.
void register_decode(CLI::App& app, Harness& h);
void register_metadata(CLI::App& app, Harness& h);
void register_linear(CLI::App& app, Harness& h);
void register_extend(CLI::App& app, Harness& h);
void register_mla(CLI::App& app, Harness& h);
void register_limits(CLI::App& app, Harness& h);
void register_sparse(CLI::App& app, Harness& h);
void register_rope(CLI::App& app, Harness& h);

// --check-args: each op checks its options, then returns before any device work.
bool& check_args_only();

// --param NAME=V (repeatable) and --grid "A=1,2;B=3" of an op whose parameters are those of
// the database ops `ops` (params::param_names): parsed, and an unknown name or a malformed
// value throws InvalidArgument naming it.
std::map<std::string, int> op_params(const std::vector<std::string>& args, const std::vector<std::string>& ops);
std::vector<std::map<std::string, int>> op_grid(const std::string& grid, const std::vector<std::string>& ops);

// Fills `bytes` of m on the context's queue with a repeating 64-byte pattern of small finite
// values in every dtype (bench/fill.cpp).
void fill_pattern(const Context& ctx, cl_mem m, size_t bytes, uint32_t seed);

// B requests of S keys each in pages of P, the pages handed out in a shuffled order (as a
// long-running allocator would): page ids 0 .. B * ceil(S / P) - 1 (bench/fill.cpp).
PagedCsr shuffled_csr(int B, int S, int P, unsigned seed);

// Prints once per process which kernel variants the context may choose ("# variants: ...":
// CLATTN_VARIANTS=portable excludes the vendor-specific ones); each op case calls it first.
void note_variant_mode(Harness& h);

}  // namespace clattn::bench
