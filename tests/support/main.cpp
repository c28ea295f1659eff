// doctest's main, plus the dispatch into a registered worker when the binary is re-executed
// as one rank of a multi-process test (`--mpp-worker=<name>`).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <exception>
#include <string_view>

#include "worker.hpp"

int main(int argc, char** argv) {
  constexpr std::string_view flag = "--mpp-worker=";
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg.substr(0, flag.size()) != flag) continue;
    const std::string name(arg.substr(flag.size()));
    auto& registry = mpp::test::worker_registry();
    auto it = registry.find(name);
    if (it == registry.end()) {
      std::fprintf(stderr, "mpp test: no worker named '%s' is registered\n", name.c_str());
      return 2;
    }
    try {
      return it->second(argc, argv);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s\n", e.what());
      return 1;
    }
  }
  doctest::Context context(argc, argv);
  return context.run();
}
