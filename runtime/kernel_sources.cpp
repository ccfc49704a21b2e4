#include "runtime/kernel_sources.hpp"

#include <fstream>
#include <set>
#include <sstream>

#include "runtime/env.hpp"
#include "runtime/error.hpp"

namespace clattn::rt {
namespace {

std::string raw_source(const std::string& file) {
  std::string dir = env("CLATTN_KERNEL_DIR");
  if (!dir.empty()) {
    std::ifstream in(dir + "/" + file, std::ios::binary);
    if (!in) invalid("CLATTN_KERNEL_DIR: cannot read " + dir + "/" + file);
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  for (std::size_t i = 0; i < kEmbeddedKernelCount; ++i)
    if (file == kEmbeddedKernels[i].name) return kEmbeddedKernels[i].text;
  invalid("no embedded kernel source named '" + file + "'");
}

void expand(const std::string& file, std::set<std::string>& seen, std::string& out) {
  std::istringstream in(raw_source(file));
  std::string line;
  int lineno = 0;
  out += "#line 1 \"" + file + "\"\n";
  while (std::getline(in, line)) {
    ++lineno;
    auto pos = line.find("#include \"");
    if (pos != std::string::npos && line.find_first_not_of(" \t") == pos) {
      auto end = line.find('"', pos + 10);
      std::string inc = line.substr(pos + 10, end - pos - 10);
      if (seen.insert(inc).second) expand(inc, seen, out);
      out += "#line " + std::to_string(lineno + 1) + " \"" + file + "\"\n";
      continue;
    }
    out += line;
    out += '\n';
  }
}

}  // namespace

std::string kernel_source(const std::string& file) {
  std::set<std::string> seen{file};
  std::string out;
  expand(file, seen, out);
  return out;
}

std::vector<std::string> embedded_kernel_files() {
  std::vector<std::string> v;
  for (std::size_t i = 0; i < kEmbeddedKernelCount; ++i) {
    std::string n = kEmbeddedKernels[i].name;
    if (n.size() > 3 && n.compare(n.size() - 3, 3, ".cl") == 0) v.push_back(n);
  }
  return v;
}

}  // namespace clattn::rt
