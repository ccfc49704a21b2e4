// clattn-bench metadata: filled in by the metadata op.
#include "bench/bench.hpp"

namespace clattn::bench {
void register_metadata(CLI::App& app, Harness& h) {}
}  // namespace clattn::bench
