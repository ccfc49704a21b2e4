// "hybrid": routes each layer to the backend for its kind (MHA -> paged/paged_table, MLA ->
// mla, linear -> linear) and, for MHA layers, to a different backend per mode
// (BackendConfig::prefill_backend for extend/mixed steps, decode_backend for decode; "hsa"
// may decode).
#include <string>

#include "backends/engine/backends.hpp"
#include "backends/engine/engine_common.hpp"
#include "runtime/error.hpp"

namespace clattn::engine {
namespace {

std::unique_ptr<AttentionBackend> make_full(const std::string& name, const Context& ctx, const KVPool& pool,
                                            const BackendConfig& cfg, const char* which) {
  const bool decode = std::string(which) == "decode_backend";
  if (name == "paged") return make_paged(ctx, pool, cfg, false);
  if (name == "paged_table") return make_paged(ctx, pool, cfg, true);
  if (name == "hsa" && decode) return make_hsa(ctx, pool, cfg);
  rt::invalid(std::string("hybrid: BackendConfig.") + which + " = \"" + name +
              "\" is not a full-attention backend (paged, paged_table" + (decode ? ", hsa)" : ")"));
}

class HybridBackend final : public AttentionBackend {
 public:
  HybridBackend(const Context& ctx, const KVPool& pool, const BackendConfig& cfg) : cfg_(cfg) {
    BackendConfig mha = cfg, mla = cfg, lin = cfg;
    mha.layers.clear(), mla.layers.clear(), lin.layers.clear();
    for (const auto& l : cfg.layers) {
      (l.kind == LayerKind::MHA ? mha : l.kind == LayerKind::MLA ? mla : lin).layers.push_back(l);
      kind_of_[l.layer_id] = l.kind;
    }
    if (!mha.layers.empty()) {
      prefill_ = make_full(cfg.prefill_backend, ctx, pool, mha, "prefill_backend");
      if (cfg.decode_backend != cfg.prefill_backend)
        decode_ = make_full(cfg.decode_backend, ctx, pool, mha, "decode_backend");
    }
    if (!mla.layers.empty()) mla_ = make_mla(ctx, pool, mla);
    if (!lin.layers.empty()) linear_ = make_linear(ctx, pool, lin);
  }

  std::string name() const override { return "hybrid"; }

  void init_forward_metadata(const ForwardBatch& fb) override {
    mode_ready_ = false;
    if (AttentionBackend* full = full_for(fb.mode)) full->init_forward_metadata(fb);
    if (mla_) mla_->init_forward_metadata(fb);
    if (linear_) linear_->init_forward_metadata(fb);
    mode_ = fb.mode;
    mode_ready_ = true;
  }

  void forward(int layer_id, const LayerIO& io, bool save_kv_cache) override {
    if (!mode_ready_) rt::invalid("hybrid: forward before a successful init_forward_metadata");
    auto it = kind_of_.find(layer_id);
    if (it == kind_of_.end()) rt::invalid("hybrid: layer_id " + std::to_string(layer_id) + " is not one of this backend's layers");
    AttentionBackend* b = it->second == LayerKind::MHA ? full_for(mode_)
                          : it->second == LayerKind::MLA ? mla_.get() : linear_.get();
    b->forward(layer_id, io, save_kv_cache);
  }

  int64_t scratch_bytes() const override {
    int64_t n = 0;
    for (const auto* b : {prefill_.get(), decode_.get(), mla_.get(), linear_.get()})
      if (b) n += b->scratch_bytes();
    return n;
  }

 private:
  AttentionBackend* full_for(ForwardMode m) const {
    if (m == ForwardMode::Decode && decode_) return decode_.get();
    return prefill_.get();
  }

  BackendConfig cfg_;
  std::map<int, LayerKind> kind_of_;
  std::unique_ptr<AttentionBackend> prefill_, decode_, mla_, linear_;
  ForwardMode mode_ = ForwardMode::Decode;
  bool mode_ready_ = false;
};

}  // namespace

std::unique_ptr<AttentionBackend> make_hybrid(const Context& ctx, const KVPool& pool, const BackendConfig& cfg) {
  return std::make_unique<HybridBackend>(ctx, pool, cfg);
}

}  // namespace clattn::engine
