#pragma once
// Errors raised by the communication layer. Every message names the rule that was broken and
// how to fix it; failures of a wait also carry the operation and the peer rank, so a program
// can report "recv from rank 3 timed out" without parsing text.
#include <chrono>
#include <stdexcept>
#include <string>

#include "mpp/error.hpp"

namespace mpp {

/// The launch environment is missing a variable or holds contradictory ones.
class EnvironmentError : public RuntimeError {
 public:
  /// `variable` is the variable at fault; `message` is what what() returns.
  EnvironmentError(std::string variable, const std::string& message)
      : RuntimeError(message), variable_(std::move(variable)) {}
  /// The variable at fault (e.g. "WORLD_SIZE").
  const std::string& variable() const noexcept { return variable_; }

 private:
  std::string variable_;
};

/// A communication operation failed (peer gone, rendezvous refused, bad argument to c10d).
class CommError : public RuntimeError {
 public:
  /// `operation` and `peer` as operation() and peer() report them; `message` is what what()
  /// returns.
  CommError(std::string operation, int peer, const std::string& message)
      : RuntimeError(message), operation_(std::move(operation)), peer_(peer) {}
  /// What was being done: "send", "recv", "all_reduce", "init", ...
  const std::string& operation() const noexcept { return operation_; }
  /// The peer's rank in the group used, or -1 for a collective (the whole group is the peer).
  int peer() const noexcept { return peer_; }

 private:
  std::string operation_;
  int peer_;
};

/// A communication operation did not complete within its deadline.
class CommTimeout : public CommError {
 public:
  /// As CommError, plus the `deadline` that passed.
  CommTimeout(std::string operation, int peer, std::chrono::milliseconds deadline,
              const std::string& message)
      : CommError(std::move(operation), peer, message), deadline_(deadline) {}
  /// The deadline that passed (CommOptions::timeout for an operation, init_timeout for joining).
  std::chrono::milliseconds deadline() const noexcept { return deadline_; }

 private:
  std::chrono::milliseconds deadline_;
};

}  // namespace mpp
