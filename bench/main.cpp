// clattn-bench: `clattn-bench [--device D] <op> [options]`; `--help` lists the ops.
#include <cstdio>

#include "bench/bench.hpp"
#include "bench/ceilings.hpp"
#include "tools/cli.hpp"

int main(int argc, char** argv) {
  using clattn::cli::at_least;
  CLI::App app{"clattn-bench: op throughput against same-process bandwidth/compute limits"};
  clattn::bench::Harness h;
  app.add_option("--device", h.device, "device selector (index, vendor, name substring)");
  app.add_option("--warmup", h.warmup, "untimed runs per case")->check(at_least(0));
  app.add_option("--iters", h.iters, "timed samples per case (median reported)")->check(at_least(1));
  h.reps = 10;
  app.add_option("--reps", h.reps,
                 "calls per timed sample, back to back (default 10: per-call time as in an engine's layer loop; "
                 "1: one call on an idle device)")
      ->check(at_least(1));
  app.add_option("--json", h.json_out, "append one JSON line per result to this file");
  app.add_option("--sgemm-n", clattn::bench::sgemm_size(),
                 "size of the CLBlast SGEMM ceiling (n x n x n; default 4096, 1024 on CPU devices)")
      ->check(at_least(1));
  clattn::cli::add_check_args(app, &clattn::bench::check_args_only());
  clattn::bench::register_decode(app, h);
  clattn::bench::register_metadata(app, h);
  clattn::bench::register_linear(app, h);
  clattn::bench::register_extend(app, h);
  clattn::bench::register_mla(app, h);
  clattn::bench::register_sparse(app, h);
  clattn::bench::register_rope(app, h);
  clattn::bench::register_limits(app, h);
  // One op. Extras are allowed here (the ops' own options are not: they were added above)
  // so that an unknown op is named as one before any op runs.
  app.require_subcommand(0, 1);
  app.allow_extras();
  app.parse_complete_callback([&app] {
    const std::vector<std::string> rest = app.remaining();
    if (app.get_subcommands().empty()) {
      std::vector<std::string> ops;
      for (const CLI::App* s : app.get_subcommands([](CLI::App*) { return true; })) ops.push_back(s->get_name());
      if (rest.empty() || rest[0].rfind('-', 0) == 0)
        throw CLI::ValidationError("an op is required (one of " + clattn::cli::join(ops) + ")");
      throw CLI::ValidationError("unknown op '" + rest[0] + "' (one of " + clattn::cli::join(ops) + ")");
    }
    if (!rest.empty()) throw CLI::ExtrasError(rest);
  });
  return clattn::cli::run("clattn-bench", app, argc, argv, [] { return 0; });
}
