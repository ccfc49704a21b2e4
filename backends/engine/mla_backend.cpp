// "mla": DeepSeek latent-attention layers (absorbed form) on the paged latent cache (int8
// latents with the pool's scale-pair cache). One CSR and one upload per step; one plan per
// distinct (heads, scale).
#include <algorithm>
#include <map>
#include <string>

#include "backends/engine/backends.hpp"
#include "backends/engine/engine_common.hpp"
#include "runtime/error.hpp"

namespace clattn::engine {
namespace {

class MlaBackend final : public AttentionBackend {
 public:
  MlaBackend(const Context& ctx, const KVPool& pool, const BackendConfig& cfg) : ctx_(ctx), pool_(pool), cfg_(cfg) {
    for (const auto& l : cfg.layers) {
      const std::string tag = layer_tag("mla", l);
      if (l.kind != LayerKind::MLA) rt::invalid(tag + ": this backend serves MLA layers; use \"hybrid\" to mix kinds");
      check_pool_layer(pool, l, "mla");
      if (l.num_qo_heads < 1 || l.num_qo_heads > 128)
        rt::invalid(tag + ": num_qo_heads " + std::to_string(l.num_qo_heads) + " is outside 1..128");
      if (!(l.sm_scale > 0.0f)) rt::invalid(tag + ": sm_scale must be > 0 for MLA (DeepSeek: 1/sqrt(192) x mscale^2)");
      if (l.window_left >= 0 || l.logits_soft_cap != 0.0f || l.sinks)
        rt::invalid(tag + ": sliding window, soft cap and sinks are not MLA options");
      const std::string key = std::to_string(l.num_qo_heads) + "/" + std::to_string(l.sm_scale);
      key_of_[l.layer_id] = key;
      if (!shapes_.count(key)) {
        shapes_[key].spec = l;
        try {
          warm(shapes_[key]);
        } catch (const Error& e) {
          rethrow_for_layer(e, tag, ctx);
        }
      }
    }
  }

  std::string name() const override { return "mla"; }

  void init_forward_metadata(const ForwardBatch& fb) override {
    ready_ = false;
    if (fb.mask_indptr || fb.custom_mask) rt::invalid("mla: custom masks are not supported by MLA layers");
    step_.load(ctx_, q(), fb, "mla", CacheShape{pool_.config().num_pages, pool_.config().page_size}, false);
    std::size_t ws = 0;
    for (auto& [key, s] : shapes_) {
      const MlaCache& cache = pool_.layer(s.spec.layer_id).latent;
      MlaOptions o = options(s.spec);
      o.plan_buffer = s.table.plan_buffer();
      s.plan = step_.batch().extend ? mla_extend_plan(ctx_, step_.csr(), cache, o, q())
                                    : mla_decode_plan(ctx_, step_.csr(), cache, o, q());
      s.table.reserve(ctx_, size_t(s.plan.table_bytes), "mla plan table");
      ws = std::max(ws, size_t(s.plan.workspace_bytes));
    }
    step_.reserve_workspace(ctx_, ws);
    ready_ = true;
  }

  void forward(int layer_id, const LayerIO& io, bool save_kv_cache) override {
    if (!ready_) rt::invalid("mla: forward before a successful init_forward_metadata");
    const LayerSpec& spec = find_layer(cfg_.layers, layer_id, "mla");
    const std::string tag = layer_tag("mla", spec);
    if (!io.q || !io.q_pe || !io.o) rt::invalid(tag + ": LayerIO.q (q_nope), q_pe and o are required");
    const KVPool::Layer& L = pool_.layer(layer_id);
    const Enqueue e{q(), 0, nullptr, nullptr};
    if (save_kv_cache && step_.batch().num_tokens > 0) {
      if (!io.k || !io.v) rt::invalid(tag + ": LayerIO.k (ckv rows) and v (kpe rows) are required with save_kv_cache");
      AppendLatentArgs a;
      a.ckv = io.k, a.kpe = io.v, a.src_dtype = cfg_.act_dtype;
      a.slot_mapping = step_.slots(), a.slot_dtype = step_.slot_dtype(), a.num_tokens = step_.batch().num_tokens;
      a.ckv_cache = L.k, a.kpe_cache = L.v, a.cache = L.latent;
      a.scale = pool_.config().k_scale;
      a.scale_cache = L.k_scale_cache;  // int8 latents: the (ckv, kpe) scale pairs; null otherwise
      append_latent(ctx_, a, e);
    }
    MlaBuffers b;
    b.q_nope = io.q, b.q_pe = io.q_pe, b.ckv = L.k, b.kpe = L.v, b.page_ids = step_.page_ids();
    b.o = io.o, b.lse = io.lse, b.workspace = step_.workspace(), b.kv_scale = pool_.config().k_scale;
    b.scale_cache = L.k_scale_cache;
    mla_run(ctx_, shapes_.at(key_of_.at(layer_id)).plan, b, e);
  }

  int64_t scratch_bytes() const override {
    int64_t n = step_.bytes();
    for (const auto& kv : shapes_) n += int64_t(kv.second.table.bytes());
    return n;
  }

 private:
  struct Shape {
    LayerSpec spec;
    MlaPlan plan;
    GrowBuffer table;
  };

  MlaOptions options(const LayerSpec& l) const {
    MlaOptions o;
    o.num_heads = l.num_qo_heads;
    o.q_dtype = o.o_dtype = cfg_.act_dtype;
    o.sm_scale = l.sm_scale;
    o.causal = true;
    o.max_splits = cfg_.max_splits;
    o.validate = false;  // validated once per step
    return o;
  }

  void warm(Shape& s) {
    const MlaCache& cache = pool_.layer(s.spec.layer_id).latent;
    s.plan = mla_decode_plan(ctx_, one_token_csr(cache.page_size, false), cache, options(s.spec), q());
    s.plan = mla_extend_plan(ctx_, one_token_csr(cache.page_size, true), cache, options(s.spec), q());
  }

  cl_command_queue q() const { return backend_queue(ctx_, cfg_); }

  Context ctx_;
  const KVPool& pool_;
  BackendConfig cfg_;
  std::map<std::string, Shape> shapes_;
  std::map<int, std::string> key_of_;
  PagedStep step_;
  bool ready_ = false;
};

}  // namespace

std::unique_ptr<AttentionBackend> make_mla(const Context& ctx, const KVPool& pool, const BackendConfig& cfg) {
  return std::make_unique<MlaBackend>(ctx, pool, cfg);
}

}  // namespace clattn::engine
