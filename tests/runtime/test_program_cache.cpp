// Program JIT and the two-level cache: embedded sources compile, disk hits, corrupt and
// untrusted entries are rebuilt, concurrent builds build once, build failures carry logs.
#include <map>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <spdlog/sinks/ostream_sink.h>

#include "runtime/context_impl.hpp"
#include "runtime/kernel_sources.hpp"
#include "runtime/log.hpp"
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
    auto ends = [&](const std::string& s) { return f.size() > s.size() && f.compare(f.size() - s.size(), s.size(), s) == 0; };
    if (ends("_nv.cl") && !c.profile.nv_inline_ptx) continue;
    // *_intel.cl / *_amd.cl call their vendor's builtins: elsewhere they build through their
    // emulation headers (CLATTN_EMULATE's defines).
    std::map<std::string, std::string> emul;
    if (ends("_intel.cl") && c.profile.vendor != "intel") emul = {{"EMULATE_INTEL_DPAS", "1"}};
    if (ends("_amd.cl") && c.profile.vendor != "amd") emul = {{"EMULATE_AMD_WMMA", "1"}, {"EMULATE_AMD_MFMA", "1"}};
    EXPECT_NO_THROW(c.programs.get(f, rt::make_options(emul)));  // every tunable has an #ifndef default
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

// The directory rules (docs/runtime.md): a symlink at the cache path is not followed, the
// directory must be ours and private (readable-only is tightened to 0700, writable by others
// is refused), and every ancestor must be root's or ours and not writable by others unless
// sticky. A refused directory turns the disk cache off; nothing is fatal.
namespace {
const std::vector<unsigned char> kBin = {1, 2, 3, 4, 5};
const std::string kKey(64, 'a');
const std::string kOtherKey(64, 'b');
mode_t mode_of(const fs::path& p) {
  struct stat st {};
  ::lstat(p.c_str(), &st);
  return st.st_mode & 07777;
}
}  // namespace

TEST(DiskCache, SymlinkAtTheCacheDirIsNotFollowed) {
  TempDir tmp;
  fs::create_directory(tmp.path / "real");
  fs::permissions(tmp.path / "real", fs::perms::owner_all, fs::perm_options::replace);
  fs::create_directory_symlink(tmp.path / "real", tmp.path / "link");
  rt::DiskCache d((tmp.path / "link").string());
  EXPECT_FALSE(d.enabled());
  d.store(kKey, kBin);
  EXPECT_TRUE(fs::is_empty(tmp.path / "real"));
  auto pc = fresh_cache((tmp.path / "link").string());  // the program still builds
  EXPECT_NO_THROW(pc->get("selfcheck.cl", kOpts));
  EXPECT_TRUE(fs::is_empty(tmp.path / "real"));
}

TEST(DiskCache, SymlinkedParentIsResolvedAndChecked) {
  TempDir tmp;
  fs::create_directory(tmp.path / "real");
  fs::create_directory_symlink(tmp.path / "real", tmp.path / "link");
  rt::DiskCache ok((tmp.path / "link" / "cache").string());
  EXPECT_TRUE(ok.enabled());
  fs::permissions(tmp.path / "real", fs::perms::all, fs::perm_options::replace);  // 0777, not sticky
  rt::DiskCache bad((tmp.path / "link" / "cache").string());
  EXPECT_FALSE(bad.enabled());
}

TEST(DiskCache, ReadableDirIsMadePrivate) {
  TempDir tmp;
  fs::path dir = tmp.path / "c";
  fs::create_directory(dir);
  ::chmod(dir.c_str(), 0755);
  rt::DiskCache d(dir.string());
  EXPECT_TRUE(d.enabled());
  EXPECT_EQ(mode_of(dir), 0700u);
  d.store(kKey, kBin);
  EXPECT_EQ(d.load(kKey), kBin);
}

TEST(DiskCache, DirWritableByOthersIsRefusedAndLeftAlone) {
  TempDir tmp;
  for (mode_t m : {0770, 0707, 0777, 01777}) {
    SCOPED_TRACE(m);
    fs::path dir = tmp.path / ("c" + std::to_string(m));
    fs::create_directory(dir);
    ::chmod(dir.c_str(), m);
    rt::DiskCache d(dir.string());
    EXPECT_FALSE(d.enabled());
    EXPECT_EQ(mode_of(dir), m);
  }
}

TEST(DiskCache, ParentWritableByOthersIsRefusedUnlessSticky) {
  TempDir tmp;
  fs::path open = tmp.path / "open", sticky = tmp.path / "sticky", deep = tmp.path / "deep";
  fs::create_directories(open);
  fs::create_directories(sticky);
  fs::create_directories(deep / "a" / "b");
  ::chmod(open.c_str(), 0777);
  ::chmod(sticky.c_str(), 01777);
  ::chmod(deep.c_str(), 0757);
  EXPECT_FALSE(rt::DiskCache((open / "cache").string()).enabled());
  EXPECT_FALSE(fs::exists(open / "cache"));
  EXPECT_TRUE(rt::DiskCache((sticky / "cache").string()).enabled());
  EXPECT_FALSE(rt::DiskCache((deep / "a" / "b" / "cache").string()).enabled());  // any ancestor counts
}

TEST(DiskCache, DirOrParentOwnedByAnotherUserIsRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to chown";
  TempDir tmp;
  fs::path theirs = tmp.path / "theirs", parent = tmp.path / "parent";
  fs::create_directory(theirs);
  fs::create_directories(parent);
  ::chmod(theirs.c_str(), 0700);
  ASSERT_EQ(::chown(theirs.c_str(), 65534, 65534), 0);
  ASSERT_EQ(::chown(parent.c_str(), 65534, 65534), 0);
  EXPECT_FALSE(rt::DiskCache(theirs.string()).enabled());
  EXPECT_FALSE(rt::DiskCache((parent / "cache").string()).enabled());
}

TEST(DiskCache, EntryChecksStillHold) {
  TempDir tmp;
  rt::DiskCache d(tmp.path.string());
  ASSERT_TRUE(d.enabled());
  d.store(kKey, kBin);
  ASSERT_EQ(d.load(kKey), kBin);
  EXPECT_EQ(mode_of(d.path_for(kKey)), 0600u);
  // Another key's entry copied under this name: the header's key differs.
  fs::copy_file(d.path_for(kKey), d.path_for(kOtherKey));
  EXPECT_FALSE(d.load(kOtherKey).has_value());
  // A symlink to a good entry of ours is not followed.
  fs::path elsewhere = tmp.path / "elsewhere.clbin";
  fs::rename(d.path_for(kKey), elsewhere);
  fs::create_symlink(elsewhere, d.path_for(kKey));
  EXPECT_FALSE(d.load(kKey).has_value());
  d.store(kKey, kBin);  // replaces the link, not its target
  EXPECT_FALSE(fs::is_symlink(d.path_for(kKey)));
  EXPECT_EQ(d.load(kKey), kBin);
  // A FIFO under an entry's name neither blocks nor loads.
  fs::remove(d.path_for(kOtherKey));
  ASSERT_EQ(::mkfifo(d.path_for(kOtherKey).c_str(), 0600), 0);
  EXPECT_FALSE(d.load(kOtherKey).has_value());
  // Not a key: never turned into a path.
  d.store("../escape", kBin);
  EXPECT_FALSE(fs::exists(tmp.path.parent_path() / "escape.clbin"));
}

TEST(DiskCache, EntryOwnedByAnotherUserIsIgnored) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to chown";
  TempDir tmp;
  rt::DiskCache d(tmp.path.string());
  d.store(kKey, kBin);
  ASSERT_EQ(::chown(d.path_for(kKey).c_str(), 65534, 65534), 0);
  EXPECT_FALSE(d.load(kKey).has_value());
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

// A compiler warning reaches the library's logger as a warning naming the program and its
// options (not only the driver's own "1 warning generated." line).
TEST(ProgramCache, CompilerWarningsGoThroughTheLogger) {
  const std::string src = "__kernel void k(__global int* x, int n) { if (n && 4) x[0] = n; }\n";
  {  // Does this device's compiler warn here at all?
    auto& c = rt::impl(test::ctx());
    const char* text = src.c_str();
    cl_program p = clCreateProgramWithSource(c.ctx, 1, &text, nullptr, nullptr);
    clBuildProgram(p, 1, &c.device, kOpts.c_str(), nullptr, nullptr);
    const bool warns = rt::build_log(p, c.device).find("warning:") != std::string::npos;
    clReleaseProgram(p);
    if (!warns) GTEST_SKIP() << "this device's compiler does not warn about a constant && operand";
  }
  TempDir tmp;
  std::ofstream(tmp.path / "warns.cl") << src;
  setenv("CLATTN_KERNEL_DIR", tmp.path.c_str(), 1);
  std::ostringstream out;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out);
  rt::log().sinks().push_back(sink);
  auto pc = fresh_cache("off");
  pc->get("warns.cl", kOpts);
  rt::log().sinks().pop_back();
  unsetenv("CLATTN_KERNEL_DIR");
  const std::string text = out.str();
  EXPECT_NE(text.find("warns.cl [" + kOpts), std::string::npos) << text;
  EXPECT_NE(text.find("warning:"), std::string::npos) << text;
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
