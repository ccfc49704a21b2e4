// Portable-only mode as engines set it: CLATTN_VARIANTS in the environment and
// ContextOptions::variants (which wins over it); unknown values are InvalidArgument naming
// where they came from, and the profile carries the mode.
#include <cstdlib>
#include <string>

#include "support/test_support.hpp"

using namespace clattn;

namespace {
// Sets CLATTN_VARIANTS for one scope, restoring the previous value after.
struct VariantsEnv {
  std::string saved;
  bool had = false;
  explicit VariantsEnv(const char* value) {
    if (const char* old = std::getenv("CLATTN_VARIANTS")) had = true, saved = old;
    if (value) setenv("CLATTN_VARIANTS", value, 1);
    else unsetenv("CLATTN_VARIANTS");
  }
  ~VariantsEnv() {
    if (had) setenv("CLATTN_VARIANTS", saved.c_str(), 1);
    else unsetenv("CLATTN_VARIANTS");
  }
};
}  // namespace

TEST(VariantsMode, EnvironmentSetsPortableOnly) {
  {
    VariantsEnv env(nullptr);
    EXPECT_FALSE(Context::create().profile().portable_only);
  }
  {
    VariantsEnv env("portable");
    EXPECT_TRUE(Context::create().profile().portable_only);
    for (const DeviceEntry& d : list_devices()) EXPECT_TRUE(d.profile.portable_only) << d.profile.device_name;
  }
  {
    VariantsEnv env("ALL");
    EXPECT_FALSE(Context::create().profile().portable_only);
  }
}

TEST(VariantsMode, UnknownEnvironmentValueIsAnError) {
  VariantsEnv env("fastest");
  EXPECT_TRUE(test::throws_error([] { Context::create(); }, Status::InvalidArgument, "CLATTN_VARIANTS='fastest'"));
}

TEST(VariantsMode, ContextOptionWinsOverTheEnvironment) {
  VariantsEnv env("portable");
  EXPECT_FALSE(Context::create("", ContextOptions{"all"}).profile().portable_only);
  VariantsEnv none(nullptr);
  EXPECT_TRUE(Context::create("", ContextOptions{"portable"}).profile().portable_only);
  EXPECT_TRUE(test::throws_error([] { Context::create("", ContextOptions{"vendor"}); }, Status::InvalidArgument,
                                 "options.variants='vendor'"));
}

TEST(VariantsMode, AdoptTakesTheOption) {
  VariantsEnv env(nullptr);
  const Context& base = test::ctx();
  Context adopted = Context::adopt(base.cl_ctx(), base.cl_device(), base.cl_queue(), ContextOptions{"portable"});
  EXPECT_TRUE(adopted.profile().portable_only);
  EXPECT_TRUE(test::throws_error(
      [&] { Context::adopt(base.cl_ctx(), base.cl_device(), base.cl_queue(), ContextOptions{"x"}); },
      Status::InvalidArgument, "options.variants"));
  // The failed adoption released what it retained: the base context still works.
  EXPECT_NO_THROW(base.finish());
}

TEST(VariantsMode, ProfileJsonCarriesTheMode) {
  VariantsEnv env(nullptr);
  EXPECT_NE(profile_json(Context::create("", ContextOptions{"portable"}).profile()).find("\"clattn_portable_only\":true"),
            std::string::npos);
  EXPECT_NE(profile_json(Context::create().profile()).find("\"clattn_portable_only\":false"), std::string::npos);
}
