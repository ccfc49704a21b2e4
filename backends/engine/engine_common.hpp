// Pieces every engine backend shares: grow-only device buffers (steady-state steps
// allocate nothing), the step's batch checked and copied once, the backend's queue.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "clattn/backend.hpp"
#include "clattn/metadata.hpp"

namespace clattn::engine {

// A device buffer that only grows (to twice the request, so ragged steps settle quickly). Uploads
// are non-blocking; the host source must stay untouched until wait() (next step).
class GrowBuffer {
 public:
  GrowBuffer() = default;
  ~GrowBuffer();
  GrowBuffer(const GrowBuffer&) = delete;
  GrowBuffer& operator=(const GrowBuffer&) = delete;

  // Makes the buffer at least `bytes` long (never shrinks). Returns true when it allocated.
  bool reserve(const Context& ctx, std::size_t bytes, const char* what);
  // reserve + non-blocking write of `bytes` from `src` on q (one pending upload at a time).
  void upload(const Context& ctx, cl_command_queue q, const void* src, std::size_t bytes, const char* what);
  void wait();  // the pending upload is done: its host source may change
  cl_mem get() const { return mem_; }
  std::size_t bytes() const { return bytes_; }
  PlanBuffer plan_buffer() const { return {mem_, bytes_}; }

 private:
  cl_mem mem_ = nullptr;
  std::size_t bytes_ = 0;
  cl_event pending_ = nullptr;
};

// The step's batch as the backends use it: the caller's arrays (valid during
// init_forward_metadata only) and the copies that must outlive it.
struct StepBatch {
  ForwardMode mode = ForwardMode::Decode;
  bool extend = false;              // extend or mixed
  int batch_size = 0;
  int64_t num_tokens = 0;
  EngineBatch eb;                   // points into the caller's arrays
  std::vector<int32_t> prefix_lens, extend_lens, seq_lens;  // copies (host)
  std::vector<int32_t> qo_indptr;   // [B+1] over new tokens
  std::vector<int32_t> mask_indptr; // [B+1] bytes, empty = no custom mask
  cl_mem custom_mask = nullptr;
  // Slots of the new tokens (int64 from out_cache_loc or int32 from req_to_token).
  std::vector<int64_t> slots64;
  std::vector<int32_t> slots32;
  bool slots_are_64 = false;

  // Checks the ForwardBatch's fields (naming them) and fills the copies. `cache` bounds
  // the slots (num_pages * page_size); without `paged` (linear layers only) req_to_token
  // and the slots are not needed.
  void load(const ForwardBatch& fb, const std::string& backend, const CacheShape* cache, bool paged = true);
};

// The per-step state of the backends over a paged cache (paged, paged_table, mla): the
// batch, its metadata (CSR or page table) built, validated and uploaded once, the slot
// mapping of the new tokens, and the split-K workspace shared by the step's layers.
class PagedStep {
 public:
  // positions: also upload each new token's position (RoPE in forward).
  void load(const Context& ctx, cl_command_queue q, const ForwardBatch& fb, const std::string& backend,
            const CacheShape& cache, bool page_table, bool positions = false);
  const StepBatch& batch() const { return step_; }
  const PagedCsr& csr() const { return csr_; }
  const PageTable& table() const { return pt_; }
  cl_mem page_ids() const { return ids_.get(); }  // kv_indices or the page table
  cl_mem slots() const { return slots_.get(); }
  // int32 [num_tokens]: seq_len - new tokens + index of the token among them (after a load
  // with positions).
  cl_mem positions() const { return pos_.get(); }
  DType slot_dtype() const { return step_.slots_are_64 ? DType::I64 : DType::I32; }
  void reserve_workspace(const Context& ctx, std::size_t bytes) { workspace_.reserve(ctx, bytes, "split-K workspace"); }
  cl_mem workspace() const { return workspace_.get(); }
  int64_t bytes() const { return int64_t(ids_.bytes() + slots_.bytes() + pos_.bytes() + workspace_.bytes()); }

 private:
  StepBatch step_;
  PagedCsr csr_;
  PageTable pt_;
  GrowBuffer ids_, slots_, pos_, workspace_;
  std::vector<int32_t> positions_;
};

// One request with one key: the metadata the backends plan with at creation, so every
// kernel is built before the first step (compile at load).
PagedCsr one_token_csr(int page_size, bool extend);

cl_command_queue backend_queue(const Context& ctx, const BackendConfig& cfg);
// "field[i]": an array element in a batch error message.
std::string field_at(const char* field, int i);
// The spec of layer_id among `layers` (throws InvalidArgument naming the backend).
const LayerSpec& find_layer(const std::vector<LayerSpec>& layers, int layer_id, const std::string& backend);
// A layer's error prefix: "<backend>: layer <id> (<kind>)".
std::string layer_tag(const std::string& backend, const LayerSpec& l);

}  // namespace clattn::engine
