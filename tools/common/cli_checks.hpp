#pragma once
// Range checks for the tools' numeric options. CLI11's own (CLI::PositiveNumber, CLI::Range)
// answer `-m 0` with "Value 0 not in range 0.000000 to 1797...": the bounds of a double, not the
// rule. These say the rule, the value given and what to pass instead; CLI11 puts the option's name
// in front: "--micro: must be >= 1, got 0 (a step needs at least one micro-batch)".
#include <CLI/CLI.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>

namespace mpp::tools {

/// A CLI11 check that an option's value is a number of type T in [min, max] (no upper bound when
/// `max` is empty). On a value outside, the message names the bound, the value and `fix`, what
/// to pass instead; on a value that is not a number of type T, it says so.
template <class T>
CLI::Validator within(T min, std::optional<T> max, std::string fix) {
  static_assert(std::is_arithmetic_v<T>, "mpp::tools::within checks numbers");
  std::ostringstream rule;
  if (max)
    rule << "must be between " << min << " and " << *max;
  else
    rule << "must be >= " << min;
  std::ostringstream description;
  if (max)
    description << min << ".." << *max;
  else
    description << ">=" << min;
  return CLI::Validator(
      [min, max, rule = rule.str(), fix = std::move(fix)](std::string& input) -> std::string {
        T value{};
        if (!CLI::detail::lexical_cast(input, value))
          return std::string(std::is_integral_v<T> ? "expects a whole number"
                                                   : "expects a number") +
                 ", got '" + input + "' (" + fix + ")";
        if (value >= min && (!max || value <= *max)) return {};
        return rule + ", got " + input + " (" + fix + ")";
      },
      description.str());
}

/// within(min, no upper bound, fix): the value must be at least `min`.
template <class T>
CLI::Validator at_least(T min, std::string fix) {
  return within<T>(min, std::nullopt, std::move(fix));
}

}  // namespace mpp::tools
