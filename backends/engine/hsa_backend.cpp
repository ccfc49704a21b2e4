// "hsa": Hierarchical Sparse Attention in the decode steps of the chosen MHA layers
// (hsa_run: landmark selection, then decode over the selected pages and the window), on
// the paged backend's step (metadata built, validated and uploaded once). Dense layers and
// every extend/mixed step run the paged backend's dense path. One HSA plan per distinct
// layer shape per decode step, shared by the layers of that shape.
#include <algorithm>
#include <map>
#include <set>
#include <string>

#include "backends/engine/backends.hpp"
#include "backends/engine/paged_backend.hpp"
#include "clattn/merge_state.hpp"
#include "clattn/sparse.hpp"
#include "runtime/error.hpp"

namespace clattn::engine {
namespace {

const char* kName = "hsa";

// The HSA config's fields, then the set of layers that use HSA (empty list: every layer
// without a sliding window).
std::set<int> hsa_layers(const BackendConfig& cfg, int page_size) {
  const HsaBackendConfig& h = cfg.hsa;
  const std::string who = std::string(kName) + ": BackendConfig.hsa.";
  if (h.topk < 1) rt::invalid(who + "topk = " + std::to_string(h.topk) + ", must be >= 1");
  if (h.strategy != HsaStrategy::Group && h.strategy != HsaStrategy::Head)
    rt::invalid(who + "strategy = " + std::to_string(int(h.strategy)) + " is not group (0) or head (1)");
  if (h.window_size < 0) rt::invalid(who + "window_size = " + std::to_string(h.window_size) + ", must be >= 0");
  if (page_size < 2)
    rt::invalid(std::string(kName) + ": KVPool page_size " + std::to_string(page_size) +
                ": HSA pages hold a landmark in their last slot, so page_size >= 2");
  std::set<int> out;
  if (h.layers.empty()) {
    for (const auto& l : cfg.layers)
      if (l.window_left < 0) out.insert(l.layer_id);
    return out;
  }
  for (size_t i = 0; i < h.layers.size(); ++i) {
    const std::string at = who + "layers[" + std::to_string(i) + "] = " + std::to_string(h.layers[i]);
    const LayerSpec* l = nullptr;
    for (const auto& s : cfg.layers)
      if (s.layer_id == h.layers[i]) l = &s;
    if (!l) rt::invalid(at + " is not one of this backend's layers");
    if (l->kind != LayerKind::MHA) rt::invalid(at + " is a " + layer_kind_name(l->kind) + " layer (HSA serves MHA layers)");
    if (l->window_left >= 0)
      rt::invalid(at + " has a sliding window (window_left " + std::to_string(l->window_left) +
                  "): such a layer stays dense");
    if (!out.insert(h.layers[i]).second) rt::invalid(at + " is listed twice");
  }
  return out;
}

class HsaBackend final : public AttentionBackend {
 public:
  HsaBackend(const Context& ctx, const KVPool& pool, const BackendConfig& cfg)
      : ctx_(ctx), pool_(pool), cfg_(cfg), hsa_(hsa_layers(cfg, pool.config().page_size)) {
    paged_ = std::make_unique<PagedBackend>(ctx, pool, cfg, false, kName, hsa_);
    for (int id : hsa_) {
      const LayerSpec& l = find_layer(cfg.layers, id, kName);
      const std::string key = shape_key(l, pool.layer(id).kv);
      key_of_[id] = key;
      if (shapes_.count(key)) continue;
      Shape& s = shapes_[key];
      s.spec = l;
      try {  // builds the selection and sparse decode kernels now (compile at load)
        const PagedCsr one = one_token_csr(pool.config().page_size, false);
        const PagedKV& cache = pool.layer(id).kv;
        s.plan = hsa_plan(ctx, one, cache, options(l), queue());
        if (split_window()) s.window = decode_plan(ctx, one, cache, window_options(l), queue());
      } catch (const Error& e) {
        rethrow_for_layer(e, layer_tag(kName, l), ctx);
      }
    }
  }

  std::string name() const override { return kName; }

  void init_forward_metadata(const ForwardBatch& fb) override {
    ready_ = false;
    paged_->init_forward_metadata(fb);
    const PagedStep& step = paged_->step();
    decode_ = !step.batch().extend;
    if (decode_) {
      const int B = step.batch().batch_size;
      size_t ws = 0, sel = 0, rows = 0, o_bytes = 0;
      for (auto& [key, s] : shapes_) {
        const PagedKV& cache = pool_.layer(s.spec.layer_id).kv;
        HsaOptions o = options(s.spec);
        o.plan_buffer = s.table.plan_buffer();
        s.plan = hsa_plan(ctx_, step.csr(), cache, o, queue());
        s.table.reserve(ctx_, size_t(s.plan.table_bytes), "HSA plan table");  // next step fits
        ws = std::max(ws, size_t(s.plan.workspace_bytes));
        sel = std::max(sel, size_t(B) * size_t(s.plan.num_sel_heads) * size_t(s.plan.topk) * 4);
        if (split_window()) {
          DecodeOptions d = window_options(s.spec);
          d.plan_buffer = s.window_table.plan_buffer();
          s.window = decode_plan(ctx_, step.csr(), cache, d, queue());
          s.window_table.reserve(ctx_, size_t(s.window.table_bytes), "HSA window plan table");
          ws = std::max(ws, size_t(s.window.workspace_bytes));
          rows = std::max(rows, size_t(B) * size_t(s.spec.num_qo_heads));
          o_bytes = std::max(o_bytes, size_t(B) * size_t(s.spec.num_qo_heads) * size_t(s.spec.head_dim) *
                                          dtype_size(cfg_.act_dtype));
        }
      }
      workspace_.reserve(ctx_, ws, "HSA workspace");
      selected_.reserve(ctx_, sel, "HSA selected page ids");
      if (split_window()) {
        o_pages_.reserve(ctx_, o_bytes, "HSA pages output"), o_window_.reserve(ctx_, o_bytes, "HSA window output");
        lse_pages_.reserve(ctx_, rows * 4, "HSA pages lse"), lse_window_.reserve(ctx_, rows * 4, "HSA window lse");
      }
    }
    ready_ = true;
  }

  void forward(int layer_id, const LayerIO& io, bool save_kv_cache) override {
    if (!ready_) rt::invalid(std::string(kName) + ": forward before a successful init_forward_metadata");
    if (!decode_ || !hsa_.count(layer_id)) return paged_->forward(layer_id, io, save_kv_cache);
    const LayerSpec& spec = find_layer(cfg_.layers, layer_id, kName);
    if (!io.q || !io.o) rt::invalid(layer_tag(kName, spec) + ": LayerIO.q and LayerIO.o are required");
    paged_->save_kv(layer_id, io, save_kv_cache);
    const Shape& s = shapes_.at(key_of_.at(layer_id));
    const KVPool::Layer& L = pool_.layer(layer_id);
    const Enqueue e{queue(), 0, nullptr, nullptr};
    HsaBuffers b;
    b.q = io.q, b.k_cache = L.k, b.v_cache = L.v, b.page_ids = paged_->step().page_ids();
    b.selected_page_ids = selected_.get(), b.workspace = workspace_.get();
    b.k_scale = pool_.config().k_scale, b.v_scale = pool_.config().v_scale;
    if (!split_window()) {
      b.o = io.o, b.lse = io.lse, b.sinks = spec.sinks;
      return hsa_run(ctx_, s.plan, b, e);
    }
    // Pages before the window, then the window (its part carries the sinks, so they join
    // the merged denominator once), merged by their LSEs.
    b.o = o_pages_.get(), b.lse = lse_pages_.get();
    hsa_run(ctx_, s.plan, b, e);
    DecodeBuffers d;
    d.q = io.q, d.k_cache = L.k, d.v_cache = L.v, d.page_ids = paged_->step().page_ids();
    d.o = o_window_.get(), d.lse = lse_window_.get(), d.sinks = spec.sinks, d.workspace = workspace_.get();
    d.k_scale = b.k_scale, d.v_scale = b.v_scale;
    decode_run(ctx_, s.window, d, e);
    MergeStateArgs m;
    m.v_a = o_pages_.get(), m.s_a = lse_pages_.get(), m.v_b = o_window_.get(), m.s_b = lse_window_.get();
    m.v_out = io.o, m.s_out = io.lse;
    m.num_tokens = s.plan.batch_size, m.num_heads = spec.num_qo_heads, m.head_dim = spec.head_dim;
    m.dtype = cfg_.act_dtype;
    merge_state(ctx_, m, e);
  }

  int64_t scratch_bytes() const override {
    int64_t n = paged_->scratch_bytes();
    for (const GrowBuffer* g : {&workspace_, &selected_, &o_pages_, &o_window_, &lse_pages_, &lse_window_})
      n += int64_t(g->bytes());
    for (const auto& kv : shapes_) n += int64_t(kv.second.table.bytes() + kv.second.window_table.bytes());
    return n;
  }

 private:
  struct Shape {
    LayerSpec spec;
    HsaPlan plan;
    DecodePlan window;  // the dense window decode when the window is not fused
    GrowBuffer table, window_table;
  };

  // The window runs as its own dense decode (merged afterwards) when it is not fused.
  bool split_window() const { return !cfg_.hsa.fuse_window && cfg_.hsa.window_size > 0; }

  HsaOptions options(const LayerSpec& l) const {
    HsaOptions o;
    o.num_qo_heads = l.num_qo_heads;
    o.topk = cfg_.hsa.topk, o.strategy = cfg_.hsa.strategy;
    o.window_size = cfg_.hsa.window_size, o.fuse_window = cfg_.hsa.fuse_window;
    o.q_dtype = o.o_dtype = cfg_.act_dtype;
    o.sm_scale = l.sm_scale, o.logits_soft_cap = l.logits_soft_cap;
    o.max_splits = cfg_.max_splits;
    o.validate = false;  // the paged step validated the metadata
    return o;
  }

  // The last window_size keys: positions >= kv_len - 1 - (window_size - 1).
  DecodeOptions window_options(const LayerSpec& l) const {
    DecodeOptions o = paged_->decode_options(l);
    o.window_left = cfg_.hsa.window_size - 1;
    return o;
  }

  cl_command_queue queue() const { return backend_queue(ctx_, cfg_); }

  Context ctx_;
  const KVPool& pool_;
  BackendConfig cfg_;
  std::set<int> hsa_;
  std::unique_ptr<PagedBackend> paged_;
  std::map<std::string, Shape> shapes_;
  std::map<int, std::string> key_of_;
  GrowBuffer workspace_, selected_, o_pages_, o_window_, lse_pages_, lse_window_;
  bool decode_ = false, ready_ = false;
};

}  // namespace

std::unique_ptr<AttentionBackend> make_hsa(const Context& ctx, const KVPool& pool, const BackendConfig& cfg) {
  return std::make_unique<HsaBackend>(ctx, pool, cfg);
}

}  // namespace clattn::engine
