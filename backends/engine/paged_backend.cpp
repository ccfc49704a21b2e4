// "paged" / "paged_table": MHA, GQA and MQA layers on the paged KV cache. One metadata
// build and one upload per step serve every layer; one plan per distinct layer shape.
#include "backends/engine/paged_backend.hpp"

#include <algorithm>
#include <string>

#include "backends/engine/backends.hpp"
#include "backends/ops/op_util.hpp"
#include "clattn/append_kv.hpp"
#include "clattn/rope.hpp"
#include "runtime/error.hpp"

namespace clattn::engine {

PagedBackend::PagedBackend(const Context& ctx, const KVPool& pool, const BackendConfig& cfg, bool page_table,
                           const std::string& name, const std::set<int>& decode_elsewhere)
    : ctx_(ctx), pool_(pool), cfg_(cfg), table_(page_table), name_(name) {
  for (const auto& l : cfg.layers) {
    const std::string tag = layer_tag(name_, l);
    if (l.kind != LayerKind::MHA)
      rt::invalid(tag + ": this backend serves MHA/GQA/MQA layers; use \"hybrid\" to mix layer kinds");
    check_pool_layer(pool, l, name_);
    if (l.num_qo_heads <= 0 || l.num_kv_heads <= 0 || l.num_qo_heads % l.num_kv_heads != 0)
      rt::invalid(tag + ": num_qo_heads " + std::to_string(l.num_qo_heads) + " must be a positive multiple of num_kv_heads " +
                  std::to_string(l.num_kv_heads));
    if (l.num_qo_heads / l.num_kv_heads > 16)
      rt::invalid(tag + ": GQA group " + std::to_string(l.num_qo_heads / l.num_kv_heads) + " > 16 is not supported");
    if (!ops::supported_head_dim(l.head_dim))
      rt::invalid(tag + ": head_dim " + std::to_string(l.head_dim) + " is not one of 64 80 96 128 192 256");
    if (l.head_dim_v != 0 && l.head_dim_v != l.head_dim)
      rt::invalid(tag + ": head_dim_v must equal head_dim for MHA layers");
    const auto& kv = pool.layer(l.layer_id).kv;
    if (kv.num_kv_heads != l.num_kv_heads || kv.head_dim != l.head_dim)
      rt::invalid(tag + ": the KVPool layer has Hkv " + std::to_string(kv.num_kv_heads) + ", D " +
                  std::to_string(kv.head_dim) + " but the spec says " + std::to_string(l.num_kv_heads) + ", " +
                  std::to_string(l.head_dim));
    if (l.apply_rope) {
      ops::check_rope_config(l.rope, l.head_dim, tag + ": rope");
      rope_ = true;
    }
    const std::string key = shape_key(l, kv);
    key_of_[l.layer_id] = key;
    if (!shapes_.count(key)) shapes_[key].spec = l;
    shapes_[key].decode_here |= !decode_elsewhere.count(l.layer_id);
  }
  for (auto& [key, s] : shapes_) {
    try {
      warm(s);
    } catch (const Error& e) {
      rethrow_for_layer(e, layer_tag(name_, s.spec), ctx);
    }
  }
  if (cfg.act_dtype != DType::F32 && cfg.act_dtype != DType::F16 && cfg.act_dtype != DType::BF16)
    rt::invalid(name_ + ": act_dtype " + dtype_name(cfg.act_dtype) + " is not f32/f16/bf16");
}

void PagedBackend::init_forward_metadata(const ForwardBatch& fb) {
  if (capturing()) rt::invalid(name_ + ": init_forward_metadata during a capture (end_capture first)");
  ready_ = false;
  step_.load(ctx_, queue(), fb, name_, CacheShape{pool_.config().num_pages, pool_.config().page_size}, table_, rope_);
  const StepBatch& sb = step_.batch();
  std::size_t ws = 0;
  for (auto& [key, s] : shapes_) {
    const PagedKV& cache = pool_.layer(s.spec.layer_id).kv;
    if (!sb.extend) {
      if (!s.decode_here) continue;
      DecodeOptions o = decode_options(s.spec);
      o.plan_buffer = s.table.plan_buffer();
      s.decode = table_ ? decode_plan(ctx_, step_.table(), cache, o, queue()) : decode_plan(ctx_, step_.csr(), cache, o, queue());
      s.table.reserve(ctx_, size_t(s.decode.table_bytes), "decode plan table");  // next step fits
      ws = std::max(ws, size_t(s.decode.workspace_bytes));
    } else {
      ExtendOptions o = extend_options(s.spec);
      o.plan_buffer = s.table.plan_buffer();
      o.mask_indptr = sb.mask_indptr;
      s.extend = table_ ? extend_plan(ctx_, step_.table(), cache, o, queue()) : extend_plan(ctx_, step_.csr(), cache, o, queue());
      s.table.reserve(ctx_, size_t(s.extend.table_bytes), "extend plan table");
      ws = std::max(ws, size_t(s.extend.workspace_bytes));
    }
  }
  step_.reserve_workspace(ctx_, ws);
  ready_ = true;
}

void PagedBackend::save_kv(int layer_id, const LayerIO& io, bool save_kv_cache) {
  if (!ready_) rt::invalid(name_ + ": forward before a successful init_forward_metadata");
  const LayerSpec& spec = find_layer(cfg_.layers, layer_id, name_);
  const StepBatch& sb = step_.batch();
  if (sb.num_tokens == 0) return;
  append_rows(spec, io, save_kv_cache, {step_.slots(), step_.slot_dtype(), sb.num_tokens, step_.positions()});
}

void PagedBackend::append_rows(const LayerSpec& spec, const LayerIO& io, bool save_kv_cache, const NewRows& rows) {
  if (!save_kv_cache && !spec.apply_rope) return;
  const Enqueue e{queue(), 0, nullptr, nullptr};
  RopePositions pos{rows.positions, DType::I32, nullptr};
  if (!save_kv_cache) {  // RoPE on q alone
    RopeArgs r;
    r.q = r.q_out = io.q, r.dtype = cfg_.act_dtype, r.num_tokens = rows.num_tokens;
    r.num_qo_heads = spec.num_qo_heads, r.head_dim = spec.head_dim, r.pos = pos, r.rope = spec.rope;
    apply_rope(ctx_, r, e);
    return;
  }
  if (!io.k || !io.v) rt::invalid(layer_tag(name_, spec) + ": LayerIO.k and LayerIO.v are required with save_kv_cache");
  const KVPool::Layer& L = pool_.layer(spec.layer_id);
  AppendKVArgs a;
  a.k = io.k, a.v = io.v, a.src_dtype = cfg_.act_dtype;
  a.slot_mapping = rows.slots, a.slot_dtype = rows.slot_dtype, a.num_tokens = rows.num_tokens;
  a.k_cache = L.k, a.v_cache = L.v, a.cache = L.kv;
  a.k_scale = pool_.config().k_scale, a.v_scale = pool_.config().v_scale;
  a.k_scale_cache = L.k_scale_cache, a.v_scale_cache = L.v_scale_cache;
  if (!spec.apply_rope) return append_kv(ctx_, a, e);
  RopeAppendKVArgs r;
  r.append = a, r.q = r.q_out = io.q, r.num_qo_heads = spec.num_qo_heads, r.q_out_dtype = cfg_.act_dtype;
  r.pos = pos, r.rope = spec.rope;
  rope_append_kv(ctx_, r, e);
}

void PagedBackend::forward(int layer_id, const LayerIO& io, bool save_kv_cache) {
  if (capturing()) return capture_forward(layer_id, io, save_kv_cache);
  if (!ready_) rt::invalid(name_ + ": forward before a successful init_forward_metadata");
  const LayerSpec& spec = find_layer(cfg_.layers, layer_id, name_);
  const std::string tag = layer_tag(name_, spec);
  if (!io.q || !io.o) rt::invalid(tag + ": LayerIO.q and LayerIO.o are required");
  const KVPool::Layer& L = pool_.layer(layer_id);
  Shape& s = shapes_.at(key_of_.at(layer_id));
  const StepBatch& sb = step_.batch();
  if (!sb.extend && !s.decode_here) rt::invalid(tag + ": its decode runs on another backend");
  const Enqueue e{queue(), 0, nullptr, nullptr};
  save_kv(layer_id, io, save_kv_cache);
  if (!sb.extend) {
    decode_run(ctx_, s.decode, decode_buffers(spec, io, step_.page_ids(), step_.workspace()), e);
  } else {
    ExtendBuffers b;
    b.q = io.q, b.k = L.k, b.v = L.v, b.page_ids = step_.page_ids(), b.o = io.o, b.lse = io.lse, b.sinks = spec.sinks;
    b.custom_mask = sb.custom_mask, b.workspace = step_.workspace();
    b.k_scale = pool_.config().k_scale, b.v_scale = pool_.config().v_scale;
    b.k_scale_cache = L.k_scale_cache, b.v_scale_cache = L.v_scale_cache;
    extend_run(ctx_, s.extend, b, e);
  }
}

DecodeBuffers PagedBackend::decode_buffers(const LayerSpec& spec, const LayerIO& io, cl_mem page_ids,
                                           cl_mem workspace) const {
  const KVPool::Layer& L = pool_.layer(spec.layer_id);
  DecodeBuffers b;
  b.q = io.q, b.k_cache = L.k, b.v_cache = L.v, b.page_ids = page_ids, b.o = io.o, b.lse = io.lse;
  b.workspace = workspace, b.sinks = spec.sinks;
  b.k_scale = pool_.config().k_scale, b.v_scale = pool_.config().v_scale;
  b.k_scale_cache = L.k_scale_cache, b.v_scale_cache = L.v_scale_cache;
  return b;
}

int64_t PagedBackend::scratch_bytes() const {
  int64_t n = step_.bytes();
  for (const auto& kv : shapes_) n += int64_t(kv.second.table.bytes());
  return n + replay_bytes();
}

DecodeOptions PagedBackend::decode_options(const LayerSpec& l) const {
  DecodeOptions o;
  o.num_qo_heads = l.num_qo_heads;
  o.q_dtype = o.o_dtype = cfg_.act_dtype;
  o.sm_scale = l.sm_scale, o.logits_soft_cap = l.logits_soft_cap, o.window_left = l.window_left;
  // With replay state every decode step splits as the replayed ones do (same bits).
  o.deterministic = cfg_.deterministic || replay_ != nullptr, o.max_splits = cfg_.max_splits;
  o.split_tokens = cfg_.split_tokens;
  o.validate = false;  // validated once per step in init_forward_metadata
  return o;
}

ExtendOptions PagedBackend::extend_options(const LayerSpec& l) const {
  ExtendOptions o;
  o.num_qo_heads = l.num_qo_heads;
  o.q_dtype = o.o_dtype = cfg_.act_dtype;
  o.sm_scale = l.sm_scale, o.logits_soft_cap = l.logits_soft_cap, o.window_left = l.window_left;
  o.causal = true;
  o.validate = false;
  return o;
}

// Builds the shape's kernels now (compile at load) with a one-token batch.
void PagedBackend::warm(Shape& s) {
  const PagedKV& cache = pool_.layer(s.spec.layer_id).kv;
  if (s.decode_here) s.decode = decode_plan(ctx_, one_token_csr(cache.page_size, false), cache, decode_options(s.spec), queue());
  s.extend = extend_plan(ctx_, one_token_csr(cache.page_size, true), cache, extend_options(s.spec), queue());
}

std::string shape_key(const LayerSpec& l, const PagedKV& kv) {
  return std::to_string(l.num_qo_heads) + "/" + std::to_string(l.num_kv_heads) + "/" + std::to_string(l.head_dim) +
         "/w" + std::to_string(l.window_left) + "/s" + std::to_string(l.sm_scale) + "/c" +
         std::to_string(l.logits_soft_cap) + "/" + std::to_string(kv.page_stride()) + "," +
         std::to_string(kv.token_stride()) + "," + std::to_string(kv.head_stride()) + "/" + dtype_name(kv.dtype) + "," +
         dtype_name(kv.scale_dtype) + "," + std::to_string(kv.scale_page_stride()) + "," +
         std::to_string(kv.scale_token_stride()) + "," + std::to_string(kv.scale_head_stride()) + "/g" +
         std::to_string(kv.quant_group);
}

std::unique_ptr<AttentionBackend> make_paged(const Context& ctx, const KVPool& pool, const BackendConfig& cfg,
                                             bool page_table) {
  return std::make_unique<PagedBackend>(ctx, pool, cfg, page_table, page_table ? "paged_table" : "paged");
}

}  // namespace clattn::engine
