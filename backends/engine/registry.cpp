// create_backend: the registry by name, and the checks every backend shares (the pool holds
// the layer, its buffers are set, failures name the backend, layer and device).
#include <string>

#include "backends/engine/backends.hpp"
#include "backends/engine/engine_common.hpp"
#include "runtime/error.hpp"

namespace clattn {

AttentionBackend::~AttentionBackend() = default;

// Capture and replay: the paged backends override these.
namespace {
[[noreturn]] void no_replay(const AttentionBackend& b) {
  rt::fail(Status::Unsupported, b.name() + ": capture/replay is served by the \"paged\" and \"paged_table\" backends");
}
}  // namespace
void AttentionBackend::init_replay_state(const ReplayConfig&) { no_replay(*this); }
void AttentionBackend::begin_capture(int) { no_replay(*this); }
void AttentionBackend::end_capture() { no_replay(*this); }
void AttentionBackend::replay(int, const int32_t*, const int32_t*) { no_replay(*this); }
int AttentionBackend::replay_bucket(int) const { return 0; }
ReplayInputs AttentionBackend::replay_inputs() const { return {}; }
std::vector<ReplayBucketInfo> AttentionBackend::replay_buckets() const { return {}; }

std::vector<std::string> backend_names() { return {"paged", "paged_table", "mla", "linear", "hybrid", "hsa"}; }

std::unique_ptr<AttentionBackend> create_backend(const std::string& name, const Context& ctx, const KVPool& pool,
                                                 const BackendConfig& cfg) {
  for (size_t i = 0; i < cfg.layers.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (cfg.layers[i].layer_id == cfg.layers[j].layer_id)
        rt::invalid("create_backend(\"" + name + "\"): layers[" + std::to_string(i) + "].layer_id " +
                    std::to_string(cfg.layers[i].layer_id) + " repeats layers[" + std::to_string(j) + "]");
  if (name == "paged") return engine::make_paged(ctx, pool, cfg, false);
  if (name == "paged_table") return engine::make_paged(ctx, pool, cfg, true);
  if (name == "mla") return engine::make_mla(ctx, pool, cfg);
  if (name == "linear") return engine::make_linear(ctx, pool, cfg);
  if (name == "hybrid") return engine::make_hybrid(ctx, pool, cfg);
  if (name == "hsa") return engine::make_hsa(ctx, pool, cfg);
  std::string known;
  for (const auto& n : backend_names()) known += (known.empty() ? "" : ", ") + n;
  rt::invalid("create_backend: unknown backend \"" + name + "\" (known: " + known + ")");
}

namespace engine {

void check_pool_layer(const KVPool& pool, const LayerSpec& l, const std::string& backend) {
  const std::string tag = layer_tag(backend, l);
  if (l.layer_id < 0 || l.layer_id >= pool.num_layers())
    rt::invalid(tag + ": layer_id is outside the KVPool's " + std::to_string(pool.num_layers()) + " layers");
  const KVPool::Layer& L = pool.layer(l.layer_id);
  if (L.kind != l.kind)
    rt::invalid(tag + ": the KVPool holds a " + layer_kind_name(L.kind) + " layer at this id");
  if (l.apply_rope && l.kind != LayerKind::MHA)
    rt::invalid(tag + ": apply_rope is for MHA layers (MLA's q_pe / kpe rotation and linear layers' are the engine's)");
  const bool set = l.kind == LayerKind::Linear ? L.state.state != nullptr : (L.k && L.v);
  if (!set) rt::invalid(tag + ": the KVPool layer has no buffers (allocate the pool or call set_layer first)");
  if (l.kind == LayerKind::MHA && L.kv.scale_required_bytes() > 0 && !(L.k_scale_cache && L.v_scale_cache))
    rt::invalid(tag + ": the KVPool layer's " + dtype_name(L.kv.dtype) +
                " cache has no scale caches (KVPool::Layer k_scale_cache / v_scale_cache: allocate the pool or "
                "pass them to set_layer)");
  if (l.kind == LayerKind::MLA && L.latent.scale_required_bytes() > 0 && !L.k_scale_cache)
    rt::invalid(tag + ": the KVPool layer's " + dtype_name(L.latent.dtype) +
                " latent cache has no scale cache (KVPool::Layer k_scale_cache: allocate the pool or pass it to "
                "set_layer)");
}

void rethrow_for_layer(const Error& e, const std::string& tag, const Context& ctx) {
  const Status s = e.status() == Status::BuildFailed ? Status::Unsupported : e.status();
  throw Error(s, tag + ": cannot run on " + ctx.profile().device_name + ": " + e.what(), e.cl_error());
}

}  // namespace engine
}  // namespace clattn
