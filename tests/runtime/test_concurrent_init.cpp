// The first OpenCL use of a process made by eight threads at once: every context creation
// must succeed (platform initialisation is not thread-safe in every ICD, PoCL included).
// Each round runs in a fresh child process, so the parent never touches OpenCL itself.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <clattn/clattn.h>
#include <clattn/clattn.hpp>
#include <cstdio>
#include <thread>
#include <vector>

namespace {

constexpr int kThreads = 8;
constexpr int kRounds = 4;

bool create_one(bool c_abi) {
  if (c_abi) {
    clattn_context c = nullptr;
    clattn_status s = clattn_context_create(nullptr, &c);
    if (s != CLATTN_SUCCESS) std::fprintf(stderr, "clattn_context_create: %s\n", clattn_last_error());
    clattn_context_release(c);
    return s == CLATTN_SUCCESS;
  }
  try {
    clattn::Context::create();
    return true;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "Context::create: %s\n", e.what());
    return false;
  }
}

// In the child: all threads start together, then create a context each.
[[noreturn]] void child(bool c_abi) {
  std::atomic<bool> go{false};
  std::atomic<int> failed{0};
  std::vector<std::thread> ts;
  for (int i = 0; i < kThreads; ++i)
    ts.emplace_back([&] {
      while (!go.load()) std::this_thread::yield();
      if (!create_one(c_abi)) failed.fetch_add(1);
    });
  go.store(true);
  for (auto& t : ts) t.join();
  std::fflush(stderr);
  _exit(failed.load() == 0 ? 0 : 1);
}

// Exit status of one fresh process; a crash shows as the signal.
std::string run_round(bool c_abi) {
  pid_t pid = ::fork();
  if (pid < 0) return "fork failed";
  if (pid == 0) child(c_abi);
  int status = 0;
  if (::waitpid(pid, &status, 0) != pid) return "waitpid failed";
  if (WIFSIGNALED(status)) return "killed by signal " + std::to_string(WTERMSIG(status));
  if (WEXITSTATUS(status) != 0) return "a context creation failed (see stderr)";
  return "";
}

}  // namespace

TEST(ConcurrentInit, EightThreadsCreateTheFirstContextsViaTheCAbi) {
  for (int r = 0; r < kRounds; ++r) EXPECT_EQ(run_round(true), "") << "round " << r;
}

TEST(ConcurrentInit, EightThreadsCreateTheFirstContextsViaCpp) {
  for (int r = 0; r < kRounds; ++r) EXPECT_EQ(run_round(false), "") << "round " << r;
}
