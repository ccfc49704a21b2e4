// The "paged" / "paged_table" backend's class, for the backends that reuse its step (the
// metadata built and uploaded once), its K/V append and its dense path ("hsa").
#pragma once
#include <map>
#include <memory>
#include <set>
#include <string>

#include "backends/engine/engine_common.hpp"
#include "clattn/decode.hpp"
#include "clattn/extend.hpp"

namespace clattn::engine {

class PagedBackend final : public AttentionBackend {
 public:
  // name: the backend's name in messages. decode_elsewhere: layers whose decode another
  // backend runs (a shape only they use plans and builds no dense decode).
  PagedBackend(const Context& ctx, const KVPool& pool, const BackendConfig& cfg, bool page_table,
               const std::string& name, const std::set<int>& decode_elsewhere = {});
  ~PagedBackend() override;

  std::string name() const override { return name_; }
  void init_forward_metadata(const ForwardBatch& fb) override;
  void forward(int layer_id, const LayerIO& io, bool save_kv_cache) override;
  int64_t scratch_bytes() const override;

  // Capture and replay (paged_replay.cpp).
  void init_replay_state(const ReplayConfig& cfg) override;
  void begin_capture(int bucket) override;
  void end_capture() override;
  int replay_bucket(int bs) const override;
  void replay(int bs, const int32_t* req_pool_indices, const int32_t* seq_lens) override;
  ReplayInputs replay_inputs() const override;
  std::vector<ReplayBucketInfo> replay_buckets() const override;

  // The step's batch, metadata and slot mapping (valid after init_forward_metadata).
  const PagedStep& step() const { return step_; }
  // Forward's first half: append_kv of the step's new K/V rows of a layer at the step's slots
  // when save_kv_cache; with the layer's apply_rope, q rotated in place and k rotated into
  // the cache (rope_append_kv), or q alone without save_kv_cache.
  void save_kv(int layer_id, const LayerIO& io, bool save_kv_cache);
  // The options the dense decode of a layer plans with (act dtype, scale, cap, window).
  DecodeOptions decode_options(const LayerSpec& l) const;
  cl_command_queue queue() const { return backend_queue(ctx_, cfg_); }

 private:
  struct Shape {
    LayerSpec spec;
    bool decode_here = false;  // some layer of this shape decodes on this backend
    DecodePlan decode;
    ExtendPlan extend;
    GrowBuffer table;  // caller-owned plan table, reused every step
  };

  ExtendOptions extend_options(const LayerSpec& l) const;
  // The new tokens' rows of a step: their cache slots, count and RoPE positions (int32).
  struct NewRows {
    cl_mem slots;
    DType slot_dtype;
    int64_t num_tokens;
    cl_mem positions;
  };
  // save_kv's work for these rows (the normal step's, or a replay bucket's static ones).
  void append_rows(const LayerSpec& spec, const LayerIO& io, bool save_kv_cache, const NewRows& rows);
  // A layer's decode buffers over the given metadata and workspace.
  DecodeBuffers decode_buffers(const LayerSpec& spec, const LayerIO& io, cl_mem page_ids, cl_mem workspace) const;
  void warm(Shape& s);
  // forward() between begin_capture and end_capture: recorded on the bucket's plans.
  void capture_forward(int layer_id, const LayerIO& io, bool save_kv_cache);
  bool capturing() const;
  int64_t replay_bytes() const;  // device bytes of the replay state (tables, workspace, inputs)
  struct Replay;
  struct ReplayBucket;
  void record_layer(ReplayBucket& bk, int layer_id, const LayerIO& io, bool save_kv_cache);
  std::shared_ptr<Replay> replay_;  // shared_ptr: complete only in paged_replay.cpp

  Context ctx_;
  const KVPool& pool_;
  BackendConfig cfg_;
  bool table_;
  std::string name_;
  std::map<std::string, Shape> shapes_;
  std::map<int, std::string> key_of_;
  PagedStep step_;
  bool ready_ = false;
  bool rope_ = false;  // some layer applies RoPE in forward (the step uploads positions)
};

// The key of a layer's plan: the plans of two layers with one key are interchangeable.
std::string shape_key(const LayerSpec& l, const PagedKV& kv);

}  // namespace clattn::engine
