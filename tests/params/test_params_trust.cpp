// Tuned-parameter files are a code-loading path (their values become build options): the
// one in the cache follows the program cache's trust rules, a CLATTN_TUNED_FILE must be
// ours (or root's) and not writable by others, and every value must be a bounded integer.
// Anything refused is ignored with a warning naming the file, never fatal.
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "backends/params/database.hpp"
#include "runtime/disk_cache.hpp"
#include "runtime/log.hpp"

namespace fs = std::filesystem;
using namespace clattn;

namespace {

constexpr const char* kDevice = "clattn trust test device";

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("clattn-trust-" + std::to_string(::getpid()) + "-" + std::to_string(std::rand()));
    fs::create_directories(path);
    fs::permissions(path, fs::perms::owner_all, fs::perm_options::replace);
  }
  ~TempDir() { fs::remove_all(path); }
};

// Sets an environment variable for one scope, restoring the previous value.
struct ScopedEnv {
  std::string name;
  std::optional<std::string> old;
  ScopedEnv(const char* n, const std::string& v) : name(n) {
    if (const char* o = std::getenv(n)) old = o;
    setenv(n, v.c_str(), 1);
  }
  ~ScopedEnv() { old ? (void)setenv(name.c_str(), old->c_str(), 1) : (void)unsetenv(name.c_str()); }
};

// Collects the library's warnings for one scope.
struct LogCapture {
  std::ostringstream out;
  spdlog::sink_ptr sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out);
  LogCapture() { rt::log().sinks().push_back(sink); }
  ~LogCapture() { rt::log().sinks().pop_back(); }
  bool has(const std::string& s) const { return out.str().find(s) != std::string::npos; }
};

DeviceProfile profile() {
  DeviceProfile p;
  p.device_name = kDevice;
  p.vendor = "cpu";
  return p;
}

std::string tuned_json(const std::string& params, const std::string& extra_ops = "") {
  return std::string(R"({"device": ")") + kDevice + R"(", "date": "2026-11-25", "ops": {)" + extra_ops +
         R"("merge": {"*": {"params": )" + params + "}}}}";
}

void write(const fs::path& f, const std::string& text, mode_t mode = 0600) {
  std::ofstream(f) << text;
  ::chmod(f.c_str(), mode);
}

int merge_wg(const std::vector<params::Row>& rows) {
  for (auto& r : rows)
    if (r.op == "merge") return r.values.at("MERGE_WG");
  return -1;
}

// A private cache directory with tuned/<device>.json, selected through CLATTN_CACHE_DIR.
struct CacheFixture {
  TempDir tmp;
  fs::path cache = tmp.path / "cache";
  fs::path tuned = cache / "tuned";
  fs::path file = tuned / "clattn_trust_test_device.json";
  ScopedEnv cache_env{"CLATTN_CACHE_DIR", cache.string()};
  ScopedEnv no_named{"CLATTN_TUNED_FILE", ""};
  CacheFixture() {
    fs::create_directories(tuned);
    ::chmod(cache.c_str(), 0700);
    ::chmod(tuned.c_str(), 0700);
    write(file, tuned_json(R"({"MERGE_WG": 32})"));
  }
};

}  // namespace

TEST(TunedTrust, PrivateCacheFileIsRead) {
  CacheFixture c;
  std::string used;
  auto rows = params::tuned_rows(profile(), &used);
  EXPECT_EQ(used, c.file.string());
  EXPECT_EQ(merge_wg(rows), 32);
}

TEST(TunedTrust, CacheFileWritableByOthersIsIgnored) {
  CacheFixture c;
  for (mode_t m : {0620, 0602}) {
    ::chmod(c.file.c_str(), m);
    LogCapture log;
    EXPECT_TRUE(params::tuned_rows(profile()).empty()) << std::oct << m;
    EXPECT_TRUE(log.has(c.file.string()) && log.has("writable by group or others")) << log.out.str();
  }
}

TEST(TunedTrust, SymlinkedCacheFileIsNotFollowed) {
  CacheFixture c;
  fs::path elsewhere = c.tmp.path / "elsewhere.json";
  fs::rename(c.file, elsewhere);
  fs::create_symlink(elsewhere, c.file);
  LogCapture log;
  EXPECT_TRUE(params::tuned_rows(profile()).empty());
  EXPECT_TRUE(log.has("symbolic link")) << log.out.str();
}

TEST(TunedTrust, CacheFileThatIsNotARegularFileIsIgnored) {
  CacheFixture c;
  fs::remove(c.file);
  ASSERT_EQ(::mkfifo(c.file.c_str(), 0600), 0);
  EXPECT_TRUE(params::tuned_rows(profile()).empty());  // and the open does not block
}

TEST(TunedTrust, TunedDirWritableByOthersOrSymlinkedIsIgnored) {
  CacheFixture c;
  ::chmod(c.tuned.c_str(), 0777);
  EXPECT_TRUE(params::tuned_rows(profile()).empty());
  ::chmod(c.tuned.c_str(), 0755);  // readable only: trusted
  EXPECT_EQ(merge_wg(params::tuned_rows(profile())), 32);
  fs::path real = c.tmp.path / "real-tuned";
  fs::rename(c.tuned, real);
  fs::create_directory_symlink(real, c.tuned);
  EXPECT_TRUE(params::tuned_rows(profile()).empty());
}

TEST(TunedTrust, CacheDirWritableByOthersIsIgnored) {
  CacheFixture c;
  ::chmod(c.cache.c_str(), 0777);
  EXPECT_TRUE(params::tuned_rows(profile()).empty());
}

TEST(TunedTrust, CacheFileOrDirOwnedByAnotherUserIsIgnored) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to chown";
  CacheFixture c;
  ASSERT_EQ(::chown(c.file.c_str(), 65534, 65534), 0);
  EXPECT_TRUE(params::tuned_rows(profile()).empty());
  ASSERT_EQ(::chown(c.file.c_str(), 0, 0), 0);
  ASSERT_EQ(::chown(c.tuned.c_str(), 65534, 65534), 0);
  EXPECT_TRUE(params::tuned_rows(profile()).empty());
}

TEST(TunedTrust, NamedFileFollowsSymlinksButMustBeOursAndNotWritableByOthers) {
  TempDir tmp;
  fs::path f = tmp.path / "tuned.json", link = tmp.path / "link.json";
  write(f, tuned_json(R"({"MERGE_WG": 64})"), 0644);
  fs::create_symlink(f, link);
  ScopedEnv named("CLATTN_TUNED_FILE", link.string());
  EXPECT_EQ(merge_wg(params::tuned_rows(profile())), 64);  // the user named the path
  ::chmod(f.c_str(), 0666);
  {
    LogCapture log;
    EXPECT_TRUE(params::tuned_rows(profile()).empty());
    EXPECT_TRUE(log.has(link.string()) && log.has("writable by group or others")) << log.out.str();
  }
  ::chmod(f.c_str(), 0644);
  if (::geteuid() == 0) {
    ASSERT_EQ(::chown(f.c_str(), 65534, 65534), 0);
    EXPECT_TRUE(params::tuned_rows(profile()).empty());
  }
  fs::remove(f);
  ASSERT_EQ(::mkfifo(f.c_str(), 0600), 0);
  EXPECT_TRUE(params::tuned_rows(profile()).empty());  // not a regular file; the open does not block
}

TEST(TunedTrust, ValuesMustBeBoundedIntegers) {
  TempDir tmp;
  fs::path f = tmp.path / "tuned.json";
  ScopedEnv named("CLATTN_TUNED_FILE", f.string());
  for (const char* bad : {"-1", "65537", "2.5", "1e12", "18446744073709551615", "true", "\"8\"", "null", "[8]"}) {
    write(f, tuned_json(std::string(R"({"MERGE_WG": )") + bad + "}"));
    LogCapture log;
    EXPECT_TRUE(params::tuned_rows(profile()).empty()) << bad;
    EXPECT_TRUE(log.has(f.string()) && log.has("merge [*] MERGE_WG")) << bad << ": " << log.out.str();
  }
  write(f, tuned_json(R"({"WG -DX=1": 8})"));
  EXPECT_TRUE(params::tuned_rows(profile()).empty());
  for (int ok : {0, params::kMaxParamValue}) {
    write(f, tuned_json(R"({"MERGE_WG": )" + std::to_string(ok) + "}"));
    EXPECT_EQ(merge_wg(params::tuned_rows(profile())), ok);
  }
}

TEST(TunedTrust, OpTheTunerCouldNotTuneIsSkipped) {
  TempDir tmp;
  fs::path f = tmp.path / "tuned.json";
  ScopedEnv named("CLATTN_TUNED_FILE", f.string());
  write(f, tuned_json(R"({"MERGE_WG": 32})", R"("decode": {"_error": "no candidate passed"}, )"));
  EXPECT_EQ(merge_wg(params::tuned_rows(profile())), 32);
}

TEST(TunedTrust, CacheWriteIsPrivateAndReadBack) {
  TempDir tmp;
  rt::DiskCache cache((tmp.path / "cache").string());
  ASSERT_TRUE(cache.enabled());
  EXPECT_EQ(cache.write_file("tuned", "x.json", "{}"), "");
  struct stat st {};
  ASSERT_EQ(::stat((tmp.path / "cache" / "tuned").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  ASSERT_EQ(::stat((tmp.path / "cache" / "tuned" / "x.json").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  EXPECT_EQ(cache.read_file("tuned", "x.json", 1 << 20, "test"), std::optional<std::string>("{}"));
  EXPECT_FALSE(cache.read_file("tuned", "x.json", 1, "test").has_value());  // over the size bound
  EXPECT_NE(cache.write_file("..", "x.json", "{}"), "");                     // names stay inside
  EXPECT_NE(cache.write_file("tuned", "../x.json", "{}"), "");
  EXPECT_FALSE(fs::exists(tmp.path / "x.json"));
  // A group-writable tuned/ is not written into.
  ::chmod((tmp.path / "cache" / "tuned").c_str(), 0770);
  EXPECT_NE(cache.write_file("tuned", "y.json", "{}"), "");
  EXPECT_FALSE(fs::exists(tmp.path / "cache" / "tuned" / "y.json"));
}
