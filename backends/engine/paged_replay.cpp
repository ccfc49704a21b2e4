// Capture and replay for "paged" / "paged_table" (docs/replay.md): per batch-size bucket,
// fixed-capacity decode plans (decode_plan_fixed) and one recording of the step: the device
// metadata refresh (page table, slot mapping, every plan's work list and the positions),
// then each layer's append and decode as forward() asks for them. A replay is one upload of
// the batch and one enqueue of the recording.
#include <algorithm>
#include <string>

#include "backends/engine/paged_backend.hpp"
#include "clattn/capture.hpp"
#include "runtime/checked.hpp"
#include "runtime/context_impl.hpp"
#include "runtime/error.hpp"

namespace clattn::engine {

struct PagedBackend::ReplayBucket {
  int bs = 0;
  std::map<std::string, DecodePlan> plans;  // by shape key
  std::unique_ptr<Capture> rec;
};

struct PagedBackend::Replay {
  ReplayConfig cfg;
  std::vector<int> buckets;
  int rows = 0;        // the largest bucket: rows of every static buffer
  int max_pages = 0;   // page-table columns
  // The batch inputs: one buffer, req_pool_indices at 0 and seq_lens at seq_off (sub-buffers),
  // so a replay uploads them with one write.
  cl_mem inputs = nullptr, rpi = nullptr, seq = nullptr;
  size_t seq_off = 0;
  std::vector<int32_t> staging;
  cl_event upload = nullptr;
  GrowBuffer table, slots, positions, workspace;
  std::vector<ReplayBucket> b;
  ReplayBucket* capturing = nullptr;

  ~Replay() {
    wait_upload();
    for (cl_mem m : {rpi, seq, inputs})
      if (m) clReleaseMemObject(m);
  }
  void wait_upload() {
    if (!upload) return;
    clWaitForEvents(1, &upload);
    clReleaseEvent(upload);
    upload = nullptr;
  }
  // Ends the capture in progress and drops its recording: a bucket never replays a partial step.
  void abandon_capture() {
    capturing->rec->end();
    capturing->rec.reset();
    capturing = nullptr;
  }
  ReplayBucket* find(int bucket) {
    for (auto& x : b)
      if (x.bs == bucket) return &x;
    return nullptr;
  }
};

PagedBackend::~PagedBackend() = default;

bool PagedBackend::capturing() const { return replay_ && replay_->capturing; }

namespace {
// SGLang's capture sizes: 1 2 4 8, then every multiple of 8, up to max_bs.
std::vector<int> default_buckets(int max_bs) {
  std::vector<int> b;
  for (int s : {1, 2, 4, 8})
    if (s < max_bs) b.push_back(s);
  for (int s = 16; s < max_bs; s += 8) b.push_back(s);
  b.push_back(max_bs);
  return b;
}

cl_mem sub_buffer(cl_mem parent, size_t off, size_t bytes, const char* what) {
  cl_buffer_region r{off, bytes};
  cl_int err = CL_SUCCESS;
  cl_mem m = clCreateSubBuffer(parent, CL_MEM_READ_WRITE, CL_BUFFER_CREATE_TYPE_REGION, &r, &err);
  rt::check_cl(err, "clCreateSubBuffer", what);
  return m;
}
}  // namespace

void PagedBackend::init_replay_state(const ReplayConfig& cfg) {
  const std::string who = name_ + ": init_replay_state: ReplayConfig.";
  if (capturing()) rt::invalid(name_ + ": init_replay_state during a capture");
  if (cfg.max_bs < 1) rt::invalid(who + "max_bs = " + std::to_string(cfg.max_bs) + ", must be >= 1");
  if (cfg.pool_size < 1) rt::invalid(who + "pool_size = " + std::to_string(cfg.pool_size) + ", must be >= 1");
  if (cfg.max_ctx < 1) rt::invalid(who + "max_ctx = " + std::to_string(cfg.max_ctx) + ", must be >= 1");
  if (!cfg.req_to_token) rt::invalid(who + "req_to_token is null (the engine's device table)");
  size_t have = 0;
  rt::check_cl(clGetMemObjectInfo(cfg.req_to_token, CL_MEM_SIZE, sizeof have, &have, nullptr), "clGetMemObjectInfo",
               "ReplayConfig.req_to_token");
  const int64_t need = rt::checked::product({cfg.pool_size, cfg.max_ctx, 4}, "ReplayConfig req_to_token bytes");
  if (int64_t(have) < need)
    rt::invalid(who + "req_to_token has " + std::to_string(have) + " bytes, needs " + std::to_string(need) +
                " (pool_size x max_ctx int32)");
  std::vector<int> buckets = cfg.buckets.empty() ? default_buckets(cfg.max_bs) : cfg.buckets;
  for (size_t i = 0; i < buckets.size(); ++i) {
    if (buckets[i] < 1) rt::invalid(who + field_at("buckets", int(i)) + " = " + std::to_string(buckets[i]) + ", must be >= 1");
    if (i > 0 && buckets[i] <= buckets[i - 1])
      rt::invalid(who + field_at("buckets", int(i)) + " = " + std::to_string(buckets[i]) + " does not ascend");
  }
  if (buckets.back() < cfg.max_bs)
    rt::invalid(who + "buckets end at " + std::to_string(buckets.back()) + ", below max_bs " + std::to_string(cfg.max_bs));

  auto r = std::make_shared<Replay>();
  r->cfg = cfg, r->buckets = buckets, r->rows = buckets.back();
  const int P = pool_.config().page_size;
  r->max_pages = max_table_pages(cfg.max_ctx, P);
  auto& c = rt::impl(ctx_);
  // Sub-buffer offsets must be multiples of the device's base address alignment (bits).
  cl_uint align_bits = 0;
  clGetDeviceInfo(c.device, CL_DEVICE_MEM_BASE_ADDR_ALIGN, sizeof align_bits, &align_bits, nullptr);
  const size_t align = std::max<size_t>(4, align_bits / 8), rows_bytes = size_t(r->rows) * 4;
  r->seq_off = (rows_bytes + align - 1) / align * align;
  cl_int err = CL_SUCCESS;
  r->inputs = rt::create_buffer(c.ctx, CL_MEM_READ_WRITE, r->seq_off + rows_bytes, &err);
  rt::check_cl(err, "clCreateBuffer", "replay inputs");
  r->rpi = sub_buffer(r->inputs, 0, rows_bytes, "replay req_pool_indices");
  r->seq = sub_buffer(r->inputs, r->seq_off, rows_bytes, "replay seq_lens");
  r->staging.assign((r->seq_off + rows_bytes) / 4, 0);
  r->table.reserve(ctx_, size_t(r->rows) * size_t(r->max_pages) * 4, "replay page table");
  r->slots.reserve(ctx_, rows_bytes, "replay slot mapping");
  r->positions.reserve(ctx_, rows_bytes, "replay positions");
  replay_ = std::move(r);  // decode_options now plans deterministically
  try {
    size_t ws = 0;
    for (int bs : buckets) {
      ReplayBucket bk;
      bk.bs = bs;
      for (auto& [key, s] : shapes_) {
        if (!s.decode_here) continue;
        const PagedKV& cache = pool_.layer(s.spec.layer_id).kv;
        DecodePlan p = decode_plan_fixed(ctx_, DecodeCapacity{bs, replay_->max_pages}, cache, decode_options(s.spec), queue());
        ws = std::max(ws, size_t(p.workspace_bytes));
        bk.plans.emplace(key, std::move(p));
      }
      replay_->b.push_back(std::move(bk));
    }
    replay_->workspace.reserve(ctx_, std::max<size_t>(ws, 4), "replay split-K workspace");
  } catch (...) {
    replay_.reset();
    throw;
  }
}

void PagedBackend::begin_capture(int bucket) {
  if (!replay_) rt::invalid(name_ + ": begin_capture before init_replay_state");
  if (capturing()) rt::invalid(name_ + ": begin_capture during a capture (end_capture first)");
  Replay& r = *replay_;
  ReplayBucket* bk = r.find(bucket);
  if (!bk) {
    std::string list;
    for (int b : r.buckets) list += (list.empty() ? "" : " ") + std::to_string(b);
    rt::invalid(name_ + ": begin_capture(" + std::to_string(bucket) + "): not a bucket (" + list + ")");
  }
  bk->rec = std::make_unique<Capture>(ctx_, queue(), r.cfg.command_buffer);
  bk->rec->begin();
  r.capturing = bk;
  try {
    // The step's metadata, refreshed on the device from the engine's tables.
    DeviceEngineBatch db;
    db.req_to_token = r.cfg.req_to_token, db.pool_size = r.cfg.pool_size, db.max_ctx = r.cfg.max_ctx;
    db.req_pool_indices = r.rpi, db.seq_lens = r.seq, db.batch_size = bucket;
    DevicePageTable pt;
    pt.page_table = r.table.get();
    build_page_table_device(ctx_, db, pool_.config().page_size, r.max_pages, pt, queue());
    build_slot_mapping_device(ctx_, db, r.slots.get(), queue());
    bool pos = rope_;
    for (auto& [key, p] : bk->plans) {
      decode_refresh(ctx_, p, r.seq, pos ? r.positions.get() : nullptr, Enqueue{queue(), 0, nullptr, nullptr});
      pos = false;
    }
    if (pos) rt::fail(Status::Internal, name_ + ": RoPE layers but no decode plan writes the positions");
  } catch (...) {
    r.abandon_capture();
    throw;
  }
}

void PagedBackend::end_capture() {
  if (!capturing()) rt::invalid(name_ + ": end_capture without begin_capture");
  Replay& r = *replay_;
  ReplayBucket* bk = r.capturing;
  r.capturing = nullptr;
  bk->rec->end();
}

void PagedBackend::capture_forward(int layer_id, const LayerIO& io, bool save_kv_cache) {
  Replay& r = *replay_;
  ReplayBucket& bk = *r.capturing;
  try {
    record_layer(bk, layer_id, io, save_kv_cache);
  } catch (...) {
    r.abandon_capture();
    throw;
  }
}

void PagedBackend::record_layer(ReplayBucket& bk, int layer_id, const LayerIO& io, bool save_kv_cache) {
  Replay& r = *replay_;
  const LayerSpec& spec = find_layer(cfg_.layers, layer_id, name_);
  const std::string tag = layer_tag(name_, spec);
  if (!io.q || !io.o) rt::invalid(tag + ": LayerIO.q and LayerIO.o are required");
  const std::string& key = key_of_.at(layer_id);
  auto it = bk.plans.find(key);
  if (it == bk.plans.end()) rt::invalid(tag + ": its decode runs on another backend");
  // Padded rows carry slot -1: the append skips them.
  append_rows(spec, io, save_kv_cache, {r.slots.get(), DType::I32, bk.bs, r.positions.get()});
  decode_run(ctx_, it->second, decode_buffers(spec, io, r.table.get(), r.workspace.get()), {queue(), 0, nullptr, nullptr});
}

int64_t PagedBackend::replay_bytes() const {
  if (!replay_) return 0;
  const Replay& r = *replay_;
  int64_t n = int64_t(r.seq_off) + int64_t(r.rows) * 4;
  for (const GrowBuffer* g : {&r.table, &r.slots, &r.positions, &r.workspace}) n += int64_t(g->bytes());
  for (const auto& bk : r.b)
    for (const auto& [key, p] : bk.plans) n += p.table_bytes;
  return n;
}

int PagedBackend::replay_bucket(int bs) const {
  if (!replay_ || bs < 1) return 0;
  for (int b : replay_->buckets)
    if (b >= bs) return b;
  return 0;
}

void PagedBackend::replay(int bs, const int32_t* rpi, const int32_t* seq) {
  const std::string who = name_ + ": replay: ";
  if (!replay_) rt::invalid(who + "no replay state (init_replay_state)");
  if (capturing()) rt::invalid(who + "during a capture (end_capture first)");
  Replay& r = *replay_;
  const int bucket = replay_bucket(bs);
  if (bucket == 0)
    rt::invalid(who + "batch_size " + std::to_string(bs) + " is outside 1 .. max_bs " + std::to_string(r.cfg.max_bs));
  ReplayBucket* bk = r.find(bucket);
  if (!bk->rec) rt::invalid(who + "bucket " + std::to_string(bucket) + " (batch_size " + std::to_string(bs) + ") was not captured");
  if (bool(rpi) != bool(seq)) rt::invalid(who + "req_pool_indices and seq_lens must be given together");
  if (rpi) {
    for (int i = 0; i < bs; ++i) {
      if (rpi[i] < 0 || rpi[i] >= r.cfg.pool_size)
        rt::invalid(who + field_at("req_pool_indices", i) + " = " + std::to_string(rpi[i]) + " is outside the pool (" +
                    std::to_string(r.cfg.pool_size) + " rows)");
      if (seq[i] < 1 || seq[i] > r.cfg.max_ctx)
        rt::invalid(who + field_at("seq_lens", i) + " = " + std::to_string(seq[i]) + " is outside 1 .. max_ctx " +
                    std::to_string(r.cfg.max_ctx));
    }
    r.wait_upload();  // the last replay's upload read the staging rows
    const size_t so = r.seq_off / 4;
    std::copy(rpi, rpi + bs, r.staging.begin());
    std::fill(r.staging.begin() + bs, r.staging.begin() + bucket, 0);
    std::copy(seq, seq + bs, r.staging.begin() + std::ptrdiff_t(so));
    std::fill(r.staging.begin() + std::ptrdiff_t(so) + bs, r.staging.begin() + std::ptrdiff_t(so) + bucket, 0);
    rt::check_cl(clEnqueueWriteBuffer(queue(), r.inputs, CL_FALSE, 0, r.seq_off + size_t(bucket) * 4, r.staging.data(),
                                      0, nullptr, &r.upload),
                 "clEnqueueWriteBuffer", "replay inputs");
  }
  bk->rec->replay();
}

ReplayInputs PagedBackend::replay_inputs() const {
  if (!replay_) return {};
  return {replay_->rpi, replay_->seq};
}

std::vector<ReplayBucketInfo> PagedBackend::replay_buckets() const {
  std::vector<ReplayBucketInfo> out;
  if (!replay_) return out;
  for (const auto& bk : replay_->b) {
    ReplayBucketInfo i;
    i.batch_size = bk.bs;
    if (bk.rec) {
      i.launches = bk.rec->launches();
      i.command_buffer = bk.rec->uses_command_buffer();
      i.fallback = bk.rec->fallback_reason();
    }
    out.push_back(i);
  }
  return out;
}

}  // namespace clattn::engine
