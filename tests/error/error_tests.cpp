// Every error mpp throws is an mpp::Error and the standard exception of its kind.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include "mpp/comm/error.hpp"
#include "mpp/error.hpp"
#include "mpp/launch/environment.hpp"
#include "mpp/partition/errors.hpp"
#include "mpp/pipeline/with_ranks.hpp"
#include "mpp/schedule/table.hpp"

namespace {

/// Throws `error`; returns what catching it as mpp::Error and as `Std` gave.
template <class Std, class E>
std::string caught_both_ways(const E& error) {
  std::string as_mpp, as_std;
  try {
    throw error;
  } catch (const mpp::Error& e) {
    as_mpp = e.what();
  }
  try {
    throw error;
  } catch (const Std& e) {
    as_std = e.what();
  }
  try {
    throw error;
  } catch (const std::exception& e) {  // one std::exception base: not ambiguous
    CHECK(std::string(e.what()) == as_std);
  }
  CHECK(as_mpp == as_std);
  return as_mpp;
}

}  // namespace

TEST_CASE("mpp's errors are mpp::Error and their standard kind, with one message") {
  CHECK(caught_both_ways<std::invalid_argument>(mpp::InvalidArgument("mpp: bad")) == "mpp: bad");
  CHECK(caught_both_ways<std::runtime_error>(mpp::RuntimeError("mpp: failed")) == "mpp: failed");
  CHECK(caught_both_ways<std::logic_error>(mpp::LogicError("mpp: empty")) == "mpp: empty");
  CHECK(caught_both_ways<std::out_of_range>(mpp::OutOfRange("mpp: past")) == "mpp: past");
  CHECK(caught_both_ways<std::invalid_argument>(mpp::ScheduleError("mpp: schedule")) ==
        "mpp: schedule");
  CHECK(caught_both_ways<std::invalid_argument>(mpp::PartitionError("mpp: partition")) ==
        "mpp: partition");
  CHECK(caught_both_ways<std::invalid_argument>(mpp::WorldSizeError("mpp: size")) == "mpp: size");
  CHECK(caught_both_ways<std::runtime_error>(mpp::EnvironmentError("RANK", "mpp: env")) ==
        "mpp: env");
  CHECK(caught_both_ways<std::runtime_error>(mpp::CommError("recv", 1, "mpp: comm")) ==
        "mpp: comm");
  CHECK(caught_both_ways<mpp::CommError>(
            mpp::CommTimeout("recv", 1, std::chrono::milliseconds(5), "mpp: late")) == "mpp: late");
  CHECK(caught_both_ways<std::runtime_error>(mpp::launch::LaunchError("mpp: launch")) ==
        "mpp: launch");
}

TEST_CASE("no header of mpp throws a bare standard exception: each throws an mpp::Error") {
  // A `throw std::invalid_argument(...)` would escape `catch (const mpp::Error&)`.
  const std::regex bare(
      R"(throw\s+std::(invalid_argument|runtime_error|logic_error|out_of_range|domain_error|length_error|range_error|overflow_error)\b)");
  int headers = 0;
  std::string offenders;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(MPP_INCLUDE_DIR)) {
    if (entry.path().extension() != ".hpp" && entry.path().extension() != ".ipp") continue;
    ++headers;
    std::ifstream in(entry.path());
    std::stringstream text;
    text << in.rdbuf();
    const std::string source = text.str();
    if (std::regex_search(source, bare)) offenders += " " + entry.path().string();
  }
  CHECK(headers > 50);
  CHECK_MESSAGE(offenders.empty(), "throw an mpp error (mpp/error.hpp) instead in:" << offenders);
}
