// params::param_names (backends/params/param_names.hpp), which clattn-bench checks --param and
// --grid against: every name an op's code reads from its overrides is one of the op's names
// (the op sources are scanned, so a name read with a default and no row cannot be missed),
// and an unknown name is refused with the op's names listed.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "backends/params/param_names.hpp"
#include "clattn/types.hpp"

namespace {

// A source file's text, or every .cpp of a folder's (an op's folder) one after the other.
std::string read(const std::string& rel) {
  const std::filesystem::path p = std::filesystem::path(CLATTN_SOURCE_DIR) / rel;
  std::vector<std::filesystem::path> files;
  if (std::filesystem::is_directory(p)) {
    for (const auto& e : std::filesystem::directory_iterator(p))
      if (e.path().extension() == ".cpp") files.push_back(e.path());
  } else {
    files.push_back(p);
  }
  std::stringstream ss;
  for (const auto& f : files) {
    std::ifstream in(f);
    ss << in.rdbuf() << "\n";
  }
  return ss.str();
}

// Names read from the overrides / entries: param(e, over, "X"), param_or(...), e.get("X"),
// dec.get_or("X", ..), over.find("X"), over.count("X").
std::set<std::string> names_read(const std::string& source) {
  static const std::regex read_call(
      R"re((?:param_or|param|get_or|get|find|count)\(\s*(?:[a-z_.]+\s*,\s*)*"([A-Z][A-Z0-9_]*[A-Z0-9])")re");
  std::set<std::string> out;
  for (std::sregex_iterator it(source.begin(), source.end(), read_call), end; it != end; ++it) out.insert((*it)[1]);
  return out;
}

}  // namespace

TEST(ParamNames, CoverWhatTheOpsRead) {
  const struct {
    const char* file;
    std::vector<std::string> ops;
  } cases[] = {{"backends/ops/decode", {"decode"}},
               {"backends/ops/extend", {"extend"}},
               {"backends/ops/mla", {"mla_decode"}},
               {"backends/ops/mla", {"mla_extend"}},
               {"backends/ops/dsa_index.cpp", {"dsa_index"}},
               {"backends/ops/linear", {"linear_decode", "linear_prefill"}}};
  for (const auto& c : cases) {
    const std::string src = read(c.file);
    ASSERT_FALSE(src.empty()) << c.file;
    std::set<std::string> known;
    for (const auto& op : c.ops)
      for (const auto& n : clattn::params::param_names(op)) known.insert(n);
    const auto read_names = names_read(src);
    EXPECT_GT(read_names.size(), 3u) << c.file << ": the scan found (almost) nothing";
    for (const auto& n : read_names)
      EXPECT_TRUE(known.count(n)) << c.file << " reads parameter " << n << ", which param_names(" << c.ops[0]
                                  << ") does not list (backends/params/param_names.cpp)";
  }
}

TEST(ParamNames, UnknownNameIsRefusedWithTheList) {
  EXPECT_NO_THROW(clattn::params::check_param_names({"decode"}, {{"WG", 64}, {"TPT", 4}}, "--param"));
  try {
    clattn::params::check_param_names({"decode"}, {{"WG", 64}, {"NOPE", 3}}, "--param");
    FAIL() << "NOPE accepted";
  } catch (const clattn::Error& e) {
    EXPECT_EQ(e.status(), clattn::Status::InvalidArgument);
    const std::string m = e.what();
    EXPECT_NE(m.find("--param: decode has no parameter 'NOPE'"), std::string::npos) << m;
    EXPECT_NE(m.find(" UNROLL "), std::string::npos) << m;
  }
  // Linear overrides go to either kernel (LinearConfig::params routes them).
  EXPECT_NO_THROW(clattn::params::check_param_names({"linear_decode", "linear_prefill"}, {{"PF_C", 32}, {"DEC_VEC", 2}},
                                                    "--param"));
}
