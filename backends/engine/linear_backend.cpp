// "linear": Gated DeltaNet and gated linear attention layers on pooled recurrent states.
// Decode runs the recurrent kernels; extend/mixed runs the chunked varlen prefill from
// each request's slot (zeroed first for requests without a prefix).
#include <set>
#include <string>

#include "backends/engine/backends.hpp"
#include "backends/engine/engine_common.hpp"
#include "runtime/error.hpp"

namespace clattn::engine {
namespace {

class LinearBackend final : public AttentionBackend {
 public:
  LinearBackend(const Context& ctx, const KVPool& pool, const BackendConfig& cfg) : ctx_(ctx), pool_(pool), cfg_(cfg) {
    for (const auto& l : cfg.layers) {
      const std::string tag = layer_tag("linear", l);
      if (l.kind != LayerKind::Linear)
        rt::invalid(tag + ": this backend serves linear-attention layers; use \"hybrid\" to mix kinds");
      check_pool_layer(pool, l, "linear");
      const LinearConfig c = config(l);
      const auto& L = pool.layer(l.layer_id);
      if (L.linear.num_v_heads != c.num_v_heads || L.linear.head_dim_k != c.head_dim_k ||
          L.linear.head_dim_v != c.head_dim_v)
        rt::invalid(tag + ": the KVPool layer's state geometry differs from the spec's");
      // Zero slots is the cheapest call that runs every config check (heads, dims, dtype).
      try {
        linear_zero_slots(ctx, c, L.state, nullptr, 0, q());
      } catch (const Error& e) {
        rethrow_for_layer(e, tag, ctx);
      }
    }
  }

  std::string name() const override { return "linear"; }

  void init_forward_metadata(const ForwardBatch& fb) override {
    ready_ = false;
    slots_dev_.wait();
    cu_dev_.wait();
    step_.load(fb, "linear", nullptr, false);
    const int B = step_.batch_size;
    const int32_t* src = fb.state_slots ? fb.state_slots : fb.req_pool_indices;
    slots_.assign(src, src + B);
    const int num_slots = pool_.config().num_state_slots;
    seen_.clear();
    fresh_.clear();
    for (int i = 0; i < B; ++i) {
      const int s = slots_[size_t(i)];
      const char* field = fb.state_slots ? "state_slots" : "req_pool_indices";
      if (s < -1 || s >= num_slots)
        rt::invalid("linear: ForwardBatch." + std::string(field) + "[" + std::to_string(i) + "] = " +
                    std::to_string(s) + " is not a state slot in [0, " + std::to_string(num_slots) + ") or -1");
      if (s >= 0 && !seen_.insert(s).second)
        rt::invalid("linear: ForwardBatch." + std::string(field) + "[" + std::to_string(i) + "] = " +
                    std::to_string(s) + " repeats a slot of this batch");
      if (step_.extend && s >= 0 && step_.prefix_lens[size_t(i)] == 0) fresh_.push_back(s);
    }
    slots_dev_.upload(ctx_, q(), slots_.data(), slots_.size() * 4, "linear: state slots");
    if (step_.extend) cu_dev_.upload(ctx_, q(), step_.qo_indptr.data(), step_.qo_indptr.size() * 4, "linear: cu_seqlens");
    ready_ = true;
  }

  void forward(int layer_id, const LayerIO& io, bool /*save_kv_cache*/) override {
    if (!ready_) rt::invalid("linear: forward before a successful init_forward_metadata");
    const LayerSpec& spec = find_layer(cfg_.layers, layer_id, "linear");
    const std::string tag = layer_tag("linear", spec);
    if (!io.q || !io.k || !io.v || !io.g || !io.o) rt::invalid(tag + ": LayerIO.q, k, v, g and o are required");
    if (spec.linear_kind == LinearKind::GDN && !io.beta) rt::invalid(tag + ": LayerIO.beta is required (Gated DeltaNet)");
    const LinearConfig c = config(spec);
    const LinearStatePool& pool = pool_.layer(layer_id).state;
    const LinearTensors t{io.q, io.k, io.v, io.g, io.beta, io.o};
    LinearBatch b;
    b.batch_size = step_.batch_size;
    b.state_indices = slots_.data();
    b.state_indices_dev = slots_dev_.get();
    const bool gdn = spec.linear_kind == LinearKind::GDN;
    if (!step_.extend) {
      gdn ? gdn_decode(ctx_, c, t, pool, b, q()) : gla_decode(ctx_, c, t, pool, b, q());
      return;
    }
    if (!fresh_.empty()) linear_zero_slots(ctx_, c, pool, fresh_.data(), int(fresh_.size()), q());
    b.cu_seqlens = step_.qo_indptr.data();
    b.cu_seqlens_dev = cu_dev_.get();
    b.num_tokens = int(step_.num_tokens);
    gdn ? gdn_prefill(ctx_, c, t, pool, b, q()) : gla_prefill(ctx_, c, t, pool, b, q());
  }

  int64_t scratch_bytes() const override { return int64_t(slots_dev_.bytes() + cu_dev_.bytes()); }

 private:
  LinearConfig config(const LayerSpec& l) const {
    LinearConfig c = l.linear;
    c.dtype = cfg_.act_dtype;
    return c;
  }
  cl_command_queue q() const { return backend_queue(ctx_, cfg_); }

  Context ctx_;
  const KVPool& pool_;
  BackendConfig cfg_;
  StepBatch step_;
  std::vector<int32_t> slots_, fresh_;
  std::set<int> seen_;
  GrowBuffer slots_dev_, cu_dev_;
  bool ready_ = false;
};

}  // namespace

std::unique_ptr<AttentionBackend> make_linear(const Context& ctx, const KVPool& pool, const BackendConfig& cfg) {
  return std::make_unique<LinearBackend>(ctx, pool, cfg);
}

}  // namespace clattn::engine
