// Program JIT and the two-level cache: embedded sources compile, disk hits, corrupt and
// untrusted entries are rebuilt, concurrent builds build once, build failures carry logs.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "runtime/context_impl.hpp"
#include "runtime/kernel_sources.hpp"
#include "runtime/ptx_retarget.hpp"
#include "support/test_support.hpp"

namespace fs = std::filesystem;
using namespace clattn;

namespace {

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("clattn-test-" + std::to_string(::getpid()) + "-" +
                                        std::to_string(std::rand()));
    fs::create_directories(path);
    fs::permissions(path, fs::perms::owner_all, fs::perm_options::replace);
  }
  ~TempDir() { fs::remove_all(path); }
};

std::unique_ptr<rt::ProgramCache> fresh_cache(const std::string& dir) {
  auto& c = rt::impl(test::ctx());
  setenv("CLATTN_CACHE_DIR", dir.c_str(), 1);
  auto pc = std::make_unique<rt::ProgramCache>(c.ctx, c.device);
  pc->set_profile(c.profile);
  return pc;
}

const std::string kOpts = rt::make_options({{"CLATTN_TEST_KEY", "1"}});

}  // namespace

TEST(ProgramCache, EveryEmbeddedSourceCompiles) {
  auto files = rt::embedded_kernel_files();
  ASSERT_FALSE(files.empty());
  auto& c = rt::impl(test::ctx());
  for (auto& f : files) {
    SCOPED_TRACE(f);
    // *_nv.cl files hold inline PTX: only NVIDIA's compiler takes them.
    bool nv_only = f.size() > 6 && f.compare(f.size() - 6, 6, "_nv.cl") == 0;
    if (nv_only && !c.profile.nv_inline_ptx) continue;
    EXPECT_NO_THROW(c.programs.get(f, rt::make_options({})));  // every tunable has an #ifndef default
  }
}

TEST(ProgramCache, SecondCacheIsDiskHitAndEntryIsPrivate) {
  TempDir tmp;
  auto a = fresh_cache(tmp.path.string());
  a->get("selfcheck.cl", kOpts);
  EXPECT_EQ(a->stats().compiled, 1);
  std::string entry = a->disk().path_for(a->key(rt::kernel_source("selfcheck.cl"), kOpts));
  struct stat st {};
  ASSERT_EQ(::stat(entry.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(::stat(tmp.path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  auto b = fresh_cache(tmp.path.string());
  auto prog = b->get("selfcheck.cl", kOpts);
  EXPECT_EQ(b->stats().disk_hits, 1);
  EXPECT_EQ(b->stats().compiled, 0);
  EXPECT_NO_THROW(prog->kernel("dtype_roundtrip"));
}

TEST(ProgramCache, CorruptOrTruncatedEntryIsRebuilt) {
  TempDir tmp;
  std::string entry;
  {
    auto a = fresh_cache(tmp.path.string());
    a->get("selfcheck.cl", kOpts);
    entry = a->disk().path_for(a->key(rt::kernel_source("selfcheck.cl"), kOpts));
  }
  auto size = fs::file_size(entry);
  for (int mode = 0; mode < 3; ++mode) {
    SCOPED_TRACE(mode);
    if (mode == 0) {  // flip one byte in the binary
      std::fstream f(entry, std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(std::streamoff(size - 10));
      f.put('\x5a');
    } else if (mode == 1) {  // truncate
      fs::resize_file(entry, size / 2);
    } else {  // garbage header
      std::ofstream(entry, std::ios::binary | std::ios::trunc) << "not a cache entry";
      fs::permissions(entry, fs::perms::owner_read | fs::perms::owner_write, fs::perm_options::replace);
    }
    auto b = fresh_cache(tmp.path.string());
    EXPECT_NO_THROW(b->get("selfcheck.cl", kOpts));
    EXPECT_EQ(b->stats().compiled, 1);
    EXPECT_EQ(b->stats().disk_hits, 0);
    auto c = fresh_cache(tmp.path.string());  // the rebuilt entry is good again
    c->get("selfcheck.cl", kOpts);
    EXPECT_EQ(c->stats().disk_hits, 1);
    size = fs::file_size(entry);
  }
}

TEST(ProgramCache, EntryWritableByOthersIsIgnored) {
  TempDir tmp;
  std::string entry;
  {
    auto a = fresh_cache(tmp.path.string());
    a->get("selfcheck.cl", kOpts);
    entry = a->disk().path_for(a->key(rt::kernel_source("selfcheck.cl"), kOpts));
  }
  ::chmod(entry.c_str(), 0666);
  auto b = fresh_cache(tmp.path.string());
  b->get("selfcheck.cl", kOpts);
  EXPECT_EQ(b->stats().disk_hits, 0);
  EXPECT_EQ(b->stats().compiled, 1);
}

TEST(ProgramCache, CacheOffWritesNothing) {
  auto pc = fresh_cache("off");
  EXPECT_FALSE(pc->disk().enabled());
  pc->get("selfcheck.cl", kOpts);
  EXPECT_EQ(pc->stats().compiled, 1);
}

TEST(ProgramCache, EightThreadsBuildOnce) {
  auto pc = fresh_cache("off");
  std::vector<std::thread> ts;
  std::vector<std::shared_ptr<rt::Program>> got(8);
  for (int i = 0; i < 8; ++i) ts.emplace_back([&, i] { got[i] = pc->get("selfcheck.cl", kOpts); });
  for (auto& t : ts) t.join();
  EXPECT_EQ(pc->stats().compiled, 1);
  EXPECT_EQ(pc->stats().memory_hits, 7);
  for (auto& p : got) EXPECT_EQ(p.get(), got[0].get());
}

TEST(ProgramCache, KeyDependsOnSourceAndOptions) {
  auto pc = fresh_cache("off");
  std::string s = rt::kernel_source("selfcheck.cl");
  EXPECT_NE(pc->key(s, "-DA=1"), pc->key(s, "-DA=2"));
  EXPECT_NE(pc->key(s, "-DA=1"), pc->key(s + " ", "-DA=1"));
  EXPECT_EQ(pc->key(s, "-DA=1"), pc->key(s, "-DA=1"));
  EXPECT_EQ(rt::make_options({{"B", "2"}, {"A", "1"}}), rt::make_options({{"A", "1"}, {"B", "2"}}));
}

TEST(ProgramCache, BuildFailureCarriesTheLogAndKernelDirIsRead) {
  TempDir tmp;
  std::ofstream(tmp.path / "broken.cl") << "__kernel void k(__global float* x) { x[0] = undefined_thing; }\n";
  std::ofstream(tmp.path / "good.clh") << "#define GOOD_VALUE 7\n";
  std::ofstream(tmp.path / "good.cl") << "#include \"good.clh\"\n__kernel void k(__global int* x) { x[0] = GOOD_VALUE; }\n";
  setenv("CLATTN_KERNEL_DIR", tmp.path.c_str(), 1);
  auto pc = fresh_cache("off");
  EXPECT_TRUE(test::throws_error([&] { pc->get("broken.cl", kOpts); }, Status::BuildFailed, "undefined_thing"));
  auto prog = pc->get("good.cl", kOpts);
  auto& k = prog->kernel("k");
  DeviceBuffer out(test::ctx(), 4);
  size_t one = 1;
  cl_mem m = out.get();
  k.launch(test::ctx().cl_queue(), 1, &one, nullptr, 0, nullptr, nullptr, m);
  int v = 0;
  out.read(test::ctx(), &v, 4);
  EXPECT_EQ(v, 7);
  EXPECT_TRUE(test::throws_error([&] { pc->get("missing.cl", kOpts); }, Status::InvalidArgument, "missing.cl"));
  unsetenv("CLATTN_KERNEL_DIR");
}

// The sm_90a rebuild of NVIDIA PTX (runtime/ptx_retarget.hpp): markers gone, target changed
// once, .maxnreg placed between each entry's parameters and body; non-sm_90 PTX refused.
TEST(PtxRetarget, UnhidesMarkersRetargetsAndCapsRegisters) {
  const std::string ptx =
      "//\n.version 9.0\n.target sm_90, texmode_independent\n.address_size 64\n"
      ".entry k(\n\t.param .u64 .ptr .global .align 4 k_param_0,\n\t.param .u32 k_param_1\n)\n.reqntid 384, 1, 1\n{\n"
      "\t// begin inline asm\n\t//@wgmma.fence.sync.aligned;\n\t// end inline asm\n\tret;\n}\n";
  auto out = rt::retarget_ptx_sm90a(ptx, 168);
  ASSERT_TRUE(out.has_value());
  EXPECT_NE(out->find(".target sm_90a, texmode_independent"), std::string::npos);
  EXPECT_EQ(out->find("//@"), std::string::npos);
  EXPECT_NE(out->find("\twgmma.fence.sync.aligned;"), std::string::npos);
  EXPECT_NE(out->find(".reqntid 384, 1, 1\n.maxnreg 168\n{"), std::string::npos);
  EXPECT_NE(out->find("// begin inline asm"), std::string::npos);  // plain comments stay
  auto plain = rt::retarget_ptx_sm90a(ptx);
  ASSERT_TRUE(plain.has_value());
  EXPECT_EQ(plain->find(".maxnreg"), std::string::npos);
  EXPECT_FALSE(rt::retarget_ptx_sm90a("//\n.version 8.0\n.target sm_80\n").has_value());
  EXPECT_FALSE(rt::retarget_ptx_sm90a("\x7f" "ELF binary").has_value());
  EXPECT_EQ(rt::ptx_maxnreg_option("-cl-std=CL1.2 -DA=1 -DCLATTN_PTX_MAXNREG=168 -DCLATTN_PTX_SM90A=1"), 168);
  EXPECT_EQ(rt::ptx_maxnreg_option("-cl-std=CL1.2 -DCLATTN_PTX_SM90A=1"), 0);
}
