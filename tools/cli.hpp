// What every clattn command-line tool does with its arguments and its errors:
//   exit 0  the run succeeded (--help, --check-args included);
//   exit 1  the run failed (a device or build error, a reference mismatch, a failed check);
//   exit 2  a bad argument: a CLI11 error, a value out of range or not one of the names an
//           option takes, or the library refusing an argument (Status::InvalidArgument);
//           the message names the argument.
// --check-args (add_check_args) checks the arguments as a run would and exits 0 before any
// device work: tests/tools runs every command line the README and docs/ show that way.
#pragma once
#include <CLI/CLI.hpp>
#include <clattn/types.hpp>

#include <cstdio>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

namespace clattn::cli {

constexpr int kFailed = 1, kBadArgument = 2;

inline std::string join(const std::vector<std::string>& names, const char* sep = " ") {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : sep) + n;
  return s;
}

// ->check(at_least(1)): a number >= lo ("must be at least 1, got 0").
inline CLI::Validator at_least(double lo) {
  std::ostringstream d;
  d << ">= " << lo;
  return CLI::Validator(
      [lo](std::string& s) -> std::string {
        double v = 0;
        if (!CLI::detail::lexical_cast(s, v)) return "'" + s + "' is not a number";
        if (!(v >= lo)) {
          std::ostringstream m;
          m << "must be at least " << lo << ", got " << s;
          return m.str();
        }
        return {};
      },
      d.str());
}

// ->check(one_of({"f32", "f16"})): exactly one of the names ("must be one of f32 f16, got 'int4'").
inline CLI::Validator one_of(std::vector<std::string> names) {
  const std::string desc = "{" + join(names, ",") + "}";
  return CLI::Validator(
      [names](std::string& s) -> std::string {
        for (const auto& n : names)
          if (s == n) return {};
        return "must be one of " + join(names) + ", got '" + s + "'";
      },
      desc);
}

// A bad combination of arguments found after parsing (min > max, ...): exit 2 naming `option`.
[[noreturn]] inline void bad_argument(const std::string& option, const std::string& why) {
  throw CLI::ValidationError(option, why);
}

// --check-args: the flag behind `*on`.
inline CLI::Option* add_check_args(CLI::App& app, bool* on) {
  return app.add_flag("--check-args", *on, "check the arguments as a run would, then exit 0 before any device work");
}

// Parses argv (a subcommand's callback runs inside the parse) and then runs `body`; maps what
// either throws to the exit codes above, printing the message to stderr as "<tool>: ...".
inline int run(const char* tool, CLI::App& app, int argc, char** argv, const std::function<int()>& body) {
  const std::string name = tool;
  app.failure_message([name](const CLI::App*, const CLI::Error& e) {
    return name + ": " + e.what() + "\nRun with --help for more information.\n";
  });
  try {
    app.parse(argc, argv);
    return body();
  } catch (const CLI::Error& e) {
    // --help prints to stdout and is a success; everything else CLI11 raises is a bad argument.
    return app.exit(e) == 0 ? 0 : kBadArgument;
  } catch (const Error& e) {
    std::fprintf(stderr, "%s: %s: %s\n", tool, status_name(e.status()), e.what());
    return e.status() == Status::InvalidArgument ? kBadArgument : kFailed;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", tool, e.what());
    return kFailed;
  }
}

}  // namespace clattn::cli
