#pragma once
// The options every pipeline lab takes, and their parser. The parser is compiled once, in
// lab_options.cpp (the lab_common library), so that no lab compiles the command-line library.
#include <cstdint>
#include <string>
#include <vector>

#include "mpp/models/mlp.hpp"

namespace lab {

struct Options {
  std::string transport = "shm";
  mpp::models::MlpConfig model;
  std::int64_t batch = 32;
  int steps = 20;
  bool timeline = false;
  std::string trace;
  std::string svg;
  std::string costs_out;
};

/// An option of a lab's own, `--name value`, read into `*value` (whose value on entry is the
/// default); with `choices`, any other value is refused.
struct ExtraOption {
  const char* name;
  std::string* value;
  const char* help;
  std::vector<std::string> choices{};
};

/// Parses the common options and the lab's `extra` ones into `o`. Returns -1 when the lab should
/// run, otherwise main's exit code: 0 after --help, non-zero (with the message printed) when an
/// option is unknown or its value is refused.
int parse_options(int argc, char** argv, const char* description, Options& o,
                  const std::vector<ExtraOption>& extra);

}  // namespace lab
