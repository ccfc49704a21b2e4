// KVPool: per-layer paged K/V, MLA latent caches and linear state pools, allocated here or
// supplied by the engine (set_layer), plus the state fork/zero helpers.
#include <string>
#include <utility>

#include "clattn/backend.hpp"
#include "runtime/buffer.hpp"
#include "runtime/checked.hpp"
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
  if (cfg.kv_dtype == DType::I8 || cfg.kv_dtype == DType::I4) {
    const std::string q = dtype_name(cfg.kv_dtype);
    if (cfg.kv_dtype == DType::I4)  // int8 latents: MlaCache's int8 form, with its scale cache
      for (const auto& l : layers)
        if (l.kind == LayerKind::MLA)
          throw Error(Status::Unsupported, "KVPool: kv_dtype " + q + " with MLA layer " + std::to_string(l.layer_id) +
                                               ": the MLA latent cache has no " + q + " form (docs/kv_formats.md)");
    if (cfg.scale_dtype != DType::F32 && cfg.scale_dtype != DType::F16)
      rt::invalid(std::string("KVPool: scale_dtype ") + dtype_name(cfg.scale_dtype) + " is not f32/f16 (" + q +
                  " scale caches)");
    if (cfg.k_scale != 1.0f || cfg.v_scale != 1.0f)
      rt::invalid("KVPool: k_scale / v_scale (" + std::to_string(cfg.k_scale) + ", " + std::to_string(cfg.v_scale) +
                  ") must be 1 with kv_dtype " + q + ": its rows carry their own scales");
  }
  if (cfg.kv_dtype == DType::I4) {
    const int g = cfg.quant_group;
    for (const auto& l : layers)
      if (l.kind == LayerKind::MHA && ((g != 32 && g != 64 && g != 128) || l.head_dim <= 0 || l.head_dim % g))
        rt::invalid("KVPool: quant_group = " + std::to_string(g) + " with kv_dtype int4: must be 32, 64 or 128 and " +
                    "divide the head_dim of every MHA layer (layer " + std::to_string(l.layer_id) + ": head_dim " +
                    std::to_string(l.head_dim) + ")");
  }
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
    out.kv.scale_dtype = cfg.scale_dtype;
    if (cfg.kv_dtype == DType::I4) out.kv.quant_group = cfg.quant_group;
  } else if (l.kind == LayerKind::MLA) {
    out.latent.num_pages = cfg.num_pages;
    out.latent.page_size = cfg.page_size;
    out.latent.dtype = cfg.kv_dtype;
    out.latent.scale_dtype = cfg.scale_dtype;
  } else {
    out.linear = l.linear;
    out.state.num_slots = cfg.num_state_slots;
    out.state.dtype = cfg.state_dtype;
  }
  return out;
}

int64_t slot_bytes(const KVPool::Layer& l) {
  return rt::checked::product({l.linear.num_v_heads, l.linear.head_dim_k, l.linear.head_dim_v,
                               int64_t(dtype_size(l.state.dtype))},
                              "KVPool: linear state slot bytes (num_v_heads * head_dim_k * head_dim_v * dtype size)");
}

// One buffer the pool allocates: its size (checked) and where its handle goes.
struct Planned {
  int64_t bytes;
  std::string what;
  cl_mem* slot;
};

std::string geometry(const KVPoolConfig& cfg) {
  return "num_pages = " + std::to_string(cfg.num_pages) + ", page_size = " + std::to_string(cfg.page_size) +
         ", kv_dtype = " + dtype_name(cfg.kv_dtype) + ", num_state_slots = " + std::to_string(cfg.num_state_slots);
}

std::vector<Planned> plan_buffers(const KVPoolConfig& cfg, std::vector<KVPool::Layer>& layers) {
  std::vector<Planned> out;
  for (auto& l : layers) {
    const std::string id = "KVPool: layer " + std::to_string(&l - layers.data());
    if (l.kind == LayerKind::MHA) {
      out.push_back({l.kv.required_bytes(), id + " K cache", &l.k});
      out.push_back({l.kv.required_bytes(), id + " V cache", &l.v});
      if (const int64_t sb = l.kv.scale_required_bytes(); sb > 0) {  // a format with scale caches
        out.push_back({sb, id + " K scale cache", &l.k_scale_cache});
        out.push_back({sb, id + " V scale cache", &l.v_scale_cache});
      }
    } else if (l.kind == LayerKind::MLA) {
      out.push_back({l.latent.ckv_required_bytes(), id + " ckv cache", &l.k});
      out.push_back({l.latent.kpe_required_bytes(), id + " kpe cache", &l.v});
      if (const int64_t sb = l.latent.scale_required_bytes(); sb > 0)  // int8: the (ckv, kpe) scale pairs
        out.push_back({sb, id + " latent scale cache", &l.k_scale_cache});
    } else {
      const auto& g = l.linear;
      if (g.num_v_heads <= 0 || g.head_dim_k <= 0 || g.head_dim_v <= 0)
        rt::invalid(id + ": linear num_v_heads, head_dim_k and head_dim_v must be > 0 (got " +
                    std::to_string(g.num_v_heads) + ", " + std::to_string(g.head_dim_k) + ", " +
                    std::to_string(g.head_dim_v) + ")");
      out.push_back({rt::checked::mul(slot_bytes(l), l.state.num_slots, "KVPool: linear state pool bytes"),
                     id + " state pool", &l.state.state});
    }
    if (out.back().bytes <= 0)
      rt::invalid(out.back().what + " has no size (check the layer's heads and head dims; " + geometry(cfg) + ")");
  }
  return out;
}

// Every buffer within CL_DEVICE_MAX_MEM_ALLOC_SIZE and their sum within
// CL_DEVICE_GLOBAL_MEM_SIZE, before anything is allocated: lazy platforms would accept more.
void check_fits(const DeviceProfile& p, const KVPoolConfig& cfg, const std::vector<Planned>& bufs) {
  int64_t total = 0;
  for (const auto& b : bufs) total = rt::checked::add(total, b.bytes, "KVPool: total bytes");
  if (p.global_mem_bytes && uint64_t(total) > p.global_mem_bytes)
    throw Error(Status::OutOfMemory, "KVPool: the pool needs " + std::to_string(total) + " bytes (" + geometry(cfg) +
                                         "), more than the device's global memory (CL_DEVICE_GLOBAL_MEM_SIZE = " +
                                         std::to_string(p.global_mem_bytes) + " bytes); lower num_pages or num_state_slots");
  for (const auto& b : bufs)
    rt::check_alloc_size(p, rt::checked::to_size(b.bytes, "KVPool: buffer bytes"), b.what + " (" + geometry(cfg) + ")");
}

}  // namespace

KVPool::KVPool(const KVPoolConfig& cfg, const std::vector<LayerSpec>& layers) : cfg_(cfg) {
  check_config(cfg, layers);
  for (const auto& l : layers) layers_.push_back(describe(cfg, l));
}

KVPool::KVPool(const Context& ctx, const KVPoolConfig& cfg, const std::vector<LayerSpec>& layers)
    : KVPool(cfg, layers) {
  const auto bufs = plan_buffers(cfg_, layers_);
  check_fits(ctx.profile(), cfg_, bufs);
  std::vector<rt::NewBuffer> fresh;
  try {
    for (const auto& b : bufs) {
      const size_t bytes = size_t(b.bytes);
      cl_int err = CL_SUCCESS;
      cl_mem m = rt::create_buffer(ctx.cl_ctx(), CL_MEM_READ_WRITE, bytes, &err);
      if (err == CL_MEM_OBJECT_ALLOCATION_FAILURE || err == CL_OUT_OF_RESOURCES || err == CL_INVALID_BUFFER_SIZE)
        throw Error(Status::OutOfMemory, b.what + ": cannot allocate " + std::to_string(bytes) + " bytes", err);
      rt::check_cl(err, "clCreateBuffer", b.what);
      owned_.push_back(m);
      *b.slot = m;
      fresh.push_back({m, bytes, b.what});
    }
    rt::zero_fill(ctx.cl_queue(), fresh);
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
  namespace ck = rt::checked;
  const char* what = "KVPool: bytes per page";
  int64_t n = 0;
  for (const auto& l : layers_) {
    if (l.kind == LayerKind::MHA) {
      // int4: two elements a byte (its page stride is even).
      const int64_t page_bytes = l.kv.dtype == DType::I4 ? l.kv.page_stride() / 2
                                                          : ck::mul(l.kv.page_stride(), int64_t(dtype_size(l.kv.dtype)), what);
      n = ck::add(n, ck::mul(2, page_bytes, what), what);
      if (l.kv.num_pages > 0)  // scale caches: the pool allocates them contiguous, a page's share each
        n = ck::add(n, ck::mul(2, l.kv.scale_required_bytes() / l.kv.num_pages, what), what);
    }
    else if (l.kind == LayerKind::MLA) {
      n = ck::add(n, ck::mul(ck::add(l.latent.ckv_page_stride(), l.latent.kpe_page_stride(), what),
                             int64_t(dtype_size(l.latent.dtype)), what), what);
      if (l.latent.num_pages > 0)  // int8: the scale-pair cache, a page's share
        n = ck::add(n, l.latent.scale_required_bytes() / l.latent.num_pages, what);
    }
  }
  return n;
}

int64_t KVPool::bytes_per_state_slot() const {
  int64_t n = 0;
  for (const auto& l : layers_)
    if (l.kind == LayerKind::Linear) n = rt::checked::add(n, slot_bytes(l), "KVPool: bytes per state slot");
  return n;
}

int64_t KVPool::bytes_allocated() const {
  namespace ck = rt::checked;
  const char* what = "KVPool: bytes allocated";
  return ck::add(ck::mul(bytes_per_page(), cfg_.num_pages, what), ck::mul(bytes_per_state_slot(), cfg_.num_state_slots, what),
                 what);
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
