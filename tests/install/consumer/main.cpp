// Links against the installed library and runs the self-check on the default device.
#include <clattn/clattn.hpp>
#include <cstdio>

int main() {
  try {
    auto ctx = clattn::Context::create();
    std::printf("clattn %s: %s\n", clattn::version(), clattn::self_check(ctx).c_str());
    return 0;
  } catch (const clattn::Error& e) {
    std::fprintf(stderr, "consumer: %s\n", e.what());
    return 1;
  }
}
