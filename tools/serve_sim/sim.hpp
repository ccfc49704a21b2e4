// clattn-serve-sim's engine: a small random model served through an AttentionBackend
// with continuous batching, paged KV with a shared system-prompt prefix, and sampled
// checks against the double-precision reference. Used by the tool and by the backend tests.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <clattn/clattn.hpp>

namespace clattn::sim {

struct Model {
  std::string name;
  std::vector<LayerSpec> layers;
  std::string backend;    // registry name that serves it
  int page_size = 16;
  HsaBackendConfig hsa;   // topk > 0: HSA presets (decode on the "hsa" backend)
};
// "llama-8b" (GQA 32/8, D 128), "llama-8b-hsa" (the same, HSA decode: 64 pages of 64 per
// KV head plus a 512-token window), "qwen3-next" (3 Gated DeltaNet : 1 full GQA 16/2 D 256),
// "deepseek-v3-tp8" (MLA, 16 heads per rank), "gpt-oss" (sliding/full alternating, sinks,
// GQA 64/8 D 64), "tiny" (small GQA for tests). num_layers = 0 keeps the preset's depth.
Model preset(const std::string& name, int num_layers = 0);
std::vector<std::string> preset_names();

struct Config {
  std::string model = "llama-8b";
  int num_layers = 0;          // 0 = preset default
  std::string backend;         // "" = the preset's
  std::string prefill_backend = "paged", decode_backend = "paged";  // hybrid routing
  DType act_dtype = DType::BF16, kv_dtype = DType::BF16;
  DType kv_scale_dtype = DType::F32;  // int8 / int4 caches: the scale caches' dtype (f32 or f16)
  int kv_quant_group = 64;            // int4 caches: head-dim elements per [scale, zero] pair
  // Also serve every step on a second pool of this cache dtype (same trace: the same tokens,
  // batches and inputs) and report how far the outputs are from it (Report::compare_*).
  std::optional<DType> compare_kv;
  int page_size = 0;           // 0 = the preset's
  int num_requests = 12;
  int max_running = 6;         // decode batch limit (pool rows)
  int system_prompt = 32;      // shared prefix tokens (rounded up to whole pages: pages are what is shared)
  int prompt_min = 4, prompt_max = 40;   // per-request user tokens
  int output_min = 2, output_max = 12;   // generated tokens per request
  int prefill_token_budget = 512;        // new prompt tokens admitted per step
  bool mixed = true;           // admit prefills into decode steps (mixed mode)
  int num_pages = 0;           // 0 = enough for every request at once
  int check_every = 3;         // check every n-th step (0 = never); step 1 always
  int check_requests = 3;      // requests checked per checked layer
  bool check_all_layers = false;  // else the first layer of each kind (HSA layers a kind of their own)
  // HSA (Hierarchical Sparse Attention) in the decode steps of full-attention MHA layers:
  // topk > 0 turns it on (or changes an -hsa preset's); the rest apply with HSA on.
  int hsa_topk = 0;            // pages per selection list; 0 = the preset's (none outside -hsa presets)
  int hsa_window = -1;         // dense window tokens (SWA->HSA); -1 = the preset's (0 outside them)
  std::string hsa_strategy;    // "group" (per KV head) or "head" (per query head); "" = group
  bool hsa_no_fuse = false;    // window as its own decode, merged by LSE (default: fused)
  std::vector<int> hsa_layers; // layers with HSA; empty = every full-attention MHA layer
  // Decode steps replayed: every batch-size bucket up to max_running captured at the start
  // (AttentionBackend::init_replay_state / begin_capture), each decode step one replay()
  // (paged / paged_table backends, MHA models).
  bool replay = false;
  uint64_t seed = 1;
  std::function<void(int done, int total)> progress;  // called once per step
};

struct Report {
  std::string device, backend, model;
  int steps = 0, decode_steps = 0, extend_steps = 0, mixed_steps = 0;
  int64_t prompt_tokens = 0, generated_tokens = 0, cached_prefix_tokens = 0;
  int shared_prefix_tokens = 0, page_size = 0;  // the system prompt as shared: whole pages
  double wall_s = 0, attention_s = 0;    // attention_s: device time of forward() calls (profiling)
  double decode_attention_s = 0;         // of which decode steps
  double decode_kv_bytes = 0;            // KV bytes the decode steps' attention read
  int64_t kv_bytes_allocated = 0, kv_bytes_peak_used = 0, scratch_bytes = 0;
  int pages_total = 0, pages_peak_used = 0;
  int checks = 0, mismatches = 0;
  double max_abs_err = 0;
  // compare_kv: over every output element of every layer of every step, |o - o_compare|'s
  // maximum and sum of squares, and the compare run's max |o| and sum of squares.
  int64_t compare_outputs = 0;
  int compare_layer_calls = 0;
  double compare_max_abs = 0, compare_max_ref = 0, compare_sq_err = 0, compare_sq_ref = 0;
  std::vector<std::string> failures;     // first few mismatch descriptions
  // Decode steps: wall time (reference checks excluded) and tokens generated in them.
  double decode_wall_s = 0;
  int64_t decode_tokens = 0;
  // Host time the decode steps spent in the backend's calls: init_forward_metadata and every
  // forward(), or replay(); replayed_steps of them replayed. replay_mode describes a replay
  // ("command buffer" or "N launches"), empty without replay.
  double decode_host_s = 0;
  int replayed_steps = 0;
  std::string replay_mode;
  // HSA: its settings ("" = off), layers, and over the decode steps of the HSA layers the
  // bytes their attention read (landmarks, selected pages, window), the bytes dense decode
  // would have read, and their device time.
  std::string hsa;
  int hsa_layers = 0, num_layers = 0;
  double hsa_read_bytes = 0, hsa_dense_bytes = 0, hsa_decode_s = 0;
  // Device allocations during the decode steps of the run's second half (batch and
  // context sizes have settled by then; grow-only buffers stop growing).
  unsigned long long steady_decode_allocations = 0;
};

// The first setting run() would refuse, with the clattn-serve-sim option that sets it and
// why ("--prompt-max", "is 10, below --prompt-min 50"); nullopt when there is none.
struct ConfigProblem {
  std::string option, why;
};
std::optional<ConfigProblem> check(const Config& cfg);

// Throws InvalidArgument (naming the option) for a setting check() refuses.
Report run(const Context& ctx, const Config& cfg);

}  // namespace clattn::sim
