// clattn-bench: `clattn-bench [--device D] <op> [options]`; `--help` lists the ops.
#include <cstdio>

#include "bench/bench.hpp"
#include "bench/ceilings.hpp"

int main(int argc, char** argv) {
  CLI::App app{"clattn-bench: op throughput against same-process bandwidth/compute limits"};
  clattn::bench::Harness h;
  app.add_option("--device", h.device, "device selector (index, vendor, name substring)");
  app.add_option("--warmup", h.warmup, "untimed runs per case");
  app.add_option("--iters", h.iters, "timed samples per case (median reported)");
  h.reps = 10;
  app.add_option("--reps", h.reps,
                 "calls per timed sample, back to back (default 10: per-call time as in an engine's layer loop; "
                 "1: one call on an idle device)");
  app.add_option("--json", h.json_out, "append one JSON line per result to this file");
  app.add_option("--sgemm-n", clattn::bench::sgemm_size(),
                 "size of the CLBlast SGEMM ceiling (n x n x n; default 4096, 1024 on CPU devices)")
      ->check(CLI::PositiveNumber);
  app.require_subcommand(1);
  clattn::bench::register_decode(app, h);
  clattn::bench::register_metadata(app, h);
  clattn::bench::register_linear(app, h);
  clattn::bench::register_extend(app, h);
  clattn::bench::register_mla(app, h);
  clattn::bench::register_limits(app, h);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const clattn::Error& e) {
    std::fprintf(stderr, "clattn-bench: %s: %s\n", clattn::status_name(e.status()), e.what());
    return 1;
  }
  return 0;
}
