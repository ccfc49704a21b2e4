// clattn-bench decode: filled in by the decode op.
#include "bench/bench.hpp"

namespace clattn::bench {
void register_decode(CLI::App& app, Harness& h) {}
}  // namespace clattn::bench
