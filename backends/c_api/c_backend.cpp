// C ABI: engine backends and the KV pool (clattn/backend.hpp).
#include <memory>
#include <string>

#include "backends/c_api/c_api_common.hpp"
#include "clattn/backend.hpp"

struct clattn_kv_pool_s {
  clattn::KVPool pool;
};
struct clattn_backend_s {
  std::unique_ptr<clattn::AttentionBackend> backend;
};

namespace {

using clattn::capi::guard;
using clattn::capi::invalid;
using clattn::capi::need;

std::vector<clattn::LayerSpec> to_cpp(const clattn_layer_spec* layers, int n) {
  if (n < 0) invalid("num_layers = " + std::to_string(n) + " is negative");
  if (n > 0) need(layers, "layers");
  std::vector<clattn::LayerSpec> out;
  for (int i = 0; i < n; ++i) {
    const clattn_layer_spec& c = layers[i];
    if (c.kind < 0 || c.kind > 2) invalid("layers[" + std::to_string(i) + "].kind = " + std::to_string(c.kind) + " is not 0..2");
    clattn::LayerSpec l;
    l.layer_id = c.layer_id;
    l.kind = static_cast<clattn::LayerKind>(c.kind);
    l.num_qo_heads = c.num_qo_heads, l.num_kv_heads = c.num_kv_heads;
    l.head_dim = c.head_dim, l.head_dim_v = c.head_dim_v;
    l.sm_scale = c.sm_scale, l.logits_soft_cap = c.logits_soft_cap, l.window_left = c.window_left;
    l.sinks = c.sinks;
    l.linear_kind = c.linear_kind == 1 ? clattn::LinearKind::GLA : clattn::LinearKind::GDN;
    l.linear = clattn::capi::to_cpp(&c.linear);
    out.push_back(l);
  }
  return out;
}

}  // namespace

extern "C" {

void clattn_layer_spec_init(clattn_layer_spec* l) {
  if (!l) return;
  *l = clattn_layer_spec{};
  l->window_left = -1;
  clattn_linear_config_init(&l->linear);
}

void clattn_kv_pool_config_init(clattn_kv_pool_config* c) {
  if (!c) return;
  const clattn::KVPoolConfig d;
  c->num_pages = d.num_pages, c->page_size = d.page_size;
  c->kv_dtype = int(d.kv_dtype), c->layout = int(d.layout);
  c->k_scale = d.k_scale, c->v_scale = d.v_scale;
  c->num_state_slots = d.num_state_slots, c->state_dtype = int(d.state_dtype);
  c->scale_dtype = int(d.scale_dtype);
  c->quant_group = d.quant_group;
}

clattn_status clattn_kv_pool_create(clattn_context ctx, const clattn_kv_pool_config* cfg, const clattn_layer_spec* layers,
                                    int num_layers, int allocate, clattn_kv_pool* out) {
  return guard([&] {
    need(out, "out");
    *out = nullptr;
    need(cfg, "cfg");
    clattn::KVPoolConfig pc;
    pc.num_pages = cfg->num_pages, pc.page_size = cfg->page_size;
    pc.kv_dtype = static_cast<clattn::DType>(cfg->kv_dtype);
    pc.layout = static_cast<clattn::KVLayout>(cfg->layout);
    pc.k_scale = cfg->k_scale, pc.v_scale = cfg->v_scale;
    pc.num_state_slots = cfg->num_state_slots;
    pc.state_dtype = static_cast<clattn::DType>(cfg->state_dtype);
    pc.scale_dtype = static_cast<clattn::DType>(cfg->scale_dtype);  // checked by the pool
    pc.quant_group = cfg->quant_group;                                 // int4: checked by the pool
    auto specs = to_cpp(layers, num_layers);
    auto p = std::make_unique<clattn_kv_pool_s>();
    p->pool = allocate ? clattn::KVPool(need(ctx, "ctx")->ctx, pc, specs) : clattn::KVPool(pc, specs);
    *out = p.release();
  });
}

clattn_status clattn_kv_pool_set_layer(clattn_kv_pool pool, int layer_id, cl_mem k, cl_mem v) {
  return guard([&] {
    need(pool, "pool");
    clattn::KVPool::Layer l = pool->pool.layer(layer_id);
    if (l.kind == clattn::LayerKind::Linear) {
      l.state.state = need(k, "k (the state pool)");
    } else {
      l.k = need(k, "k");
      l.v = need(v, "v");
    }
    pool->pool.set_layer(layer_id, l);
  });
}

clattn_status clattn_kv_pool_get_layer(clattn_kv_pool pool, int layer_id, cl_mem* k, cl_mem* v) {
  return guard([&] {
    const clattn::KVPool::Layer& l = need(pool, "pool")->pool.layer(layer_id);
    if (k) *k = l.kind == clattn::LayerKind::Linear ? l.state.state : l.k;
    if (v) *v = l.kind == clattn::LayerKind::Linear ? nullptr : l.v;
  });
}

clattn_status clattn_kv_pool_set_layer_scales(clattn_kv_pool pool, int layer_id, cl_mem k_scale_cache,
                                              cl_mem v_scale_cache) {
  return guard([&] {
    need(pool, "pool");
    clattn::KVPool::Layer l = pool->pool.layer(layer_id);
    if (l.kind == clattn::LayerKind::MLA && l.latent.scale_required_bytes() > 0) {  // int8 latent: one pair cache
      l.k_scale_cache = need(k_scale_cache, "k_scale_cache (the latent's scale cache)");
      if (v_scale_cache)
        invalid("v_scale_cache: MLA layer " + std::to_string(layer_id) +
                " has one scale cache (k_scale_cache, a (ckv, kpe) pair per token); pass NULL");
      pool->pool.set_layer(layer_id, l);
      return;
    }
    if (l.kind != clattn::LayerKind::MHA || l.kv.scale_required_bytes() == 0)
      invalid("layer " + std::to_string(layer_id) +
              " has no scale caches (only MHA layers of an int8 or int4 pool and MLA layers of an int8 pool)");
    l.k_scale_cache = need(k_scale_cache, "k_scale_cache");
    l.v_scale_cache = need(v_scale_cache, "v_scale_cache");
    pool->pool.set_layer(layer_id, l);
  });
}

clattn_status clattn_kv_pool_get_layer_scales(clattn_kv_pool pool, int layer_id, cl_mem* k_scale_cache,
                                              cl_mem* v_scale_cache) {
  return guard([&] {
    const clattn::KVPool::Layer& l = need(pool, "pool")->pool.layer(layer_id);
    if (k_scale_cache) *k_scale_cache = l.k_scale_cache;
    if (v_scale_cache) *v_scale_cache = l.v_scale_cache;
  });
}

clattn_status clattn_kv_pool_bytes(clattn_kv_pool pool, int64_t* allocated, int64_t* per_page, int64_t* per_state_slot) {
  return guard([&] {
    const clattn::KVPool& p = need(pool, "pool")->pool;
    if (allocated) *allocated = p.bytes_allocated();
    if (per_page) *per_page = p.bytes_per_page();
    if (per_state_slot) *per_state_slot = p.bytes_per_state_slot();
  });
}

clattn_status clattn_kv_pool_copy_state(clattn_context ctx, clattn_kv_pool pool, int src_slot, int dst_slot) {
  return guard([&] { need(pool, "pool")->pool.copy_state(need(ctx, "ctx")->ctx, src_slot, dst_slot); });
}

clattn_status clattn_kv_pool_zero_states(clattn_context ctx, clattn_kv_pool pool, const int32_t* slots, int n) {
  return guard([&] { need(pool, "pool")->pool.zero_states(need(ctx, "ctx")->ctx, slots, n); });
}

void clattn_kv_pool_release(clattn_kv_pool pool) { delete pool; }

void clattn_backend_config_init(clattn_backend_config* c) {
  if (!c) return;
  *c = clattn_backend_config{};
  c->act_dtype = int(clattn::DType::BF16);
  c->hsa_fuse_window = 1;
}

clattn_status clattn_backend_create(clattn_context ctx, const char* name, clattn_kv_pool pool,
                                    const clattn_layer_spec* layers, int num_layers, const clattn_backend_config* cfg,
                                    clattn_backend* out) {
  return guard([&] {
    need(out, "out");
    *out = nullptr;
    clattn::BackendConfig bc;
    bc.layers = to_cpp(layers, num_layers);
    if (cfg) {
      bc.act_dtype = static_cast<clattn::DType>(cfg->act_dtype);
      bc.deterministic = cfg->deterministic != 0;
      bc.max_splits = cfg->max_splits;
      bc.split_tokens = cfg->split_tokens;
      bc.queue = cfg->queue;
      if (cfg->prefill_backend) bc.prefill_backend = cfg->prefill_backend;
      if (cfg->decode_backend) bc.decode_backend = cfg->decode_backend;
      bc.hsa.topk = cfg->hsa_topk, bc.hsa.window_size = cfg->hsa_window_size;
      bc.hsa.strategy = static_cast<clattn::HsaStrategy>(cfg->hsa_strategy);  // checked by the backend
      bc.hsa.fuse_window = cfg->hsa_fuse_window != 0;
      if (cfg->num_hsa_layers < 0) invalid("cfg->num_hsa_layers = " + std::to_string(cfg->num_hsa_layers) + " is negative");
      if (cfg->num_hsa_layers > 0) bc.hsa.layers.assign(need(cfg->hsa_layers, "cfg->hsa_layers"),
                                                        cfg->hsa_layers + cfg->num_hsa_layers);
    }
    auto b = std::make_unique<clattn_backend_s>();
    b->backend = clattn::create_backend(need(name, "name"), need(ctx, "ctx")->ctx, need(pool, "pool")->pool, bc);
    *out = b.release();
  });
}

const char* clattn_backend_names(void) {
  static const std::string names = [] {
    std::string s;
    for (const auto& n : clattn::backend_names()) s += (s.empty() ? "" : ",") + n;
    return s;
  }();
  return names.c_str();
}

clattn_status clattn_backend_init_forward_metadata(clattn_backend b, const clattn_forward_batch* batch) {
  return guard([&] {
    need(b, "backend");
    need(batch, "batch");
    if (batch->mode < 0 || batch->mode > 2) invalid("batch.mode = " + std::to_string(batch->mode) + " is not 0..2");
    clattn::ForwardBatch fb;
    fb.mode = static_cast<clattn::ForwardMode>(batch->mode);
    fb.batch_size = batch->batch_size;
    fb.req_to_token = batch->req_to_token;
    fb.pool_size = batch->pool_size, fb.max_ctx = batch->max_ctx;
    fb.req_pool_indices = batch->req_pool_indices, fb.seq_lens = batch->seq_lens;
    fb.prefix_lens = batch->prefix_lens, fb.extend_lens = batch->extend_lens;
    fb.out_cache_loc = batch->out_cache_loc;
    fb.mask_indptr = batch->mask_indptr, fb.custom_mask = batch->custom_mask;
    fb.state_slots = batch->state_slots;
    b->backend->init_forward_metadata(fb);
  });
}

clattn_status clattn_backend_forward(clattn_backend b, int layer_id, const clattn_layer_io* io, int save_kv_cache) {
  return guard([&] {
    need(b, "backend");
    need(io, "io");
    clattn::LayerIO x;
    x.q = io->q, x.q_pe = io->q_pe, x.k = io->k, x.v = io->v, x.o = io->o;
    x.g = io->g, x.beta = io->beta, x.lse = io->lse;
    b->backend->forward(layer_id, x, save_kv_cache != 0);
  });
}

clattn_status clattn_backend_scratch_bytes(clattn_backend b, int64_t* out) {
  return guard([&] { *need(out, "out") = need(b, "backend")->backend->scratch_bytes(); });
}

void clattn_backend_release(clattn_backend b) { delete b; }

void clattn_replay_config_init(clattn_replay_config* c) {
  if (!c) return;
  *c = clattn_replay_config{};
  c->command_buffer = 1;
}

clattn_status clattn_backend_init_replay_state(clattn_backend b, const clattn_replay_config* cfg) {
  return guard([&] {
    need(b, "backend");
    need(cfg, "cfg");
    clattn::ReplayConfig rc;
    rc.max_bs = cfg->max_bs, rc.req_to_token = cfg->req_to_token, rc.pool_size = cfg->pool_size;
    rc.max_ctx = cfg->max_ctx, rc.command_buffer = cfg->command_buffer != 0;
    if (cfg->num_buckets < 0) invalid("cfg->num_buckets = " + std::to_string(cfg->num_buckets) + " is negative");
    if (cfg->num_buckets > 0) rc.buckets.assign(need(cfg->buckets, "cfg->buckets"), cfg->buckets + cfg->num_buckets);
    b->backend->init_replay_state(rc);
  });
}

clattn_status clattn_backend_begin_capture(clattn_backend b, int bucket) {
  return guard([&] { need(b, "backend")->backend->begin_capture(bucket); });
}

clattn_status clattn_backend_end_capture(clattn_backend b) {
  return guard([&] { need(b, "backend")->backend->end_capture(); });
}

clattn_status clattn_backend_replay_bucket(clattn_backend b, int bs, int* out) {
  return guard([&] { *need(out, "out") = need(b, "backend")->backend->replay_bucket(bs); });
}

clattn_status clattn_backend_replay(clattn_backend b, int bs, const int32_t* req_pool_indices, const int32_t* seq_lens) {
  return guard([&] { need(b, "backend")->backend->replay(bs, req_pool_indices, seq_lens); });
}

clattn_status clattn_backend_replay_inputs(clattn_backend b, cl_mem* req_pool_indices, cl_mem* seq_lens) {
  return guard([&] {
    const clattn::ReplayInputs in = need(b, "backend")->backend->replay_inputs();
    *need(req_pool_indices, "req_pool_indices") = in.req_pool_indices;
    *need(seq_lens, "seq_lens") = in.seq_lens;
  });
}

clattn_status clattn_backend_replay_info(clattn_backend b, int bucket, int* launches, int* command_buffer) {
  return guard([&] {
    need(b, "backend");
    need(launches, "launches");
    need(command_buffer, "command_buffer");
    for (const auto& i : b->backend->replay_buckets())
      if (i.batch_size == bucket) {
        *launches = i.launches, *command_buffer = i.command_buffer ? 1 : 0;
        return;
      }
    invalid("bucket " + std::to_string(bucket) + " is not a replay bucket of this backend");
  });
}

unsigned long long clattn_device_allocation_count(void) { return clattn::device_allocation_count(); }

}  // extern "C"
