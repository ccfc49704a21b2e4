// The simulated engine loop. Every token's layer inputs (q, k, v, ...) are rows of per-layer
// random tables indexed by token id (the model's "projections"), so the reference can
// regenerate any request's whole history from its token ids; the next token is derived
// from the last layer's output, so a wrong attention result changes what follows.
#include <algorithm>
#include <array>
#include <deque>
#include <list>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <sstream>

#include "reference/kv_formats_reference.hpp"
#include "reference/reference.hpp"
#include "sim.hpp"
#include "sim_hsa.hpp"

namespace clattn::sim {
namespace {

constexpr int kVocab = 97;

enum Field { Q = 0, QPE, K, V, G, BETA, NUM_FIELDS };

// Stored bytes <-> values through the reference's element conversions (bit-exact with the
// device's loads and stores).
double decode_value(const uint8_t* p, DType dt) {
  float f = 0;
  ref::load_elem(p, int(dt), &f);
  return f;
}

void encode_value(double x, DType dt, uint8_t* p) { ref::store_elem(float(x), int(dt), p); }

// The value as the cache stores it (the kernels read back exactly this).
double store_round(double x, DType dt) {
  uint8_t b[4];
  encode_value(x, dt, b);
  return decode_value(b, dt);
}

// One input field of one layer: a table of kVocab rows of `width` values in `dtype`.
struct FieldTable {
  int width = 0;
  DType dtype = DType::F32;
  std::vector<uint8_t> rows;
  const uint8_t* row(int tok) const { return rows.data() + size_t(tok) * width * dtype_size(dtype); }
  double at(int tok, int i) const { return decode_value(row(tok) + size_t(i) * dtype_size(dtype), dtype); }
};

struct Request {
  int id = 0;
  int row = -1;                 // req_to_token row = state slot
  std::vector<int> toks;        // every token fed so far (prompt, then generated)
  int prompt_len = 0, output_len = 0, generated = 0;
  int cached = 0;               // KV tokens already in the cache (seq_len before the step)
  int reserved_pages = 0;       // pages still reserved for this request's growth
  std::vector<int> own_pages;
  bool shares_prefix = false;
};

class Engine {
 public:
  Engine(const Context& ctx, const Config& cfg) : ctx_(ctx), cfg_(cfg), rng_(cfg.seed) {
    model_ = preset(cfg.model, cfg.num_layers);
    if (cfg.page_size > 0) model_.page_size = cfg.page_size;
    if (auto p = resolve_hsa(cfg, model_, hsa_)) throw Error(Status::InvalidArgument, "serve-sim: " + p->option + " " + p->why);
    P_ = model_.page_size;
    sys_len_ = (cfg.system_prompt + P_ - 1) / P_ * P_;
    max_ctx_ = sys_len_ + cfg.prompt_max + cfg.output_max + 1;
    pool_rows_ = cfg.max_running + 1;  // row 0: the shared system prompt
    has_linear_ = has_paged_ = false;
    for (auto& l : model_.layers) (l.kind == LayerKind::Linear ? has_linear_ : has_paged_) = true;
    const int pages_per_req = (max_ctx_ + P_ - 1) / P_;
    num_pages_ = cfg.num_pages > 0 ? cfg.num_pages : pages_per_req * (cfg.num_requests + 1) + 1;

    make_sinks();
    KVPoolConfig pc;
    pc.num_pages = num_pages_;
    pc.page_size = P_;
    pc.kv_dtype = cfg.kv_dtype;
    pc.scale_dtype = cfg.kv_scale_dtype;
    pc.quant_group = cfg.kv_quant_group;
    pc.num_state_slots = pool_rows_;
    pool_ = KVPool(ctx, pc, model_.layers);
    BackendConfig bc;
    bc.layers = model_.layers;
    bc.act_dtype = cfg.act_dtype;
    bc.prefill_backend = cfg.prefill_backend;
    bc.decode_backend = cfg.decode_backend;
    backend_name_ = cfg.backend.empty() ? model_.backend : cfg.backend;
    if (hsa_.on) {  // decode steps of the HSA layers on "hsa" (alone, or as hybrid's decode backend)
      bc.hsa = hsa_.cfg;
      backend_name_ = hsa_.backend;
      if (backend_name_ == "hybrid") bc.decode_backend = "hsa";
    }
    backend_ = create_backend(backend_name_, ctx, pool_, bc);
    if (cfg.compare_kv) {  // the same model on a pool of the compare dtype
      pc.kv_dtype = *cfg.compare_kv;
      compare_pool_ = KVPool(ctx, pc, model_.layers);
      compare_ = create_backend(backend_name_, ctx, compare_pool_, bc);
    }

    make_tables();
    max_tokens_ = std::max(cfg.prefill_token_budget, sys_len_) + cfg.max_running + cfg.prompt_max + 1;
    for (int s = 0; s < 2; ++s)
      for (int f = 0; f < NUM_FIELDS; ++f) {
        int64_t w = 0;
        for (const auto& t : tables_) w = std::max<int64_t>(w, int64_t(t[size_t(f)].width) * int64_t(dtype_size(t[size_t(f)].dtype)));
        if (w == 0) continue;
        staging_[s][f].assign(size_t(w * max_tokens_), 0);
        dev_[s][f] = DeviceBuffer(ctx, size_t(w * max_tokens_));
      }
    int64_t ow = 0;
    for (const auto& l : model_.layers) ow = std::max<int64_t>(ow, out_width(l));
    o_dev_ = DeviceBuffer(ctx, size_t(ow * int64_t(dtype_size(cfg.act_dtype)) * max_tokens_));
    if (compare_) compare_o_ = DeviceBuffer(ctx, o_dev_.bytes());
    req_to_token_.assign(size_t(pool_rows_) * max_ctx_, 0);
    for (int p = num_pages_ - 1; p >= 0; --p) free_pages_.push_back(p);
    for (int r = pool_rows_ - 1; r >= 1; --r) free_rows_.push_back(r);
    report_.device = ctx.profile().device_name;
    report_.backend = backend_->name();
    report_.model = model_.name + " (" + std::to_string(model_.layers.size()) + " layers)";
    report_.pages_total = num_pages_;
    report_.shared_prefix_tokens = sys_len_;
    report_.page_size = P_;
    report_.kv_bytes_allocated = pool_.bytes_allocated();
    report_.hsa = hsa_.describe();
    report_.hsa_layers = int(hsa_.layers.size()), report_.num_layers = int(model_.layers.size());
    if (cfg.replay) init_replay();
  }

  ~Engine() {
    for (auto& half : pending_)
      for (cl_event& e : half)
        if (e) clWaitForEvents(1, &e), clReleaseEvent(e);
    for (auto& m : markers_) clReleaseEvent(m);
  }

  Report run() {
    const auto t0 = std::chrono::steady_clock::now();
    std::uniform_int_distribution<int> tok(0, kVocab - 1);
    for (int i = 0; i < sys_len_; ++i) sys_toks_.push_back(tok(rng_));
    for (int i = 0; i < cfg_.num_requests; ++i) {
      Request r;
      r.id = i;
      r.toks = sys_toks_;
      const int user = std::uniform_int_distribution<int>(cfg_.prompt_min, cfg_.prompt_max)(rng_);
      for (int j = 0; j < user; ++j) r.toks.push_back(tok(rng_));
      r.prompt_len = int(r.toks.size());
      r.output_len = std::uniform_int_distribution<int>(cfg_.output_min, cfg_.output_max)(rng_);
      waiting_.push_back(r);
    }
    if (sys_len_ > 0) prefill_system_prompt();
    const int total = cfg_.num_requests;
    while (!waiting_.empty() || !running_.empty()) {
      step();
      if (cfg_.progress) cfg_.progress(finished_, total);
    }
    ctx_.finish();
    report_.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() - check_s_;
    report_.scratch_bytes = backend_->scratch_bytes();
    return report_;
  }

 private:
  // ---------------------------------------------------------------- model tables
  void make_tables() {
    const DType act = cfg_.act_dtype;
    for (const auto& l : model_.layers) {
      std::array<FieldTable, NUM_FIELDS> t;
      if (l.kind == LayerKind::MHA) {
        t[Q] = {l.num_qo_heads * l.head_dim, act, {}};
        t[K] = {l.num_kv_heads * l.head_dim, act, {}};
        t[V] = {l.num_kv_heads * l.head_dim, act, {}};
      } else if (l.kind == LayerKind::MLA) {
        t[Q] = {l.num_qo_heads * kMlaCkvDim, act, {}};
        t[QPE] = {l.num_qo_heads * kMlaKpeDim, act, {}};
        t[K] = {kMlaCkvDim, act, {}};
        t[V] = {kMlaKpeDim, act, {}};
      } else {
        const auto& c = l.linear;
        t[Q] = {c.num_qk_heads * c.head_dim_k, act, {}};
        t[K] = {c.num_qk_heads * c.head_dim_k, act, {}};
        t[V] = {c.num_v_heads * c.head_dim_v, act, {}};
        t[G] = {c.num_v_heads, DType::F32, {}};
        if (l.linear_kind == LinearKind::GDN) t[BETA] = {c.num_v_heads, DType::F32, {}};
      }
      std::mt19937_64 g(cfg_.seed * 1000003ull + uint64_t(l.layer_id));
      for (int f = 0; f < NUM_FIELDS; ++f) {
        auto& ft = t[size_t(f)];
        if (!ft.width) continue;
        const size_t es = dtype_size(ft.dtype);
        ft.rows.resize(size_t(kVocab) * ft.width * es);
        std::uniform_real_distribution<double> u(f == G ? -0.4 : f == BETA ? 0.05 : -1.0, f == G ? -0.02 : f == BETA ? 0.95 : 1.0);
        for (size_t i = 0; i < size_t(kVocab) * ft.width; ++i) encode_value(u(g), ft.dtype, &ft.rows[i * es]);
      }
      tables_.push_back(std::move(t));
    }
  }

  void make_sinks() {
    std::mt19937_64 g(cfg_.seed + 77);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    if (model_.name != "gpt-oss") return;
    for (auto& l : model_.layers) {
      std::vector<float> s(size_t(l.num_qo_heads));
      for (auto& x : s) x = u(g);
      sinks_host_[l.layer_id] = std::vector<double>(s.begin(), s.end());
      sinks_dev_.emplace_back(ctx_, s.size() * 4);
      sinks_dev_.back().write(ctx_, s.data(), s.size() * 4);
      l.sinks = sinks_dev_.back().get();
    }
  }

  static int64_t out_width(const LayerSpec& l) {
    if (l.kind == LayerKind::MHA) return int64_t(l.num_qo_heads) * l.head_dim;
    if (l.kind == LayerKind::MLA) return int64_t(l.num_qo_heads) * kMlaCkvDim;
    return int64_t(l.linear.num_v_heads) * l.linear.head_dim_v;
  }

  // ---------------------------------------------------------------- replay
  // The device copy of req_to_token, per-layer q/k/v/o buffers of max_running rows (a replay
  // runs every layer, so each keeps its own), and every bucket captured once.
  void init_replay() {
    r2t_dev_ = DeviceBuffer(ctx_, req_to_token_.size() * 4);
    r2t_dev_.write(ctx_, req_to_token_.data(), req_to_token_.size() * 4);
    const int rows = cfg_.max_running;
    const size_t es = dtype_size(cfg_.act_dtype);
    rio_.resize(model_.layers.size());
    rstage_.resize(model_.layers.size());
    for (size_t li = 0; li < model_.layers.size(); ++li) {
      for (int f = 0; f < NUM_FIELDS; ++f) {
        const FieldTable& ft = tables_[li][size_t(f)];
        if (!ft.width) continue;
        const size_t bytes = size_t(rows) * ft.width * dtype_size(ft.dtype);
        rio_[li][size_t(f)] = DeviceBuffer(ctx_, bytes);
        rstage_[li][size_t(f)].assign(bytes, 0);
      }
      ro_.emplace_back(ctx_, size_t(rows) * size_t(out_width(model_.layers[li])) * es);
    }
    ReplayConfig rc;
    rc.max_bs = rows, rc.req_to_token = r2t_dev_.get(), rc.pool_size = pool_rows_, rc.max_ctx = max_ctx_;
    backend_->init_replay_state(rc);
    for (const auto& b : backend_->replay_buckets()) {
      backend_->begin_capture(b.batch_size);
      for (size_t li = 0; li < model_.layers.size(); ++li) backend_->forward(model_.layers[li].layer_id, replay_io(li), true);
      backend_->end_capture();
    }
    const auto info = backend_->replay_buckets();
    report_.replay_mode = info.back().command_buffer
                              ? "one command buffer per step (" + std::to_string(info.back().launches) + " kernels)"
                              : std::to_string(info.back().launches) + " launches per step (" + info.back().fallback + ")";
  }
  LayerIO replay_io(size_t li) {
    LayerIO io;
    for (int f = 0; f < NUM_FIELDS; ++f)
      if (tables_[li][size_t(f)].width) *io_field(io, f) = rio_[li][size_t(f)].get();
    io.o = ro_[li].get();
    return io;
  }
  // The LayerIO member that field f goes to.
  static cl_mem* io_field(LayerIO& io, int f) {
    cl_mem* slot[NUM_FIELDS] = {&io.q, &io.q_pe, &io.k, &io.v, &io.g, &io.beta};
    return slot[f];
  }
  // The step's rows of field f of layer li (request-major) into dst; returns a row's bytes.
  size_t stage_rows(size_t li, int f, uint8_t* dst) const {
    const FieldTable& ft = tables_[li][size_t(f)];
    const size_t rb = size_t(ft.width) * dtype_size(ft.dtype);
    for (size_t t = 0; t < step_toks_.size(); ++t) std::memcpy(dst + t * rb, ft.row(step_toks_[t]), rb);
    return rb;
  }
  // One backend call of the step's attention: markers around it (their end times bound its
  // device time; read after the step's final sync). Returns the call's host seconds.
  template <class Call>
  double attention_call(cl_command_queue q, Call&& call) {
    cl_event before = nullptr, after = nullptr;
    if (ctx_.profiling_enabled()) clEnqueueMarkerWithWaitList(q, 0, nullptr, &before);
    const auto h0 = std::chrono::steady_clock::now();
    call();
    const double host_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - h0).count();
    if (ctx_.profiling_enabled()) {
      clEnqueueMarkerWithWaitList(q, 0, nullptr, &after);
      markers_.push_back(before), markers_.push_back(after);
    }
    return host_s;
  }
  // Mirrors row positions [from, to) of req_to_token to the device (the step's final sync
  // orders it before the host table changes again).
  void sync_row(int row, int from, int to) {
    if (!cfg_.replay || to <= from) return;
    const size_t off = size_t(row) * max_ctx_ + size_t(from);
    clEnqueueWriteBuffer(ctx_.cl_queue(), r2t_dev_.get(), CL_FALSE, off * 4, size_t(to - from) * 4,
                         &req_to_token_[off], 0, nullptr, nullptr);
  }
  // A decode step as one replay: every layer's rows uploaded, the backend's one call timed.
  void replay_step(int B, cl_command_queue q) {
    for (size_t li = 0; li < model_.layers.size(); ++li)
      for (int f = 0; f < NUM_FIELDS; ++f) {
        if (!tables_[li][size_t(f)].width) continue;
        uint8_t* dst = rstage_[li][size_t(f)].data();
        const size_t rb = stage_rows(li, f, dst);
        clEnqueueWriteBuffer(q, rio_[li][size_t(f)].get(), CL_FALSE, 0, rb * size_t(B), dst, 0, nullptr, nullptr);
      }
    report_.decode_host_s += attention_call(q, [&] { backend_->replay(B, pool_idx_.data(), seq_.data()); });
    ++report_.replayed_steps;
  }
  // The buffer layer li's output is in this step.
  const DeviceBuffer& out_of(size_t li) const { return replaying_ ? ro_[li] : o_dev_; }

  // ---------------------------------------------------------------- pages
  int take_page() {
    if (free_pages_.empty()) throw Error(Status::OutOfMemory, "serve-sim: out of KV pages");
    const int p = free_pages_.back();
    free_pages_.pop_back();
    report_.pages_peak_used = std::max(report_.pages_peak_used, num_pages_ - int(free_pages_.size()));
    report_.kv_bytes_peak_used = std::max<int64_t>(report_.kv_bytes_peak_used,
                                                   int64_t(report_.pages_peak_used) * pool_.bytes_per_page());
    return p;
  }
  int pages_needed(const Request& r) const {
    const int total = (r.prompt_len + r.output_len + P_ - 1) / P_;
    return total - (r.shares_prefix ? sys_len_ / P_ : 0);
  }
  // Gives every position < len of row `row` a slot, taking pages as positions cross them.
  void map_tokens(Request& r, int len) {
    int32_t* row = &req_to_token_[size_t(r.row) * max_ctx_];
    for (int pos = r.cached; pos < len; ++pos) {
      if (pos % P_ == 0) {
        if (pos < sys_len_ && r.shares_prefix) {
          // shared system-prompt page: already mapped when admitted
        } else {
          r.own_pages.push_back(take_page());
          --r.reserved_pages, --reserved_;  // a reserved page, now taken
        }
      }
      if (!(pos < sys_len_ && r.shares_prefix)) row[pos] = r.own_pages.back() * P_ + pos % P_;
    }
    sync_row(r.row, r.cached, len);
  }

  // ---------------------------------------------------------------- steps
  void prefill_system_prompt() {
    Request s;
    s.id = -1;
    s.row = 0;
    s.toks = sys_toks_;
    s.prompt_len = sys_len_;
    s.reserved_pages = sys_len_ / P_;
    reserved_ += s.reserved_pages;
    std::vector<Request*> batch{&s};
    std::vector<int> lens{sys_len_};
    forward_step(ForwardMode::Extend, batch, lens);
    sys_pages_ = s.own_pages;
    report_.prompt_tokens += sys_len_;
  }

  void step() {
    // Admit what fits: a free row, the prefill budget, pages for the whole request.
    std::vector<Request*> fresh;
    int budget = cfg_.prefill_token_budget;
    while (!waiting_.empty() && !free_rows_.empty()) {
      Request& w = waiting_.front();
      w.shares_prefix = sys_len_ > 0;
      const int new_toks = w.prompt_len - (w.shares_prefix ? sys_len_ : 0);
      const int need = pages_needed(w);
      if (new_toks > budget && !fresh.empty()) break;
      if (need > int(free_pages_.size()) - reserved_) break;
      budget -= new_toks;
      w.row = free_rows_.back();
      free_rows_.pop_back();
      w.reserved_pages = need;
      reserved_ += need;
      if (w.shares_prefix) {
        int32_t* row = &req_to_token_[size_t(w.row) * max_ctx_];
        std::copy(req_to_token_.begin(), req_to_token_.begin() + sys_len_, row);
        sync_row(w.row, 0, sys_len_);
        w.cached = sys_len_;
        report_.cached_prefix_tokens += sys_len_;
      }
      running_.push_back(w);
      waiting_.pop_front();
      fresh.push_back(&running_.back());
    }
    if (has_linear_)
      for (Request* r : fresh)
        if (r->shares_prefix) {  // fork the system prompt's state
          pool_.copy_state(ctx_, 0, r->row);
          if (compare_) compare_pool_.copy_state(ctx_, 0, r->row);
        }
    if (running_.empty() && fresh.empty())
      throw Error(Status::OutOfMemory, "serve-sim: the KV pool (" + std::to_string(num_pages_) +
                                           " pages) cannot hold the next request; raise --pages");
    std::vector<Request*> batch;
    std::vector<int> lens;
    ForwardMode mode = ForwardMode::Decode;
    const bool decoding = running_.size() > fresh.size();
    if (!fresh.empty() && (!decoding || cfg_.mixed)) {
      mode = decoding ? ForwardMode::Mixed : ForwardMode::Extend;
      for (auto& r : running_) {
        const bool is_new = std::find(fresh.begin(), fresh.end(), &r) != fresh.end();
        if (!is_new && !cfg_.mixed) continue;
        batch.push_back(&r);
        lens.push_back(is_new ? r.prompt_len - r.cached : 1);
      }
    } else {
      if (!fresh.empty()) {  // no mixing: prefill the new requests first
        mode = ForwardMode::Extend;
        for (Request* r : fresh) batch.push_back(r), lens.push_back(r->prompt_len - r->cached);
      } else {
        for (auto& r : running_) batch.push_back(&r), lens.push_back(1);
      }
    }
    for (size_t i = 0; i < batch.size(); ++i)
      if (lens[i] > 1 || batch[i]->generated == 0) report_.prompt_tokens += lens[i];
    forward_step(mode, batch, lens);
    // Retire finished requests: free their own pages and their row.
    for (auto it = running_.begin(); it != running_.end();) {
      if (it->generated >= it->output_len) {
        for (int p : it->own_pages) free_pages_.push_back(p);
        reserved_ -= it->reserved_pages;
        free_rows_.push_back(it->row);
        ++finished_;
        it = running_.erase(it);
      } else {
        ++it;
      }
    }
  }

  // Runs one step over `batch` (lens[i] new tokens each): metadata, every layer, checks,
  // then the next token of every request from the last layer's output.
  void forward_step(ForwardMode mode, std::vector<Request*>& batch, const std::vector<int>& lens) {
    const auto t0 = std::chrono::steady_clock::now();
    const double check0 = check_s_;
    step_mode_ = mode;
    const int B = int(batch.size());
    pool_idx_.assign(size_t(B), 0), seq_.assign(size_t(B), 0), prefix_.assign(size_t(B), 0), ext_.assign(size_t(B), 0);
    int64_t T = 0;
    for (int i = 0; i < B; ++i) {
      Request& r = *batch[size_t(i)];
      const int len = r.cached + lens[size_t(i)];
      map_tokens(r, len);
      pool_idx_[size_t(i)] = r.row, prefix_[size_t(i)] = r.cached, ext_[size_t(i)] = lens[size_t(i)], seq_[size_t(i)] = len;
      T += lens[size_t(i)];
    }
    if (T > max_tokens_) throw Error(Status::Internal, "serve-sim: step exceeds the staging size");
    ForwardBatch fb;
    fb.mode = mode;
    fb.batch_size = B;
    fb.req_to_token = req_to_token_.data();
    fb.pool_size = pool_rows_;
    fb.max_ctx = max_ctx_;
    fb.req_pool_indices = pool_idx_.data();
    fb.seq_lens = seq_.data();
    if (mode != ForwardMode::Decode) fb.prefix_lens = prefix_.data(), fb.extend_lens = ext_.data();
    const unsigned long long allocs0 = device_allocation_count();
    replaying_ = cfg_.replay && mode == ForwardMode::Decode && backend_->replay_bucket(B) > 0;
    double host_s = 0;
    if (!replaying_) {
      const auto h0 = std::chrono::steady_clock::now();
      backend_->init_forward_metadata(fb);
      host_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - h0).count();
    }
    if (compare_) compare_->init_forward_metadata(fb);

    // The step's token ids, request-major (the q/k/v rows of every layer).
    step_toks_.clear();
    for (int i = 0; i < B; ++i)
      for (int p = prefix_[size_t(i)]; p < seq_[size_t(i)]; ++p) step_toks_.push_back(batch[size_t(i)]->toks[size_t(p)]);

    const bool check_step = cfg_.check_every > 0 && (report_.steps % cfg_.check_every == 0);
    std::map<int, bool> kind_checked;
    double attn_s = 0;
    cl_command_queue q = ctx_.cl_queue();
    if (replaying_) replay_step(B, q);
    for (size_t li = 0; li < model_.layers.size(); ++li) {
      const LayerSpec& l = model_.layers[li];
      const int kind = int(l.kind) + (hsa_.layers.count(l.layer_id) ? 8 : 0);  // HSA layers: a kind of their own
      // The layer's check, for the first layer of each kind (or every layer) of a checked step.
      auto check_if_due = [&] {
        if (check_step && (cfg_.check_all_layers || !kind_checked[kind]) && T > 0) {
          kind_checked[kind] = true;
          check_layer(li, batch);
        }
      };
      if (replaying_) {  // run by the replay: the checks only
        check_if_due();
        continue;
      }
      const int s = int(li % 2);
      LayerIO io;
      for (int f = 0; f < NUM_FIELDS; ++f) {
        const FieldTable& ft = tables_[li][size_t(f)];
        if (!ft.width) continue;
        if (pending_[s][f]) {  // the staging half we reuse: its previous upload must be done
          clWaitForEvents(1, &pending_[s][f]);
          clReleaseEvent(pending_[s][f]);
          pending_[s][f] = nullptr;
        }
        uint8_t* dst = staging_[s][f].data();
        const size_t rb = stage_rows(li, f, dst);
        if (T > 0)
          clEnqueueWriteBuffer(q, dev_[s][f].get(), CL_FALSE, 0, rb * size_t(T), dst, 0, nullptr, &pending_[s][f]);
        *io_field(io, f) = dev_[s][f].get();
      }
      io.o = o_dev_.get();
      // The layer's append + attention kernels only, between the markers.
      host_s += attention_call(q, [&] { backend_->forward(l.layer_id, io, true); });
      if (compare_ && T > 0) compare_layer(li, io, T);
      check_if_due();
    }
    next_tokens(batch);  // syncs the queue
    // In an in-order queue a layer cannot start before the previous layer's end marker;
    // clamping to it keeps drivers that stamp markers at submission from double counting.
    cl_ulong prev_end = 0;
    for (size_t m = 0; m + 1 < markers_.size(); m += 2) {  // marker pair m / 2: layer m / 2
      cl_ulong t0 = 0, t1 = 0;
      clGetEventProfilingInfo(markers_[m], CL_PROFILING_COMMAND_END, sizeof t0, &t0, nullptr);
      clGetEventProfilingInfo(markers_[m + 1], CL_PROFILING_COMMAND_END, sizeof t1, &t1, nullptr);
      t0 = std::max(t0, prev_end);
      const double dt = t1 > t0 ? double(t1 - t0) * 1e-9 : 0.0;
      attn_s += dt;
      if (mode == ForwardMode::Decode && !replaying_ && hsa_.layers.count(model_.layers[m / 2].layer_id))
        report_.hsa_decode_s += dt;
      prev_end = std::max(prev_end, t1);
    }
    for (auto& m : markers_) clReleaseEvent(m);
    markers_.clear();
    ++report_.steps;
    report_.attention_s += attn_s;
    if (mode == ForwardMode::Decode) {
      ++report_.decode_steps;
      report_.decode_attention_s += attn_s;
      report_.decode_kv_bytes += decode_bytes(batch);
      if (finished_ * 2 >= cfg_.num_requests) report_.steady_decode_allocations += device_allocation_count() - allocs0;
      report_.decode_tokens += B;
      if (!replaying_) report_.decode_host_s += host_s;
      report_.decode_wall_s +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() - (check_s_ - check0);
    } else {
      ++(mode == ForwardMode::Mixed ? report_.mixed_steps : report_.extend_steps);
    }
    for (int i = 0; i < B; ++i) batch[size_t(i)]->cached = seq_[size_t(i)];
  }

  // Bytes one decode step's attention reads: KV (window-limited; HSA: landmarks, selected
  // pages, window) or state read + write.
  double decode_bytes(const std::vector<Request*>& batch) {
    double bytes = 0;
    for (const auto& l : model_.layers)
      for (size_t i = 0; i < batch.size(); ++i) {
        const double len = seq_[i];
        const double keys = l.window_left >= 0 ? std::min(len, double(l.window_left + 1)) : len;
        if (hsa_.layers.count(l.layer_id)) {
          const double read = hsa_decode_bytes(hsa_, l, seq_[i], P_, cfg_.kv_dtype);
          bytes += read;
          report_.hsa_read_bytes += read;
          report_.hsa_dense_bytes += keys * 2.0 * l.num_kv_heads * l.head_dim * double(dtype_size(cfg_.kv_dtype));
        } else if (l.kind == LayerKind::MHA)
          bytes += keys * 2.0 * l.num_kv_heads * mha_row_bytes(l.head_dim);
        else if (l.kind == LayerKind::MLA)  // int8: the row and its (ckv, kpe) scale pair
          bytes += keys * ((kMlaCkvDim + kMlaKpeDim) * double(dtype_size(cfg_.kv_dtype)) +
                           (cfg_.kv_dtype == DType::I8 ? 2.0 * dtype_size(cfg_.kv_scale_dtype) : 0.0));
        else
          bytes += 2.0 * l.linear.num_v_heads * l.linear.head_dim_k * l.linear.head_dim_v * double(dtype_size(DType::F32));
      }
    return bytes;
  }

  // Next token = a hash of the last layer's output row of each request's last new token.
  void next_tokens(std::vector<Request*>& batch) {
    const LayerSpec& last = model_.layers.back();
    const size_t es = dtype_size(cfg_.act_dtype);
    const size_t rb = size_t(out_width(last)) * es;
    last_rows_.resize(batch.size() * rb);
    int64_t row = -1;
    for (size_t i = 0; i < batch.size(); ++i) {
      row += ext_[i];
      if (ext_[i] == 0) continue;
      clEnqueueReadBuffer(ctx_.cl_queue(), out_of(model_.layers.size() - 1).get(), CL_FALSE, size_t(row) * rb, rb,
                          &last_rows_[i * rb], 0, nullptr, nullptr);
    }
    ctx_.finish();
    for (size_t i = 0; i < batch.size(); ++i) {
      Request& r = *batch[i];
      // A chunk without the prompt's end, or the system prompt (output_len 0), generates nothing.
      if (ext_[i] == 0 || seq_[i] < r.prompt_len || r.generated >= r.output_len) continue;
      int best = 0;
      double best_v = -1e300;
      const int n = std::min<int>(kVocab, int(out_width(last)));
      for (int k = 0; k < n; ++k) {
        const double v = decode_value(&last_rows_[i * rb + size_t(k) * es], cfg_.act_dtype);
        if (v > best_v) best_v = v, best = k;
      }
      ++r.generated;
      ++report_.generated_tokens;
      if (r.generated < r.output_len) r.toks.push_back((best * 31 + int(r.toks.size())) % kVocab);
    }
  }

  // Bytes decode reads per key, KV head and side of an MHA layer: the row and its scale
  // (int8) or its [scale, zero] pairs (int4, two nibbles a byte).
  double mha_row_bytes(int D) const {
    if (cfg_.kv_dtype == DType::I8) return D + double(dtype_size(cfg_.kv_scale_dtype));
    if (cfg_.kv_dtype == DType::I4) return D / 2.0 + 2.0 * (D / cfg_.kv_quant_group) * dtype_size(cfg_.kv_scale_dtype);
    return double(D) * dtype_size(cfg_.kv_dtype);
  }

  // ---------------------------------------------------------------- reference checks
  std::vector<double> field_rows(size_t li, Field f, const Request& r, int from, int to, DType store) const {
    const FieldTable& ft = tables_[li][size_t(f)];
    std::vector<double> out(size_t(to - from) * ft.width);
    if (store == DType::I8) {  // each (token, KV head) row quantised with its own scale
      // MLA: the K field is the ckv part, V the kpe part; each part of a token has its own
      // scale (ref::int8_quantize_latent is int8_quantize_row on each part).
      const LayerSpec& l = model_.layers[li];
      const int D = l.kind == LayerKind::MLA ? ft.width : l.head_dim;
      std::vector<float> row(static_cast<size_t>(D));
      std::vector<int8_t> q(static_cast<size_t>(D));
      for (int p = from; p < to; ++p)
        for (int h = 0; h < ft.width / D; ++h) {
          for (int d = 0; d < D; ++d) row[size_t(d)] = float(ft.at(r.toks[size_t(p)], h * D + d));
          float scale = 0;
          ref::int8_quantize_row(row.data(), D, cfg_.kv_scale_dtype == DType::F16, q.data(), &scale);
          ref::int8_dequantize_row(q.data(), D, scale, &out[size_t(p - from) * ft.width + size_t(h) * D]);
        }
      return out;
    }
    if (store == DType::I4) {  // each group of each (token, KV head) row with its scale and zero
      const int D = model_.layers[li].head_dim, G = cfg_.kv_quant_group;
      std::vector<float> grp(static_cast<size_t>(G));
      std::vector<uint8_t> u(static_cast<size_t>(G));
      for (int p = from; p < to; ++p)
        for (int h = 0; h < ft.width / D; ++h)
          for (int g0 = 0; g0 < D; g0 += G) {
            for (int d = 0; d < G; ++d) grp[size_t(d)] = float(ft.at(r.toks[size_t(p)], h * D + g0 + d));
            float scale = 0, zero = 0;
            ref::int4_quantize_group(grp.data(), G, cfg_.kv_scale_dtype == DType::F16, u.data(), &scale, &zero);
            ref::int4_dequantize_group(u.data(), G, scale, zero, &out[size_t(p - from) * ft.width + size_t(h) * D + g0]);
          }
      return out;
    }
    for (int p = from; p < to; ++p)
      for (int i = 0; i < ft.width; ++i) {
        const double x = ft.at(r.toks[size_t(p)], i);
        out[size_t(p - from) * ft.width + i] = store == ft.dtype ? x : store_round(x, store);
      }
    return out;
  }

  // The layer once more on the compare pool (same inputs), and its outputs against this
  // run's: the error the cache format costs end to end (Report::compare_*).
  void compare_layer(size_t li, const LayerIO& io, int64_t T) {
    const LayerSpec& l = model_.layers[li];
    ctx_.finish();  // this run's layer first: the compare run stays out of the figures
    const auto c0 = std::chrono::steady_clock::now();
    LayerIO c = io;
    c.o = compare_o_.get();
    compare_->forward(l.layer_id, c, true);
    const size_t es = dtype_size(cfg_.act_dtype), n = size_t(T) * size_t(out_width(l));
    std::vector<uint8_t> got(n * es), base(n * es);
    o_dev_.read(ctx_, got.data(), got.size());
    compare_o_.read(ctx_, base.data(), base.size());
    for (size_t e = 0; e < n; ++e) {
      const double g = decode_value(&got[e * es], cfg_.act_dtype), b = decode_value(&base[e * es], cfg_.act_dtype);
      const double err = std::fabs(g - b);
      report_.compare_max_abs = std::max(report_.compare_max_abs, err);
      report_.compare_max_ref = std::max(report_.compare_max_ref, std::fabs(b));
      report_.compare_sq_err += err * err;
      report_.compare_sq_ref += b * b;
    }
    report_.compare_outputs += int64_t(n);
    ++report_.compare_layer_calls;
    check_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - c0).count();
  }

  void check_layer(size_t li, const std::vector<Request*>& batch) {
    ctx_.finish();  // the layer's device time is not check time
    const auto c0 = std::chrono::steady_clock::now();
    const LayerSpec& l = model_.layers[li];
    const int64_t W = out_width(l);
    const size_t es = dtype_size(cfg_.act_dtype);
    // Requests to check: a spread over the batch.
    const int B = int(batch.size());
    const int n = std::min(B, std::max(1, cfg_.check_requests));
    std::vector<int64_t> first(size_t(B) + 1, 0);
    for (int i = 0; i < B; ++i) first[size_t(i) + 1] = first[size_t(i)] + ext_[size_t(i)];
    const double tol = cfg_.act_dtype == DType::F32 ? 2e-3 : cfg_.act_dtype == DType::F16 ? 1e-2 : 4e-2;
    for (int k = 0; k < n; ++k) {
      const int i = (k * B) / n;
      const Request& r = *batch[size_t(i)];
      const int qn = ext_[size_t(i)], len = seq_[size_t(i)];
      if (qn == 0) continue;
      std::vector<uint8_t> got_b(size_t(qn) * W * es);
      out_of(li).read(ctx_, got_b.data(), got_b.size(), size_t(first[size_t(i)]) * W * es);
      std::vector<double> want(size_t(qn) * W), alt;
      if (step_mode_ == ForwardMode::Decode && hsa_.layers.count(l.layer_id)) {
        auto qv = field_rows(li, Q, r, len - 1, len, cfg_.act_dtype);
        auto kv = field_rows(li, K, r, 0, len, cfg_.kv_dtype);
        auto vv = field_rows(li, V, r, 0, len, cfg_.kv_dtype);
        std::vector<int32_t> pages(size_t((len + P_ - 1) / P_));
        for (size_t j = 0; j < pages.size(); ++j) pages[j] = req_to_token_[size_t(r.row) * max_ctx_ + j * P_] / P_;
        auto sk = sinks_host_.find(l.layer_id);
        hsa_reference(hsa_, l, len, P_, num_pages_, qv.data(), kv.data(), vv.data(), pages.data(),
                      sk != sinks_host_.end() ? sk->second.data() : nullptr, want, alt);
      } else if (l.kind == LayerKind::MHA) {
        auto qv = field_rows(li, Q, r, len - qn, len, cfg_.act_dtype);
        auto kv = field_rows(li, K, r, 0, len, cfg_.kv_dtype);
        auto vv = field_rows(li, V, r, 0, len, cfg_.kv_dtype);
        ref::AttnOptions o;
        o.sm_scale = l.sm_scale > 0 ? l.sm_scale : 1.0 / std::sqrt(double(l.head_dim));
        o.logits_soft_cap = l.logits_soft_cap;
        o.window_left = l.window_left;
        auto sk = sinks_host_.find(l.layer_id);
        if (sk != sinks_host_.end()) o.sinks = sk->second.data();
        ref::attention(qv.data(), kv.data(), vv.data(), qn, len, l.num_qo_heads, l.num_kv_heads, l.head_dim, l.head_dim, o,
                       want.data(), nullptr);
      } else if (l.kind == LayerKind::MLA) {
        auto qn_ = field_rows(li, Q, r, len - qn, len, cfg_.act_dtype);
        auto qp = field_rows(li, QPE, r, len - qn, len, cfg_.act_dtype);
        auto ckv = field_rows(li, K, r, 0, len, cfg_.kv_dtype);
        auto kpe = field_rows(li, V, r, 0, len, cfg_.kv_dtype);
        ref::mla_attention(qn_.data(), qp.data(), ckv.data(), kpe.data(), qn, len, l.num_qo_heads, kMlaCkvDim, kMlaKpeDim,
                           l.sm_scale, true, want.data(), nullptr);
      } else {
        const auto& c = l.linear;
        auto qv = field_rows(li, Q, r, 0, len, cfg_.act_dtype);
        auto kv = field_rows(li, K, r, 0, len, cfg_.act_dtype);
        auto vv = field_rows(li, V, r, 0, len, cfg_.act_dtype);
        auto g = field_rows(li, G, r, 0, len, DType::F32);
        std::vector<double> state(size_t(c.num_v_heads) * c.head_dim_k * c.head_dim_v, 0.0);
        std::vector<double> all(size_t(len) * W);
        const double scale = c.scale > 0 ? c.scale : 1.0 / std::sqrt(double(c.head_dim_k));
        if (l.linear_kind == LinearKind::GDN) {
          auto beta = field_rows(li, BETA, r, 0, len, DType::F32);
          ref::gdn_recurrent(qv.data(), kv.data(), vv.data(), g.data(), beta.data(), len, c.num_qk_heads, c.num_v_heads,
                             c.head_dim_k, c.head_dim_v, scale, c.l2norm_qk, state.data(), all.data());
        } else {
          ref::gla_recurrent(qv.data(), kv.data(), vv.data(), g.data(), len, c.num_qk_heads, c.num_v_heads, c.head_dim_k,
                             c.head_dim_v, scale, state.data(), all.data());
        }
        std::copy(all.end() - std::ptrdiff_t(want.size()), all.end(), want.begin());
      }
      auto got_at = [&](size_t e) { return decode_value(&got_b[e * es], cfg_.act_dtype); };
      auto within = [&](double got, double w) { return std::fabs(got - w) <= tol + tol * std::fabs(w); };
      if (!alt.empty())  // a head whose selection list was near a tie may match either selection
        for (size_t h = 0; h < size_t(l.num_qo_heads); ++h) {
          const size_t D = size_t(l.head_dim);
          bool primary = true, other = true;
          for (size_t e = h * D; e < (h + 1) * D; ++e)
            primary &= within(got_at(e), want[e]), other &= within(got_at(e), alt[e]);
          if (!primary && other) std::copy_n(alt.begin() + std::ptrdiff_t(h * D), D, want.begin() + std::ptrdiff_t(h * D));
        }
      double worst = 0, worst_want = 0, worst_got = 0;
      size_t worst_at = 0;
      bool bad = false;
      for (size_t e = 0; e < want.size(); ++e) {
        const double got = got_at(e);
        const double err = std::fabs(got - want[e]);
        if (!(err <= tol + tol * std::fabs(want[e]))) bad = true;
        if (!(err <= worst)) worst = err, worst_at = e, worst_want = want[e], worst_got = got;
      }
      ++report_.checks;
      report_.max_abs_err = std::max(report_.max_abs_err, worst);
      if (bad) {
        ++report_.mismatches;
        if (report_.failures.size() < 5) {
          std::ostringstream m;
          m << "step " << report_.steps << " layer " << l.layer_id << " (" << layer_kind_name(l.kind)
            << (step_mode_ == ForwardMode::Decode && hsa_.layers.count(l.layer_id) ? ", hsa" : "") << ") request "
            << r.id << " (" << qn << " new of " << len << " tokens): element " << worst_at << " got " << worst_got
            << " want " << worst_want;
          report_.failures.push_back(m.str());
        }
      }
    }
    check_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - c0).count();
  }

  const Context& ctx_;
  Config cfg_;
  std::mt19937_64 rng_;
  Model model_;
  HsaSetup hsa_;
  ForwardMode step_mode_ = ForwardMode::Decode;
  int P_ = 16, sys_len_ = 0, max_ctx_ = 0, pool_rows_ = 0, num_pages_ = 0;
  int64_t max_tokens_ = 0;
  bool has_linear_ = false, has_paged_ = false;
  KVPool pool_, compare_pool_;
  std::string backend_name_;
  std::unique_ptr<AttentionBackend> backend_, compare_;
  DeviceBuffer compare_o_;
  std::vector<std::array<FieldTable, NUM_FIELDS>> tables_;
  std::vector<uint8_t> staging_[2][NUM_FIELDS];
  DeviceBuffer dev_[2][NUM_FIELDS];
  cl_event pending_[2][NUM_FIELDS] = {};
  std::vector<cl_event> markers_;
  DeviceBuffer o_dev_;
  std::vector<DeviceBuffer> sinks_dev_;
  std::map<int, std::vector<double>> sinks_host_;
  std::vector<int32_t> req_to_token_;
  // Replay (Config::replay): req_to_token on the device, per-layer inputs and outputs.
  DeviceBuffer r2t_dev_;
  std::vector<std::array<DeviceBuffer, NUM_FIELDS>> rio_;
  std::vector<std::array<std::vector<uint8_t>, NUM_FIELDS>> rstage_;
  std::vector<DeviceBuffer> ro_;
  bool replaying_ = false;  // this step is a replay
  std::vector<int> free_pages_, free_rows_, sys_pages_, sys_toks_;
  int reserved_ = 0, finished_ = 0;  // reserved_: pages promised to admitted requests, not yet taken
  std::deque<Request> waiting_;
  std::list<Request> running_;
  std::vector<int32_t> pool_idx_, seq_, prefix_, ext_;
  std::vector<int> step_toks_;
  std::vector<uint8_t> last_rows_;
  double check_s_ = 0;
  Report report_;
};

}  // namespace

std::optional<ConfigProblem> check(const Config& c) {
  auto at_least = [](const char* opt, int v, int lo, const char* note = "") -> std::optional<ConfigProblem> {
    if (v >= lo) return std::nullopt;
    return ConfigProblem{opt, "must be at least " + std::to_string(lo) + note + ", got " + std::to_string(v)};
  };
  const auto names = preset_names();
  if (std::find(names.begin(), names.end(), c.model) == names.end()) {
    std::string known;
    for (const auto& n : names) known += " " + n;
    return ConfigProblem{"--model", "'" + c.model + "' is not a preset (one of" + known + ")"};
  }
  for (auto p : {at_least("--layers", c.num_layers, 0, " (0 = the preset's depth)"),
                 at_least("--page-size", c.page_size, 0, " (0 = the preset's)"),
                 at_least("--requests", c.num_requests, 1), at_least("--max-running", c.max_running, 1),
                 at_least("--system-prompt", c.system_prompt, 0), at_least("--prompt-min", c.prompt_min, 1),
                 at_least("--output-min", c.output_min, 1), at_least("--prefill-budget", c.prefill_token_budget, 1),
                 at_least("--pages", c.num_pages, 0, " (0 = enough for every request)"),
                 at_least("--check-every", c.check_every, 0, " (0 = never)"),
                 at_least("--check-requests", c.check_requests, 1)})
    if (p) return p;
  if (c.prompt_max < c.prompt_min)
    return ConfigProblem{"--prompt-max", "is " + std::to_string(c.prompt_max) + ", below --prompt-min " +
                                             std::to_string(c.prompt_min)};
  if (c.output_max < c.output_min)
    return ConfigProblem{"--output-max", "is " + std::to_string(c.output_max) + ", below --output-min " +
                                             std::to_string(c.output_min)};
  if (c.kv_scale_dtype != DType::F32 && c.kv_scale_dtype != DType::F16)
    return ConfigProblem{"--kv-scale-dtype", std::string("is ") + dtype_name(c.kv_scale_dtype) + ", not f32 or f16"};
  // int8 caches: MHA layers and MLA latents, not under HSA (its page selection reads float
  // caches); int4: MHA layers only (the MLA latent cache has no int4 form).
  const bool int8 = c.kv_dtype == DType::I8 || (c.compare_kv && *c.compare_kv == DType::I8);
  const char* int8_opt = c.kv_dtype == DType::I8 ? "--kv-dtype" : "--compare-kv";
  if (c.kv_dtype == DType::I4 || (c.compare_kv && *c.compare_kv == DType::I4))
    for (const auto& l : preset(c.model, c.num_layers).layers)
      if (l.kind == LayerKind::MLA)
        return ConfigProblem{c.kv_dtype == DType::I4 ? "--kv-dtype" : "--compare-kv",
                             "int4: model " + c.model + " has MLA layers, whose latent cache has no int4 form"};
  if (c.hsa_topk != 0 || c.hsa_window >= 0 || !c.hsa_strategy.empty() || c.hsa_no_fuse || !c.hsa_layers.empty() ||
      c.backend == "hsa" || c.prefill_backend == "hsa" || c.decode_backend == "hsa" || preset(c.model, 1).hsa.topk > 0) {
    HsaSetup h;
    if (auto p = resolve_hsa(c, preset(c.model, c.num_layers), h)) return p;
    if (int8 && h.on) return ConfigProblem{int8_opt, "int8: HSA's page selection reads float caches only"};
  }
  if (c.replay) {  // the paged backends replay; MHA layers only, no second pool
    const Model m = preset(c.model, c.num_layers);
    const std::string be = c.backend.empty() ? m.backend : c.backend;
    if (be != "paged" && be != "paged_table")
      return ConfigProblem{"--replay", "needs the paged or paged_table backend (model " + c.model + " is served by " + be + ")"};
    for (const auto& l : m.layers)
      if (l.kind != LayerKind::MHA) return ConfigProblem{"--replay", "needs a model of MHA layers only"};
    if (c.compare_kv) return ConfigProblem{"--replay", "does not combine with --compare-kv"};
    if (c.hsa_topk != 0 || m.hsa.topk > 0) return ConfigProblem{"--replay", "does not combine with HSA"};
  }
  if (c.num_pages > 0) {  // the longest request must fit: its own pages plus the shared prefix's
    const int P = c.page_size > 0 ? c.page_size : preset(c.model, 1).page_size;
    const int64_t tokens = int64_t((c.system_prompt + P - 1) / P) * P + c.prompt_max + c.output_max;
    const int64_t need = (tokens + P - 1) / P;
    if (c.num_pages < need)
      return ConfigProblem{"--pages", std::to_string(c.num_pages) + " cannot hold the longest request (" +
                                          std::to_string(tokens) + " tokens with the shared prefix: " +
                                          std::to_string(need) + " pages of " + std::to_string(P) + ")"};
  }
  return std::nullopt;
}

Report run(const Context& ctx, const Config& cfg) {
  if (auto p = check(cfg)) throw Error(Status::InvalidArgument, "serve-sim: " + p->option + " " + p->why);
  Engine e(ctx, cfg);
  return e.run();
}

}  // namespace clattn::sim
