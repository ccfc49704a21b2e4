// GrowBuffer, the step batch checks and small lookups shared by the engine backends.
#include "backends/engine/engine_common.hpp"

#include <string>

#include "runtime/context_impl.hpp"
#include "runtime/error.hpp"

namespace clattn {

int64_t ForwardBatch::num_tokens() const {
  if (mode == ForwardMode::Decode || !extend_lens) return batch_size;
  int64_t n = 0;
  for (int i = 0; i < batch_size; ++i) n += extend_lens[i];
  return n;
}

const char* layer_kind_name(LayerKind k) noexcept {
  switch (k) {
    case LayerKind::MHA: return "mha";
    case LayerKind::MLA: return "mla";
    case LayerKind::Linear: return "linear";
  }
  return "?";
}

const char* forward_mode_name(ForwardMode m) noexcept {
  switch (m) {
    case ForwardMode::Decode: return "decode";
    case ForwardMode::Extend: return "extend";
    case ForwardMode::Mixed: return "mixed";
  }
  return "?";
}

namespace engine {

GrowBuffer::~GrowBuffer() {
  wait();
  if (mem_) clReleaseMemObject(mem_);
}

bool GrowBuffer::reserve(const Context& ctx, std::size_t bytes, const char* what) {
  if (bytes <= bytes_ && mem_) return false;
  wait();
  const std::size_t grown = std::max<std::size_t>(2 * bytes, 256);
  cl_int err = CL_SUCCESS;
  cl_mem m = rt::create_buffer(ctx.cl_ctx(), CL_MEM_READ_WRITE, grown, &err);
  rt::check_cl(err, "clCreateBuffer", std::string(what) + " (" + std::to_string(grown) + " bytes)");
  // Commands already enqueued keep the old buffer alive (OpenCL defers the release).
  if (mem_) clReleaseMemObject(mem_);
  mem_ = m;
  bytes_ = grown;
  return true;
}

void GrowBuffer::upload(const Context& ctx, cl_command_queue q, const void* src, std::size_t bytes,
                        const char* what) {
  wait();
  reserve(ctx, bytes, what);
  if (bytes == 0) return;
  rt::check_cl(clEnqueueWriteBuffer(q, mem_, CL_FALSE, 0, bytes, src, 0, nullptr, &pending_),
               "clEnqueueWriteBuffer", what);
}

void GrowBuffer::wait() {
  if (!pending_) return;
  clWaitForEvents(1, &pending_);
  clReleaseEvent(pending_);
  pending_ = nullptr;
}

std::string field_at(const char* field, int i) { return std::string(field) + "[" + std::to_string(i) + "]"; }

void StepBatch::load(const ForwardBatch& fb, const std::string& backend, const CacheShape* cache, bool paged) {
  const std::string who = backend + ": ForwardBatch.";
  if (fb.batch_size < 0) rt::invalid(who + "batch_size = " + std::to_string(fb.batch_size) + ", must be >= 0");
  if (fb.mode != ForwardMode::Decode && fb.mode != ForwardMode::Extend && fb.mode != ForwardMode::Mixed)
    rt::invalid(who + "mode = " + std::to_string(int(fb.mode)) + " is not decode/extend/mixed");
  const int B = fb.batch_size;
  if (B > 0 && !fb.req_pool_indices) rt::invalid(who + "req_pool_indices is null");
  if (B > 0 && !fb.seq_lens) rt::invalid(who + "seq_lens is null");
  if (paged && B > 0 && !fb.req_to_token) rt::invalid(who + "req_to_token is null");
  mode = fb.mode;
  extend = fb.mode != ForwardMode::Decode;
  batch_size = B;
  if (extend) {
    if (B > 0 && (!fb.extend_lens || !fb.prefix_lens))
      rt::invalid(who + "prefix_lens and extend_lens are required in " + forward_mode_name(fb.mode) + " mode");
  } else if (fb.extend_lens || fb.prefix_lens) {
    rt::invalid(who + "prefix_lens/extend_lens given in decode mode (use extend or mixed)");
  }
  if (!extend && (fb.mask_indptr || fb.custom_mask))
    rt::invalid(who + "a custom mask needs extend or mixed mode (tree verification)");
  if (bool(fb.mask_indptr) != bool(fb.custom_mask))
    rt::invalid(who + "mask_indptr and custom_mask must be given together");

  seq_lens.assign(fb.seq_lens, fb.seq_lens + B);
  prefix_lens.clear();
  extend_lens.clear();
  qo_indptr.assign(size_t(B) + 1, 0);
  for (int i = 0; i < B; ++i) {
    int n = 1;
    if (extend) {
      n = fb.extend_lens[i];
      if (n < 0) rt::invalid(who + field_at("extend_lens", i) + " = " + std::to_string(n) + ", must be >= 0");
      if (fb.mode == ForwardMode::Mixed && n < 1)
        rt::invalid(who + field_at("extend_lens", i) + " = 0 in mixed mode (every request brings a token)");
    } else if (fb.seq_lens[i] < 1) {
      rt::invalid(who + field_at("seq_lens", i) + " = " + std::to_string(fb.seq_lens[i]) +
                  ": a decode request needs its new token (seq_len >= 1)");
    }
    qo_indptr[size_t(i) + 1] = qo_indptr[size_t(i)] + n;
  }
  if (extend) {
    prefix_lens.assign(fb.prefix_lens, fb.prefix_lens + B);
    extend_lens.assign(fb.extend_lens, fb.extend_lens + B);
  }
  num_tokens = qo_indptr[size_t(B)];

  eb = EngineBatch{};
  eb.req_to_token = fb.req_to_token;
  eb.pool_size = fb.pool_size;
  eb.max_ctx = fb.max_ctx;
  eb.req_pool_indices = fb.req_pool_indices;
  eb.seq_lens = seq_lens.data();
  eb.batch_size = B;
  if (extend) {
    eb.prefix_lens = prefix_lens.data();
    eb.extend_lens = extend_lens.data();
  }

  mask_indptr.clear();
  custom_mask = fb.custom_mask;
  if (fb.mask_indptr) mask_indptr.assign(fb.mask_indptr, fb.mask_indptr + B + 1);

  slots_are_64 = fb.out_cache_loc != nullptr;
  slots32.clear();
  slots64.clear();
  if (!paged) return;
  if (slots_are_64) {
    slots64.assign(fb.out_cache_loc, fb.out_cache_loc + num_tokens);
    slots32.clear();
    if (cache) validate_slot_mapping(slots64.data(), num_tokens, *cache);
  } else {
    slots64.clear();
    build_slot_mapping(eb, slots32);  // checks the batch (pool indices, lengths, pages)
    if (cache) validate_slot_mapping(slots32.data(), int64_t(slots32.size()), *cache);
  }
}

void PagedStep::load(const Context& ctx, cl_command_queue q, const ForwardBatch& fb, const std::string& backend,
                     const CacheShape& cache, bool page_table, bool positions) {
  ids_.wait();  // last step's uploads read the host vectors rebuilt below
  slots_.wait();
  pos_.wait();
  step_.load(fb, backend, &cache);
  if (page_table) {
    build_page_table(step_.eb, cache.page_size, 0, pt_);
    validate(pt_, cache);
    ids_.upload(ctx, q, pt_.page_table.data(), pt_.page_table.size() * 4, "page table");
  } else {
    build_csr(step_.eb, cache.page_size, -1, csr_);
    validate(csr_, cache, step_.eb.seq_lens);
    ids_.upload(ctx, q, csr_.kv_indices.data(), csr_.kv_indices.size() * 4, "kv_indices");
  }
  if (step_.slots_are_64)
    slots_.upload(ctx, q, step_.slots64.data(), step_.slots64.size() * 8, "slot mapping");
  else
    slots_.upload(ctx, q, step_.slots32.data(), step_.slots32.size() * 4, "slot mapping");
  if (positions && step_.num_tokens > 0) {
    positions_.clear();
    for (int b = 0; b < step_.batch_size; ++b) {
      const int n = step_.qo_indptr[size_t(b) + 1] - step_.qo_indptr[size_t(b)];
      for (int i = 0; i < n; ++i) positions_.push_back(step_.seq_lens[size_t(b)] - n + i);
    }
    pos_.upload(ctx, q, positions_.data(), positions_.size() * 4, "positions");
  }
}

PagedCsr one_token_csr(int page_size, bool extend) {
  PagedCsr c;
  c.page_size = page_size;
  c.kv_indptr = {0, 1}, c.kv_indices = {0}, c.kv_last_page_len = {1};
  if (extend) c.qo_indptr = {0, 1};
  return c;
}

cl_command_queue backend_queue(const Context& ctx, const BackendConfig& cfg) {
  return cfg.queue ? cfg.queue : ctx.cl_queue();
}

const LayerSpec& find_layer(const std::vector<LayerSpec>& layers, int layer_id, const std::string& backend) {
  for (const auto& l : layers)
    if (l.layer_id == layer_id) return l;
  rt::invalid(backend + ": layer_id " + std::to_string(layer_id) + " is not one of this backend's layers");
}

std::string layer_tag(const std::string& backend, const LayerSpec& l) {
  return backend + ": layer " + std::to_string(l.layer_id) + " (" + layer_kind_name(l.kind) + ")";
}

}  // namespace engine
}  // namespace clattn
