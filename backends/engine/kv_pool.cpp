// KVPool: per-layer paged K/V, MLA latent caches and linear state pools, allocated here or
// supplied by the engine (set_layer), plus the state fork/zero helpers.
#include <string>
#include <utility>

#include "clattn/backend.hpp"
#include "runtime/context_impl.hpp"
#include "runtime/error.hpp"

namespace clattn {

namespace {

void check_config(const KVPoolConfig& cfg, const std::vector<LayerSpec>& layers) {
  bool paged = false, linear = false;
  for (size_t i = 0; i < layers.size(); ++i) {
    const auto& l = layers[i];
    if (l.layer_id != int(i))
      rt::invalid("KVPool: layers[" + std::to_string(i) + "].layer_id = " + std::to_string(l.layer_id) +
                  ", must equal its index (layer ids are 0 .. num_layers-1)");
    (l.kind == LayerKind::Linear ? linear : paged) = true;
  }
  if (paged && (cfg.num_pages <= 0 || cfg.page_size <= 0))
    rt::invalid("KVPool: num_pages and page_size must be > 0 for full-attention/MLA layers (got " +
                std::to_string(cfg.num_pages) + ", " + std::to_string(cfg.page_size) + ")");
  if (linear && cfg.num_state_slots <= 0)
    rt::invalid("KVPool: num_state_slots must be > 0 for linear layers");
  if (cfg.state_dtype != DType::F32 && cfg.state_dtype != DType::F16 && cfg.state_dtype != DType::BF16)
    rt::invalid(std::string("KVPool: state_dtype ") + dtype_name(cfg.state_dtype) + " is not f32/f16/bf16");
}

KVPool::Layer describe(const KVPoolConfig& cfg, const LayerSpec& l) {
  KVPool::Layer out;
  out.kind = l.kind;
  if (l.kind == LayerKind::MHA) {
    out.kv.num_pages = cfg.num_pages;
    out.kv.page_size = cfg.page_size;
    out.kv.num_kv_heads = l.num_kv_heads;
    out.kv.head_dim = l.head_dim;
    out.kv.layout = cfg.layout;
    out.kv.dtype = cfg.kv_dtype;
  } else if (l.kind == LayerKind::MLA) {
    out.latent.num_pages = cfg.num_pages;
    out.latent.page_size = cfg.page_size;
    out.latent.dtype = cfg.kv_dtype;
  } else {
    out.linear = l.linear;
    out.state.num_slots = cfg.num_state_slots;
    out.state.dtype = cfg.state_dtype;
  }
  return out;
}

int64_t slot_bytes(const KVPool::Layer& l) {
  return int64_t(l.linear.num_v_heads) * l.linear.head_dim_k * l.linear.head_dim_v * int64_t(dtype_size(l.state.dtype));
}

}  // namespace

KVPool::KVPool(const KVPoolConfig& cfg, const std::vector<LayerSpec>& layers) : cfg_(cfg) {
  check_config(cfg, layers);
  for (const auto& l : layers) layers_.push_back(describe(cfg, l));
}

KVPool::KVPool(const Context& ctx, const KVPoolConfig& cfg, const std::vector<LayerSpec>& layers)
    : KVPool(cfg, layers) {
  auto alloc = [&](int64_t bytes, const std::string& what) {
    cl_int err = CL_SUCCESS;
    cl_mem m = rt::create_buffer(ctx.cl_ctx(), CL_MEM_READ_WRITE, size_t(bytes), &err);
    if (err == CL_MEM_OBJECT_ALLOCATION_FAILURE || err == CL_OUT_OF_RESOURCES || err == CL_INVALID_BUFFER_SIZE)
      throw Error(Status::OutOfMemory, "KVPool: cannot allocate " + what + " (" + std::to_string(bytes) + " bytes)", err);
    rt::check_cl(err, "clCreateBuffer", "KVPool " + what);
    owned_.push_back(m);
    return m;
  };
  try {
    for (auto& l : layers_) {
      const std::string id = "layer " + std::to_string(&l - layers_.data());
      if (l.kind == LayerKind::MHA) {
        l.k = alloc(l.kv.required_bytes(), id + " K cache");
        l.v = alloc(l.kv.required_bytes(), id + " V cache");
      } else if (l.kind == LayerKind::MLA) {
        l.k = alloc(l.latent.ckv_required_bytes(), id + " ckv cache");
        l.v = alloc(l.latent.kpe_required_bytes(), id + " kpe cache");
      } else {
        l.state.state = alloc(slot_bytes(l) * l.state.num_slots, id + " state pool");
      }
    }
  } catch (...) {
    for (cl_mem m : owned_) clReleaseMemObject(m);
    owned_.clear();
    throw;
  }
}

KVPool::~KVPool() {
  for (cl_mem m : owned_) clReleaseMemObject(m);
}

KVPool::KVPool(KVPool&& o) noexcept : cfg_(o.cfg_), layers_(std::move(o.layers_)), owned_(std::move(o.owned_)) {
  o.owned_.clear();
}

KVPool& KVPool::operator=(KVPool&& o) noexcept {
  if (this != &o) {
    for (cl_mem m : owned_) clReleaseMemObject(m);
    cfg_ = o.cfg_;
    layers_ = std::move(o.layers_);
    owned_ = std::move(o.owned_);
    o.owned_.clear();
  }
  return *this;
}

const KVPool::Layer& KVPool::layer(int layer_id) const {
  if (layer_id < 0 || layer_id >= int(layers_.size()))
    rt::invalid("KVPool: layer_id " + std::to_string(layer_id) + " out of range [0, " +
                std::to_string(layers_.size()) + ")");
  return layers_[size_t(layer_id)];
}

void KVPool::set_layer(int layer_id, const Layer& l) {
  const Layer& cur = layer(layer_id);
  if (l.kind != cur.kind)
    rt::invalid("KVPool::set_layer: layer " + std::to_string(layer_id) + " is " + layer_kind_name(cur.kind) +
                ", not " + layer_kind_name(l.kind));
  layers_[size_t(layer_id)] = l;
}

int64_t KVPool::bytes_per_page() const {
  int64_t n = 0;
  for (const auto& l : layers_) {
    if (l.kind == LayerKind::MHA)
      n += 2 * l.kv.page_stride() * int64_t(dtype_size(l.kv.dtype));
    else if (l.kind == LayerKind::MLA)
      n += (l.latent.ckv_page_stride() + l.latent.kpe_page_stride()) * int64_t(dtype_size(l.latent.dtype));
  }
  return n;
}

int64_t KVPool::bytes_per_state_slot() const {
  int64_t n = 0;
  for (const auto& l : layers_)
    if (l.kind == LayerKind::Linear) n += slot_bytes(l);
  return n;
}

int64_t KVPool::bytes_allocated() const {
  return bytes_per_page() * cfg_.num_pages + bytes_per_state_slot() * cfg_.num_state_slots;
}

void KVPool::zero_states(const Context& ctx, const int32_t* slots, int n) const {
  for (const auto& l : layers_)
    if (l.kind == LayerKind::Linear) linear_zero_slots(ctx, l.linear, l.state, slots, n);
}

void KVPool::copy_state(const Context& ctx, int src_slot, int dst_slot) const {
  for (const auto& l : layers_)
    if (l.kind == LayerKind::Linear) linear_copy_slot(ctx, l.linear, l.state, src_slot, dst_slot);
}

}  // namespace clattn
