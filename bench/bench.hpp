// clattn-bench: one case file per op registers a subcommand; every case prints its achieved
// rate and the percentage of a limit measured in the same process. The timing itself is the
// harness (harness/harness.hpp, shared with clattn-tune).
#pragma once
#include <CLI/CLI.hpp>
#include <functional>

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

// Prints once per process which kernel variants the context may choose ("# variants: ...":
// CLATTN_VARIANTS=portable excludes the vendor-specific ones); each op case calls it first.
void note_variant_mode(Harness& h);

}  // namespace clattn::bench
