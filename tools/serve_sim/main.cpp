// clattn-serve-sim: plays an inference engine on one device through the AttentionBackend
// layer (continuous batching, shared-prefix pages, sampled reference checks) and reports
// tokens/s, the attention share of the step time, KV memory and decode bandwidth.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "sim.hpp"
#include "tools/cli.hpp"

namespace {

clattn::DType parse_dtype(const std::string& s) {
  if (s == "f32") return clattn::DType::F32;
  if (s == "f16") return clattn::DType::F16;
  if (s == "bf16") return clattn::DType::BF16;
  if (s == "fp8_e4m3" || s == "fp8") return clattn::DType::FP8_E4M3;
  if (s == "int8") return clattn::DType::I8;
  if (s == "int4") return clattn::DType::I4;
  return clattn::DType::FP8_E5M2;  // (the options' validators admit nothing else)
}

void progress_bar(int done, int total) {
  const int width = 40;
  const int filled = total ? done * width / total : width;
  std::fprintf(stderr, "\r  [%s%s] %d/%d requests", std::string(size_t(filled), '#').c_str(),
               std::string(size_t(width - filled), '.').c_str(), done, total);
  if (done == total) std::fprintf(stderr, "\n");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"clattn-serve-sim: an engine loop on clattn's attention backends, checked against a reference"};
  clattn::sim::Config cfg;
  std::string device, act = "bf16", kv = "bf16", kv_scales = "f32", compare;
  bool no_progress = false, big = false, no_warmup = false, check_args = false;
  using clattn::cli::at_least;
  using clattn::cli::one_of;
  std::string models;
  for (const auto& m : clattn::sim::preset_names()) models += (models.empty() ? "" : "|") + m;
  app.add_option("--device", device, "device selector (index, vendor, name); default $CLATTN_DEVICE, GPU, CPU");
  app.add_option("--model", cfg.model, "head-config preset: " + models)
      ->capture_default_str()
      ->check(one_of(clattn::sim::preset_names()));
  app.add_option("--layers", cfg.num_layers, "layers (0 = the preset's full depth)")
      ->capture_default_str()
      ->check(at_least(0));
  app.add_option("--backend", cfg.backend, "backend name (default: the preset's: paged, hybrid, mla, hsa)")
      ->check(one_of(clattn::backend_names()));
  app.add_option("--prefill-backend", cfg.prefill_backend, "hybrid: MHA backend for extend steps")
      ->capture_default_str()
      ->check(one_of(clattn::backend_names()));
  app.add_option("--decode-backend", cfg.decode_backend, "hybrid: MHA backend for decode steps")
      ->capture_default_str()
      ->check(one_of(clattn::backend_names()));
  app.add_option("--dtype", act, "q/k/v/o dtype")->capture_default_str()->check(one_of({"f32", "f16", "bf16"}));
  const std::vector<std::string> kv_dtypes = {"f32", "f16", "bf16", "fp8", "fp8_e4m3", "fp8_e5m2", "int8", "int4"};
  app.add_option("--kv-dtype", kv,
                 "cache dtype (fp8 = fp8_e4m3; int8: a scale per token and KV head, MLA latents a (ckv, kpe) "
                 "scale pair per token; int4 (not MLA): a scale and zero point per group of --quant-group head-dim "
                 "elements)")
      ->capture_default_str()
      ->check(one_of(kv_dtypes));
  app.add_option("--kv-scale-dtype", kv_scales, "int8 / int4 caches: the scale caches' dtype")
      ->capture_default_str()
      ->check(one_of({"f32", "f16"}));
  app.add_option("--quant-group", cfg.kv_quant_group, "int4 caches: head-dim elements per scale / zero pair")
      ->capture_default_str()
      ->check(CLI::IsMember({32, 64, 128}));
  app.add_option("--compare-kv", compare,
                 "also serve the trace on a cache of this dtype (e.g. bf16) and report the outputs' error against it")
      ->check(one_of(kv_dtypes));
  app.add_option("--page-size", cfg.page_size, "tokens per page (0 = the preset's)")->check(at_least(0));
  app.add_option("--requests", cfg.num_requests, "requests to serve")->capture_default_str()->check(at_least(1));
  app.add_option("--max-running", cfg.max_running, "concurrent requests (decode batch)")
      ->capture_default_str()
      ->check(at_least(1));
  app.add_option("--system-prompt", cfg.system_prompt, "shared prefix tokens (rounded up to whole pages)")
      ->capture_default_str()
      ->check(at_least(0));
  app.add_option("--prompt-min", cfg.prompt_min, "user tokens per request, at least")
      ->capture_default_str()
      ->check(at_least(1));
  app.add_option("--prompt-max", cfg.prompt_max, "user tokens per request, at most")
      ->capture_default_str()
      ->check(at_least(1));
  app.add_option("--output-min", cfg.output_min, "generated tokens per request, at least")
      ->capture_default_str()
      ->check(at_least(1));
  app.add_option("--output-max", cfg.output_max, "generated tokens per request, at most")
      ->capture_default_str()
      ->check(at_least(1));
  app.add_option("--prefill-budget", cfg.prefill_token_budget, "prompt tokens admitted per step")
      ->capture_default_str()
      ->check(at_least(1));
  app.add_option("--pages", cfg.num_pages, "KV pages (0 = enough for all requests)")->check(at_least(0));
  app.add_option("--check-every", cfg.check_every, "check every n-th step (0 = never)")
      ->capture_default_str()
      ->check(at_least(0));
  app.add_option("--check-requests", cfg.check_requests, "requests checked per layer")
      ->capture_default_str()
      ->check(at_least(1));
  app.add_flag("--check-all-layers", cfg.check_all_layers, "check every layer of a checked step");
  app.add_option("--hsa-topk", cfg.hsa_topk,
                 "HSA in the decode steps of the full-attention layers: pages selected per list (llama-8b-hsa: 64)")
      ->check(at_least(1));
  app.add_option("--hsa-window", cfg.hsa_window, "HSA: last tokens attended densely, 0 = none (llama-8b-hsa: 512)")
      ->check(at_least(0));
  app.add_option("--hsa-strategy", cfg.hsa_strategy, "HSA: one selection per KV head (group) or per query head (head)")
      ->check(one_of({"group", "head"}));
  app.add_option("--hsa-layers", cfg.hsa_layers, "HSA: these layers only, e.g. 0,2 (default: every full-attention layer)")
      ->delimiter(',');
  app.add_flag("--hsa-no-fuse", cfg.hsa_no_fuse, "HSA: the window as its own decode, merged by LSE (default: fused)");
  app.add_flag("!--no-mixed", cfg.mixed, "prefill and decode in separate steps (default: mixed steps)");
  app.add_flag("--replay", cfg.replay,
               "decode steps replayed: each batch-size bucket captured once (paged / paged_table backends)");
  app.add_option("--seed", cfg.seed)->capture_default_str();
  app.add_flag("--no-progress", no_progress);
  app.add_flag("--no-warmup", no_warmup,
               "one pass only (by default a first, cold pass builds the kernels and the figures are from a second, warm pass)");
  app.add_flag("--big", big,
               "a GPU-sized run: full depth, 128 requests (64 at once) x ~1-2k tokens, checks every 50th step "
               "(options given beside it win)");
  clattn::cli::add_check_args(app, &check_args);

  return clattn::cli::run("clattn-serve-sim", app, argc, argv, [&]() -> int {
    cfg.act_dtype = parse_dtype(act);
    cfg.kv_dtype = parse_dtype(kv);
    cfg.kv_scale_dtype = parse_dtype(kv_scales);
    if (!compare.empty()) cfg.compare_kv = parse_dtype(compare);
    if (big) {  // its sizes, where the option was not given
      const struct {
        const char* option;
        int* field;
        int value;
      } sizes[] = {{"--requests", &cfg.num_requests, 128},         {"--max-running", &cfg.max_running, 64},
                   {"--system-prompt", &cfg.system_prompt, 512},    {"--prompt-min", &cfg.prompt_min, 256},
                   {"--prompt-max", &cfg.prompt_max, 1536},         {"--output-min", &cfg.output_min, 64},
                   {"--output-max", &cfg.output_max, 256},          {"--prefill-budget", &cfg.prefill_token_budget, 8192},
                   {"--check-every", &cfg.check_every, 50},         {"--check-requests", &cfg.check_requests, 1}};
      for (const auto& sz : sizes)
        if (app.count(sz.option) == 0) *sz.field = sz.value;
    }
    if (auto p = clattn::sim::check(cfg)) clattn::cli::bad_argument(p->option, p->why);
    if (check_args) return 0;
    if (!no_progress) cfg.progress = progress_bar;
    auto ctx = clattn::Context::create(device);
    const auto limits = clattn::measure_limits(ctx);
    std::printf("clattn-serve-sim on %s (%s), model %s\n", ctx.profile().device_name.c_str(),
                ctx.profile().platform_name.c_str(), cfg.model.c_str());
    // Kernel compilation is a one-time cost per device and driver (the disk cache keeps the
    // programs; PoCL also compiles at a kernel's first launch): a cold pass over the same
    // workload pays it, and the figures below come from the warm pass that follows.
    double cold_s = 0;
    if (!no_warmup) {
      const auto cold = clattn::sim::run(ctx, cfg);
      cold_s = cold.wall_s;
      std::printf("  cold pass      %.2f s, %.1f tokens/s: each program built (or loaded from the disk cache) at its "
                  "first use; not in the figures below\n",
                  cold.wall_s, double(cold.prompt_tokens + cold.generated_tokens) / cold.wall_s);
      if (cold.mismatches > 0) {
        for (const auto& f : cold.failures) std::printf("  MISMATCH       %s\n", f.c_str());
        std::printf("FAILED: attention results differ from the reference\n");
        return 1;
      }
    }
    const auto r = clattn::sim::run(ctx, cfg);
    const double toks = double(r.prompt_tokens + r.generated_tokens);
    const std::string kv_desc =
        kv + (cfg.kv_dtype == clattn::DType::I8   ? " (" + kv_scales + " scales)"
              : cfg.kv_dtype == clattn::DType::I4 ? " (group " + std::to_string(cfg.kv_quant_group) + ", " + kv_scales +
                                                        " scale / zero pairs)"
                                                  : "");
    std::printf("  model          %s, backend %s, act %s, kv %s\n", r.model.c_str(), r.backend.c_str(), act.c_str(),
                kv_desc.c_str());
    std::printf("  steps          %d (%d extend, %d mixed, %d decode)\n", r.steps, r.extend_steps, r.mixed_steps,
                r.decode_steps);
    std::printf("  tokens         %lld prompt (%lld served from the shared prefix), %lld generated\n",
                (long long)r.prompt_tokens, (long long)r.cached_prefix_tokens, (long long)r.generated_tokens);
    // Pages are what requests share, so the system prompt is rounded up to whole pages.
    if (r.shared_prefix_tokens > 0) {
      const std::string rounded = r.shared_prefix_tokens == cfg.system_prompt
                                      ? ""
                                      : " (--system-prompt " + std::to_string(cfg.system_prompt) +
                                            " rounded up to whole pages)";
      std::printf("  shared prefix  %d tokens = %d page(s) of %d%s\n", r.shared_prefix_tokens,
                  r.shared_prefix_tokens / r.page_size, r.page_size, rounded.c_str());
    } else {
      std::printf("  shared prefix  none (--system-prompt 0)\n");
    }
    std::printf("  throughput     %.1f tokens/s (%.1f generated/s) over %.2f s (%s; reference checks excluded)\n",
                toks / r.wall_s, double(r.generated_tokens) / r.wall_s, r.wall_s,
                no_warmup ? "one pass, kernel builds included" : "warm pass");
    if (!no_warmup)
      std::printf("  one-time cost  %.2f s: the cold pass less the warm one (program builds and first launches)\n",
                  std::max(0.0, cold_s - r.wall_s));
    if (!r.hsa.empty()) {
      const double mib = 1.0 / 1048576.0;
      std::printf("  hsa            %d of %d layers, %s: decode read %.2f MiB (landmarks, selected pages, window) "
                  "of %.2f MiB dense KV (%.1f%%)\n",
                  r.hsa_layers, r.num_layers, r.hsa.c_str(), r.hsa_read_bytes * mib, r.hsa_dense_bytes * mib,
                  r.hsa_dense_bytes > 0 ? 100.0 * r.hsa_read_bytes / r.hsa_dense_bytes : 0.0);
      std::printf("  hsa decode     %.1f tokens/s in decode steps", r.decode_wall_s > 0 ? double(r.decode_tokens) / r.decode_wall_s : 0.0);
      if (r.hsa_decode_s > 0)
        std::printf(", HSA layers %.3f s device time, %.1f GB/s of what they read", r.hsa_decode_s,
                    r.hsa_read_bytes / r.hsa_decode_s * 1e-9);
      std::printf("\n");
    }
    if (r.attention_s > 0) {
      std::printf("  attention      %.3f s device time, %.1f%% of the step time\n", r.attention_s,
                  100.0 * r.attention_s / r.wall_s);
      if (r.decode_attention_s > 0) {
        const double gbps = r.decode_kv_bytes / r.decode_attention_s * 1e-9;
        std::printf("  decode steps   %.1f GB/s of KV/state read, %.1f%% of the measured stream-read %.1f GB/s\n", gbps,
                    100.0 * gbps / limits.stream_read_gbps, limits.stream_read_gbps);
      }
    } else {
      std::printf("  attention      (queue without profiling: no device times)\n");
    }
    if (r.decode_steps > 0) {
      std::printf("  host time      %.1f us per decode step in the backend's calls (%s), %d decode steps\n",
                  1e6 * r.decode_host_s / r.decode_steps,
                  r.replayed_steps > 0 ? "replay" : "init_forward_metadata + forward per layer", r.decode_steps);
      if (r.replayed_steps > 0)
        std::printf("  replay         %d of them replayed, %s\n", r.replayed_steps, r.replay_mode.c_str());
      if (r.decode_attention_s > 0)
        std::printf("  device time    %.1f us per decode step (attention, the layers' markers)\n",
                    1e6 * r.decode_attention_s / r.decode_steps);
    }
    std::printf("  KV memory      peak %.1f MiB used of %.1f MiB allocated (%d of %d pages), backend scratch %.2f MiB\n",
                double(r.kv_bytes_peak_used) / 1048576.0, double(r.kv_bytes_allocated) / 1048576.0, r.pages_peak_used,
                r.pages_total, double(r.scratch_bytes) / 1048576.0);
    std::printf("  allocations    %llu device allocations in steady-state decode steps\n", r.steady_decode_allocations);
    std::printf("  checks         %d layer checks against the double-precision reference, max |err| %.2e, %d mismatches\n",
                r.checks, r.max_abs_err, r.mismatches);
    if (r.compare_outputs > 0) {
      const double rms_ref = std::sqrt(r.compare_sq_ref / double(r.compare_outputs));
      const double rms_err = std::sqrt(r.compare_sq_err / double(r.compare_outputs));
      std::printf("  kv vs %-8s kv %s outputs against a %s-cache run of the same trace, %lld outputs of %d layer calls: "
                  "max |err| %.3e (%.3e of max |o| %.3g), rms err %.3e (%.3e of rms |o| %.3g)\n",
                  compare.c_str(), kv.c_str(), compare.c_str(), (long long)r.compare_outputs, r.compare_layer_calls,
                  r.compare_max_abs, r.compare_max_ref > 0 ? r.compare_max_abs / r.compare_max_ref : 0.0,
                  r.compare_max_ref, rms_err, rms_ref > 0 ? rms_err / rms_ref : 0.0, rms_ref);
    }
    for (const auto& f : r.failures) std::printf("  MISMATCH       %s\n", f.c_str());
    if (r.mismatches > 0) {
      std::printf("FAILED: attention results differ from the reference\n");
      return 1;
    }
    std::printf("OK\n");
    return 0;
  });
}
