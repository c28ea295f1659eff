#pragma once
// A lab's main under one guard. What the library refuses at run time (a world size the program
// was not built for, a mesh that does not divide the ranks, a peer that times out) arrives as an
// exception; uncaught, it ends the rank in std::terminate (SIGABRT), and the launcher reports a
// signal instead of the sentence that says what to change. Here the rank prints that sentence,
// prefixed with the lab's name, and exits with code 1.
#include <cstdio>
#include <exception>
#include <utility>

namespace lab {

/// Runs `body` (returning main's exit code); an exception becomes "<lab>: <what>" on stderr and
/// exit code 1.
template <class Body>
int guarded_main(const char* lab, Body&& body) noexcept {
  try {
    return std::forward<Body>(body)();
  } catch (const std::exception& error) {
    std::fprintf(stderr, "%s: %s\n", lab, error.what());
    return 1;
  }
}

}  // namespace lab
