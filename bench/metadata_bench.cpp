// clattn-bench metadata: host build / validate time and device builder time for the
// paged-KV metadata (include/clattn/metadata.hpp), B = 1, 64, 256, 1024 at 4k, 32k and
// mixed 4k..32k contexts. The bar is FlashInfer's host plan: tens of microseconds for
// B = 256 (its plan builds no indices; SGLang builds those on the GPU, which is what the
// device builders do). Host times: std::chrono, median of repeated runs. Device times:
// OpenCL profiling markers around the enqueue (Harness::time_ms, median); "enqueue" is
// the host wall time of the build_*_device call itself. Host builders write into reused
// outputs (steady state of an engine loop): fresh allocations measure the allocator and
// page faults instead (in this sandbox VM, first touch of 32 MB costs ~150 ms).
#include <algorithm>
#include <chrono>
#include <clattn/metadata.hpp>
#include <cstdio>
#include <fstream>
#include <numeric>
#include <random>
#include <sstream>

#include "backends/planner/split_kv.hpp"
#include "bench/bench.hpp"
#include "tools/cli.hpp"

namespace clattn::bench {
namespace {

struct Case {
  int B, P, ctx_lo, ctx_hi;
  std::string ctx_name;
};

struct HostBatch {
  int P = 1, max_ctx = 0, num_pages = 0;
  std::vector<int32_t> req_to_token, rpi, seq;
  EngineBatch view() const {
    EngineBatch b;
    b.req_to_token = req_to_token.data();
    b.pool_size = int(rpi.size());
    b.max_ctx = max_ctx;
    b.req_pool_indices = rpi.data();
    b.seq_lens = seq.data();
    b.batch_size = int(seq.size());
    return b;
  }
};

// Decode batch: B requests with lengths in [lo, hi], whole pages taken from a shuffled
// free list (the access pattern of a long-running allocator), pool rows in shuffled order.
HostBatch make_batch(const Case& c, uint64_t seed) {
  std::mt19937_64 rng(seed);
  HostBatch h;
  h.P = c.P;
  h.max_ctx = c.ctx_hi;
  const int pages_per_req = (c.ctx_hi + c.P - 1) / c.P;
  h.num_pages = c.B * pages_per_req;
  std::vector<int32_t> pages(size_t(h.num_pages));
  std::iota(pages.begin(), pages.end(), 0);
  std::shuffle(pages.begin(), pages.end(), rng);
  h.rpi.resize(size_t(c.B));
  std::iota(h.rpi.begin(), h.rpi.end(), 0);
  std::shuffle(h.rpi.begin(), h.rpi.end(), rng);
  h.req_to_token.assign(size_t(c.B) * size_t(h.max_ctx), -1);
  std::uniform_int_distribution<int> len(c.ctx_lo, c.ctx_hi);
  for (int i = 0; i < c.B; ++i) {
    int s = len(rng);
    h.seq.push_back(s);
    int32_t* row = h.req_to_token.data() + size_t(h.rpi[size_t(i)]) * size_t(h.max_ctx);
    const int32_t* mine = pages.data() + size_t(i) * size_t(pages_per_req);
    for (int t = 0; t < s; ++t) row[t] = mine[t / c.P] * c.P + t % c.P;
  }
  return h;
}

// Median microseconds of fn over enough runs to fill ~min_s seconds (3..max_reps runs).
template <class F>
double host_us(F&& fn, int max_reps, double min_s = 0.2) {
  using clk = std::chrono::steady_clock;
  std::vector<double> t;
  auto begin = clk::now();
  for (int r = 0; r < max_reps; ++r) {
    auto a = clk::now();
    fn();
    auto b = clk::now();
    t.push_back(std::chrono::duration<double, std::micro>(b - a).count());
    if (r >= 2 && std::chrono::duration<double>(b - begin).count() > min_s) break;
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

struct Options {
  std::string page_sizes = "16,1";
  std::string batches = "1,64,256,1024";
  int max_reps = 2000;
  bool device = true;
};

std::vector<int> parse_list(const std::string& s) {  // (checked by positive_list)
  std::vector<int> v;
  std::stringstream ss(s);
  std::string tok;
  while (std::getline(ss, tok, ','))
    if (!tok.empty()) v.push_back(std::stoi(tok));
  return v;
}

// --page-sizes / --batches: comma-separated integers >= 1, at least one.
CLI::Validator positive_list() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        std::stringstream ss(s);
        std::string tok;
        int n = 0;
        while (std::getline(ss, tok, ',')) {
          if (tok.empty()) continue;
          int v = 0;
          if (!CLI::detail::lexical_cast(tok, v) || v < 1) return "'" + tok + "' is not an integer >= 1";
          ++n;
        }
        return n ? std::string() : "wants comma-separated integers >= 1, got '" + s + "'";
      },
      "N[,N...]");
}

void json_row(Harness& h, const Case& c, const std::string& what, const std::string& where, double us) {
  if (h.json_out.empty()) return;
  std::ofstream out(h.json_out, std::ios::app);
  out << "{\"op\":\"metadata." << what << "\",\"where\":\"" << where << "\",\"B\":" << c.B << ",\"P\":" << c.P
      << ",\"ctx\":\"" << c.ctx_name << "\",\"us\":" << us << ",\"device\":\"" << h.ctx().profile().device_name
      << "\"}\n";
}

void run(Harness& h, const Options& o) {
  if (o.device) h.ctx();  // prints the device line before the table
  std::printf(
      "# metadata: decode batches; host = this process's CPU (std::chrono, median), device = OpenCL "
      "profiling markers (median of %d after %d warm-up)\n",
      h.iters, h.warmup);
  std::printf("# bar: FlashInfer's host plan, tens of us at B = 256 (it builds no page indices)\n");
  std::printf("%-5s %-4s %-10s %8s | %10s %10s %10s %10s %11s %9s |", "B", "P", "ctx", "pages", "csr", "table", "slots",
              "val_csr", "val_batch", "split_kv");
  if (o.device) std::printf(" %10s %10s %10s %10s", "dev_csr", "dev_table", "dev_slots", "enqueue");
  std::printf("   (microseconds)\n");
  std::fflush(stdout);

  const struct {
    int lo, hi;
    const char* name;
  } ctxs[] = {{4096, 4096, "4k"}, {32768, 32768, "32k"}, {4096, 32768, "4k..32k"}};
  for (int P : parse_list(o.page_sizes)) {
    for (int B : parse_list(o.batches)) {
      for (auto& cx : ctxs) {
        Case c{B, P, cx.lo, cx.hi, cx.name};
        HostBatch hb = make_batch(c, 1234 + uint64_t(B) * 7 + uint64_t(P));
        EngineBatch b = hb.view();
        CacheShape cache{hb.num_pages, P};

        PagedCsr csr = build_csr(b, P);
        // Steady state: outputs reused across steps (the into-overloads keep capacity).
        PageTable table_out;
        std::vector<int32_t> slots_out;
        double t_csr = host_us([&] { build_csr(b, P, -1, csr); }, o.max_reps);
        double t_table = host_us([&] { build_page_table(b, P, 0, table_out); }, o.max_reps);
        double t_slots = host_us([&] { build_slot_mapping(b, slots_out); }, o.max_reps);
        double t_vcsr = host_us([&] { validate(csr, cache, hb.seq.data()); }, o.max_reps);
        double t_vbatch = host_us([&] { validate(b, cache); }, o.max_reps);
        // The decode split-K planner on the same batch, H100-like device (132 CUs x 4
        // resident work-groups, 8 KV heads per request), as decode_plan runs it.
        std::vector<int32_t> kbeg(static_cast<size_t>(B), 0), kend(static_cast<size_t>(B), 0);
        for (int i = 0; i < B; ++i) kend[size_t(i)] = csr.kv_len(i);
        planner::SplitKVConfig scfg;
        scfg.units_per_item = 8;
        scfg.max_concurrent = 132 * 4;
        double t_split = host_us([&] { planner::plan_split_kv(kbeg.data(), kend.data(), B, scfg); }, o.max_reps);
        std::printf("%-5d %-4d %-10s %8d | %10.1f %10.1f %10.1f %10.1f %11.1f %9.1f |", B, P, cx.name,
                    csr.kv_indptr.back(), t_csr, t_table, t_slots, t_vcsr, t_vbatch, t_split);
        json_row(h, c, "plan_split_kv", "host", t_split);
        json_row(h, c, "build_csr", "host", t_csr);
        json_row(h, c, "build_page_table", "host", t_table);
        json_row(h, c, "build_slot_mapping", "host", t_slots);
        json_row(h, c, "validate_csr", "host", t_vcsr);
        json_row(h, c, "validate_batch", "host", t_vbatch);

        if (o.device) {
          Context& ctx = h.ctx();
          auto buf = [&](size_t n) { return DeviceBuffer(ctx, std::max<size_t>(n, 1) * sizeof(int32_t)); };
          DeviceBuffer r2t = buf(hb.req_to_token.size()), rpi = buf(hb.rpi.size()), seq = buf(hb.seq.size());
          r2t.write(ctx, hb.req_to_token.data(), hb.req_to_token.size() * 4);
          rpi.write(ctx, hb.rpi.data(), hb.rpi.size() * 4);
          seq.write(ctx, hb.seq.data(), hb.seq.size() * 4);
          DeviceEngineBatch db;
          db.req_to_token = r2t.get();
          db.pool_size = b.pool_size;
          db.max_ctx = b.max_ctx;
          db.req_pool_indices = rpi.get();
          db.seq_lens = seq.get();
          db.batch_size = B;
          DeviceBuffer indptr = buf(size_t(B) + 1), indices = buf(size_t(max_csr_pages(B, hb.max_ctx, P))),
                       last = buf(size_t(B)), slots = buf(size_t(B));
          const int width = max_table_pages(hb.max_ctx, P);
          DeviceBuffer table = buf(size_t(B) * size_t(width)), cuk = buf(size_t(B) + 1);
          DeviceCsr out{indptr.get(), indices.get(), last.get(), nullptr, nullptr};
          DevicePageTable tout{table.get(), nullptr, nullptr, cuk.get()};
          double d_csr = 1e3 * h.time_ms([&] { build_csr_device(ctx, db, P, -1, out); });
          double d_table = 1e3 * h.time_ms([&] { build_page_table_device(ctx, db, P, width, tout); });
          double d_slots = 1e3 * h.time_ms([&] { build_slot_mapping_device(ctx, db, slots.get()); });
          ctx.finish();
          double enq = host_us([&] { build_csr_device(ctx, db, P, -1, out); }, 200, 0.05);
          ctx.finish();
          // The device result must match the host's (cheap insurance for a benchmark).
          PagedCsr got = download_csr(ctx, out, B, P);
          if (got.kv_indptr != csr.kv_indptr || got.kv_indices != csr.kv_indices)
            throw Error(Status::Internal, "metadata bench: device CSR differs from the host's");
          std::printf(" %10.1f %10.1f %10.1f %10.1f", d_csr, d_table, d_slots, enq);
          json_row(h, c, "build_csr", "device", d_csr);
          json_row(h, c, "build_page_table", "device", d_table);
          json_row(h, c, "build_slot_mapping", "device", d_slots);
          json_row(h, c, "build_csr_enqueue", "host", enq);
        }
        std::printf("\n");
        std::fflush(stdout);
      }
    }
  }
}

}  // namespace

void register_metadata(CLI::App& app, Harness& h) {
  auto opts = std::make_shared<Options>();
  auto* sub = app.add_subcommand("metadata", "paged-KV metadata: host build/validate and device builder times (us)");
  static bool quick = false;
  sub->add_option("--page-sizes", opts->page_sizes, "comma-separated page sizes")
      ->capture_default_str()
      ->check(positive_list());
  auto* batches = sub->add_option("--batches", opts->batches, "comma-separated batch sizes (--quick: 1,64)")
                      ->capture_default_str()
                      ->check(positive_list());
  auto* reps =
      sub->add_option("--max-reps", opts->max_reps, "upper bound on host repetitions per figure (--quick: 200)")
          ->capture_default_str()
          ->check(cli::at_least(1));
  sub->add_flag("!--no-device", opts->device, "host figures only");
  sub->add_flag("--quick", quick, "batches 1 and 64 only, fewer repetitions (PoCL / CI)");
  sub->callback([&h, opts, batches, reps] {
    if (check_args_only()) return;
    Options o = *opts;
    if (quick && batches->count() == 0) o.batches = "1,64";
    if (quick && reps->count() == 0) o.max_reps = 200;
    run(h, o);
  });
}

}  // namespace clattn::bench
