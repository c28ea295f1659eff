// doctest's main, plus the dispatch into a registered worker when the binary is re-executed
// as one rank of a multi-process test (`--mpp-worker=<name>`).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <exception>
#include <string>
#include <string_view>

#include "worker.hpp"

int mpp::test::run_worker(std::string_view name, int argc, char** argv) {
  auto& registry = worker_registry();
  auto it = registry.find(std::string(name));
  if (it == registry.end()) {
    std::fprintf(stderr, "mpp test: no worker named '%s' is registered\n",
                 std::string(name).c_str());
    return 2;
  }
  try {
    return it->second(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}

int main(int argc, char** argv) {
  constexpr std::string_view flag = "--mpp-worker=";
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg.substr(0, flag.size()) == flag)
      return mpp::test::run_worker(arg.substr(flag.size()), argc, argv);
  }
  doctest::Context context(argc, argv);
  return context.run();
}
