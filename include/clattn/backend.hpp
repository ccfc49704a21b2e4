// Engine-facing attention backends (SGLang's AttentionBackend shape): an engine describes
// its model's attention layers once, hands one ForwardBatch per step to
// init_forward_metadata (metadata built with the shared builders, planned once, uploaded
// once), then calls forward() per layer (append the new K/V, then decode or extend: enqueue
// only). Backends by name: "paged" (MHA/GQA/MQA, CSR metadata), "paged_table" (the same with
// page-table metadata), "mla", "linear", "hybrid" (routes per layer kind and per mode), "hsa"
// (Hierarchical Sparse Attention in the decode steps of chosen MHA layers, the rest paged).
// KVPool allocates the per-layer caches and state pools (or wraps the engine's cl_mems).
// Decisions and semantics: docs/backend.md.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "clattn/context.hpp"
#include "clattn/linear.hpp"
#include "clattn/mla.hpp"
#include "clattn/paged_kv.hpp"
#include "clattn/rope.hpp"
#include "clattn/sparse.hpp"
#include "clattn/types.hpp"

namespace clattn {

enum class LayerKind : int { MHA = 0, MLA = 1, Linear = 2 };
enum class LinearKind : int { GDN = 0, GLA = 1 };
// Decode: one new token per request. Extend: prefill / chunked prefill with a cached prefix
// (extend_lens new tokens per request). Mixed: an extend batch whose decode requests have
// extend_len 1 (SGLang's mixed chunked prefill); it runs on the extend kernels.
enum class ForwardMode : int { Decode = 0, Extend = 1, Mixed = 2 };

CLATTN_API const char* layer_kind_name(LayerKind k) noexcept;
CLATTN_API const char* forward_mode_name(ForwardMode m) noexcept;

// One attention layer of the model.
struct LayerSpec {
  int layer_id = 0;                 // the layer's index in the KVPool (0 .. num_layers-1)
  LayerKind kind = LayerKind::MHA;
  // MHA: Hq, Hkv, D (head_dim_v 0 = D; it must equal D). MLA: num_qo_heads = H; the
  // latent widths are fixed (512 + 64); head_dim/num_kv_heads are ignored.
  int num_qo_heads = 0, num_kv_heads = 0, head_dim = 0, head_dim_v = 0;
  float sm_scale = 0.0f;            // 0: 1/sqrt(head_dim) (MHA); required > 0 for MLA
  float logits_soft_cap = 0.0f;     // MHA only
  int window_left = -1;             // MHA only: sliding window (keys >= pos - window_left)
  cl_mem sinks = nullptr;           // MHA only: [Hq] f32 sink logits (gpt-oss), optional
  // MHA only: forward takes pre-RoPE q and k. It rotates q in place (LayerIO.q) and k on its
  // way into the cache (rope_append_kv), at each new token's position (prefix + index in
  // the step); without save_kv_cache only q is rotated. rope's cos_sin_cache must outlive
  // the backend. Semantics: clattn/rope.hpp.
  bool apply_rope = false;
  RopeConfig rope;
  // Linear layers: the recurrence and its config (config.dtype is overridden by the
  // backend's act_dtype).
  LinearKind linear_kind = LinearKind::GDN;
  LinearConfig linear;
};

// The step's batch as an engine holds it (SGLang's ForwardBatch, host copies). Pointers are
// read during init_forward_metadata only.
struct ForwardBatch {
  ForwardMode mode = ForwardMode::Decode;
  int batch_size = 0;
  // req_to_token [pool_size, max_ctx]: slot of every token of every pool row.
  const int32_t* req_to_token = nullptr;
  int pool_size = 0, max_ctx = 0;
  const int32_t* req_pool_indices = nullptr;  // [B]
  const int32_t* seq_lens = nullptr;          // [B], KV length after this step
  const int32_t* prefix_lens = nullptr;       // [B], extend/mixed: tokens already cached
  const int32_t* extend_lens = nullptr;       // [B], extend/mixed: new tokens (prefix + extend = seq)
  // [num_tokens] slots the new tokens' K/V go to (SGLang out_cache_loc); nullptr = read
  // them from req_to_token (positions prefix_len .. seq_len-1).
  const int64_t* out_cache_loc = nullptr;
  // Speculative-decoding tree verification (extend/mixed): FlashInfer packed_custom_mask
  // byte offsets [B+1] (host) and the packed bits (device). Both or neither.
  const int32_t* mask_indptr = nullptr;
  cl_mem custom_mask = nullptr;
  // Linear layers: state-pool slot per request [B]; nullptr = req_pool_indices. A request
  // with prefix_len 0 in an extend/mixed step starts from a zeroed state; otherwise the
  // slot must hold the state after its prefix (KVPool::copy_state forks a cached one).
  const int32_t* state_slots = nullptr;

  // New tokens this step: B for decode, sum(extend_lens) otherwise.
  CLATTN_API int64_t num_tokens() const;
};

// One layer's tensors for forward(). Rows are the step's new tokens in request order.
struct LayerIO {
  // MHA: q [T, Hq, D], k/v new rows [T, Hkv, D], o [T, Hq, D].
  // MLA: q = q_nope [T, H, 512], q_pe [T, H, 64], k = new ckv rows [T, 512],
  //      v = new kpe rows [T, 64], o [T, H, 512].
  // Linear: q/k [T, Hqk, Dk], v [T, Hv, Dv], g [T, Hv] f32 ([Hv] with constant decay),
  //      beta [T, Hv] f32 (GDN), o [T, Hv, Dv].
  cl_mem q = nullptr, q_pe = nullptr, k = nullptr, v = nullptr, o = nullptr;
  cl_mem g = nullptr, beta = nullptr;
  cl_mem lse = nullptr;   // optional [T, H] f32 (MHA, MLA)
};

// ------------------------------------------------------------------------------ KVPool
struct KVPoolConfig {
  int num_pages = 0;                 // pages per layer (every full-attention layer alike)
  int page_size = 16;
  DType kv_dtype = DType::BF16;      // MHA K/V (f32 f16 bf16 fp8 int8 int4) and MLA latent storage (not int4)
  KVLayout layout = KVLayout::NHD;   // MHA only
  float k_scale = 1.0f, v_scale = 1.0f;  // fp8: loaded = stored * scale (MLA uses k_scale); int8 / int4: 1
  // int8 / int4 caches: the dtype of the scale caches beside them (f32 or f16), written by
  // forward's append: one scale per (token, KV head) for int8, a [scale, zero] pair per
  // (token, KV head, group) for int4, a (ckv scale, kpe scale) pair per token for int8 MLA
  // latents (docs/kv_formats.md).
  DType scale_dtype = DType::F32;
  // int4: head-dim elements per [scale, zero] pair, 32, 64 or 128, dividing every MHA layer's
  // head_dim (64: 12.5 % more bytes than the nibbles in f16 pairs); unused by other dtypes.
  int quant_group = 64;
  int num_state_slots = 0;           // linear layers: slots per layer
  DType state_dtype = DType::F32;    // f32 f16 bf16
};

// Per-layer caches: MHA k/v (PagedKV; int8 / int4 ones with their scale caches), MLA ckv/kpe
// (MlaCache, split buffers; int8 ones with their scale-pair cache), linear state pools. Allocates them (constructor with a context) or starts empty for an engine that
// supplies its own cl_mems through set_layer (the pool then never releases them).
class CLATTN_API KVPool {
 public:
  struct Layer {
    LayerKind kind = LayerKind::MHA;
    cl_mem k = nullptr, v = nullptr;   // MHA: K and V caches; MLA: ckv and kpe caches
    // MHA caches whose format has scale caches (int8, int4: kv.scale_required_bytes() > 0): the
    // K and V scale caches, indexed by the same page ids (PagedKV). int8 MLA latents
    // (latent.scale_required_bytes() > 0): k_scale_cache is the latent's scale cache (a (ckv,
    // kpe) scale pair per token, MlaCache), v_scale_cache is unused.
    cl_mem k_scale_cache = nullptr, v_scale_cache = nullptr;
    PagedKV kv;                        // MHA descriptor
    MlaCache latent;                   // MLA descriptor
    LinearStatePool state;             // linear layers
    LinearConfig linear;               // linear layers: slot geometry
  };

  KVPool() = default;
  KVPool(const Context& ctx, const KVPoolConfig& cfg, const std::vector<LayerSpec>& layers);
  // Empty pool with the geometry; the engine calls set_layer for every layer.
  KVPool(const KVPoolConfig& cfg, const std::vector<LayerSpec>& layers);
  ~KVPool();
  KVPool(KVPool&&) noexcept;
  KVPool& operator=(KVPool&&) noexcept;
  KVPool(const KVPool&) = delete;
  KVPool& operator=(const KVPool&) = delete;

  const KVPoolConfig& config() const { return cfg_; }
  int num_layers() const { return int(layers_.size()); }
  const Layer& layer(int layer_id) const;       // throws InvalidArgument for a bad id
  void set_layer(int layer_id, const Layer& l);  // engine-owned buffers (kind must match)
  int64_t bytes_allocated() const;              // device bytes of every layer's caches
  int64_t bytes_per_page() const;               // one page across every full/MLA layer
  int64_t bytes_per_state_slot() const;         // one slot across every linear layer

  // Linear state helpers across every linear layer (enqueue only, on ctx's queue).
  void zero_states(const Context& ctx, const int32_t* slots, int n) const;
  void copy_state(const Context& ctx, int src_slot, int dst_slot) const;

 private:
  KVPoolConfig cfg_;
  std::vector<Layer> layers_;
  std::vector<cl_mem> owned_;
};

// ----------------------------------------------------------------------- the backends
// "hsa" (SGLang's --attention-backend hsa): decode steps of the HSA layers select topk pages
// per list by their landmark keys and attend to those (plus the window); the other layers,
// and every extend/mixed step, run "paged" (CSR). Semantics: clattn/sparse.hpp (HSA).
struct HsaBackendConfig {
  int topk = 0;                               // pages per selection list, >= 1
  HsaStrategy strategy = HsaStrategy::Group;  // group: one list per KV head; head: per query head
  int window_size = 0;                        // SWA->HSA: the last W tokens attended densely; 0 = none
  bool fuse_window = true;                    // window and pages in one call; false: merged by merge_state
  // Layer ids that use HSA (SGLang's --hsa-layers); empty = every layer without a sliding
  // window. A listed layer must have no window_left.
  std::vector<int> layers;
};

struct BackendConfig {
  std::vector<LayerSpec> layers;      // the model's attention layers (ids index the KVPool)
  DType act_dtype = DType::BF16;      // q / k / v / o dtype: f32 f16 bf16
  bool deterministic = false;         // fixed split-K tile (decode)
  int max_splits = 0;                 // decode split-K cap (0 = planner's choice)
  // Deterministic decode's split tile in tokens (deterministic, and every step after
  // init_replay_state); 0 = the parameter row's DET_CHUNK.
  int split_tokens = 0;
  cl_command_queue queue = nullptr;   // nullptr = the context's queue
  // "hybrid" only: backend per mode for the full-attention (MHA) layers ("paged" or
  // "paged_table", and "hsa" for decode_backend); MLA layers go to "mla", linear layers
  // to "linear".
  std::string prefill_backend = "paged", decode_backend = "paged";
  HsaBackendConfig hsa;  // "hsa", and "hybrid" with decode_backend "hsa"
};

// ------------------------------------------------------------------ capture and replay
// Decode steps recorded once per batch-size bucket and replayed (SGLang's CUDA-graph calls:
// init_cuda_graph_state / init_forward_metadata_capture_cuda_graph / ..._replay_cuda_graph).
// Semantics and costs: docs/replay.md.
struct ReplayConfig {
  int max_bs = 0;            // the largest decode batch replayed
  // Batch sizes to capture, ascending, the last >= max_bs; empty: 1 2 4 8, then multiples of 8
  // up to max_bs. A batch of bs runs in the smallest bucket >= bs; its padding costs nothing.
  std::vector<int> buckets;
  // The engine's device req_to_token [pool_size, max_ctx] int32, kept current by the engine
  // (every replayed request's slots 0 .. seq_len - 1 written before its replay).
  cl_mem req_to_token = nullptr;
  int pool_size = 0, max_ctx = 0;
  // false: replay re-enqueues the recorded kernels (arguments set once) even where the
  // device has cl_khr_command_buffer.
  bool command_buffer = true;
};

// The device buffers a replay reads its batch from, [max_bs] int32 each: the engine may
// write them itself and call replay(bs) without host arrays (rows >= bs: seq_len 0).
struct ReplayInputs {
  cl_mem req_pool_indices = nullptr, seq_lens = nullptr;
};

// One captured bucket: its launches and how a replay enqueues them.
struct ReplayBucketInfo {
  int batch_size = 0;
  int launches = 0;            // kernels recorded
  bool command_buffer = false; // one clEnqueueCommandBufferKHR per replay
  std::string fallback;        // why not, where it is not
};

class CLATTN_API AttentionBackend {
 public:
  virtual ~AttentionBackend();
  virtual std::string name() const = 0;
  // Once per step: validate the batch, build metadata, plan every layer shape, upload.
  // Throws clattn::Error naming the field and request before anything is enqueued.
  virtual void init_forward_metadata(const ForwardBatch& batch) = 0;
  // Per layer: append the step's new K/V (save_kv_cache) then attention, enqueue only.
  // Linear layers always update their state in place (save_kv_cache is ignored).
  virtual void forward(int layer_id, const LayerIO& io, bool save_kv_cache = true) = 0;
  // Device bytes the backend holds for metadata, plans and workspaces.
  virtual int64_t scratch_bytes() const = 0;

  // Capture and replay of decode steps ("paged" and "paged_table"; the other backends throw
  // Unsupported). init_replay_state plans every bucket (fixed-capacity plans, one workspace)
  // and makes every later decode step, replayed or not, split deterministically, so a batch
  // gives the same bits either way. begin_capture(bucket) .. end_capture(): the forward()
  // calls in between (every layer of a decode step, on the backend's queue, from this
  // thread) are recorded with their LayerIO buffers, which must hold `bucket` rows and stay
  // the ones the engine fills before each replay; the metadata refresh kernels come first.
  // replay(bs, ...) copies the batch into replay_inputs() (one non-blocking write, padded
  // with seq_len 0) and enqueues the bucket's recording: append + attention of every layer.
  virtual void init_replay_state(const ReplayConfig& cfg);
  virtual void begin_capture(int bucket);
  virtual void end_capture();
  // The bucket a decode batch of bs runs in, 0 when none (bs > max_bs, or no replay state).
  virtual int replay_bucket(int bs) const;
  // Host arrays [bs] (validated, naming the index), or both null: replay_inputs() hold them.
  virtual void replay(int bs, const int32_t* req_pool_indices = nullptr, const int32_t* seq_lens = nullptr);
  virtual ReplayInputs replay_inputs() const;
  virtual std::vector<ReplayBucketInfo> replay_buckets() const;
  // The seq_len padded rows carry (SGLang's get_cuda_graph_seq_len_fill_value).
  int replay_seq_len_fill_value() const { return 0; }
};

// Creates a backend by name over `pool` (which must outlive it). Checks that every layer
// is one the backend serves and that the device can run it: a clear
// InvalidArgument/Unsupported error otherwise.
CLATTN_API std::unique_ptr<AttentionBackend> create_backend(const std::string& name, const Context& ctx,
                                                            const KVPool& pool, const BackendConfig& cfg);
CLATTN_API std::vector<std::string> backend_names();

}  // namespace clattn
