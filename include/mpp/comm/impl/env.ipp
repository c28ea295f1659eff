#pragma once
// The definitions of env.hpp's functions that are not templates: included by the header
// (inline) unless MPP_SEPARATE_COMPILATION is defined, else compiled once by mpp/impl/src.hpp.
#include "mpp/comm/env.hpp"

namespace mpp::detail {

MPP_DECL int parse_int(std::string_view name, const std::string& text, int min_value) {
  int value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc{} || end != text.data() + text.size() || value < min_value)
    throw EnvironmentError(std::string(name),
                           "mpp: " + std::string(name) + "='" + text +
                               "' is not an integer >= " + std::to_string(min_value) +
                               "; fix the variable or " + std::string(launch_hint));
  return value;
}

MPP_DECL std::optional<int> slurm_tasks_on_node(const std::string& list, int node) {
  int index = 0;
  std::size_t pos = 0;
  while (pos < list.size()) {
    std::size_t comma = list.find(',', pos);
    if (comma == std::string::npos) comma = list.size();
    std::string_view item(list.data() + pos, comma - pos);
    int tasks = 0, repeat = 1;
    auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), tasks);
    if (ec != std::errc{}) return std::nullopt;
    std::string_view rest(end, static_cast<std::size_t>(item.data() + item.size() - end));
    if (!rest.empty()) {
      if (rest.size() < 4 || rest.substr(0, 2) != "(x" || rest.back() != ')') return std::nullopt;
      auto r = std::from_chars(rest.data() + 2, rest.data() + rest.size() - 1, repeat);
      if (r.ec != std::errc{}) return std::nullopt;
    }
    if (node < index + repeat) return tasks;
    index += repeat;
    pos = comma + 1;
  }
  return std::nullopt;
}

MPP_DECL void check_range(std::string_view name, int value, std::string_view bound_name, int bound,
                          std::string_view why) {
  if (value >= bound)
    throw EnvironmentError(std::string(name), "mpp: " + std::string(name) + "=" +
                                                  std::to_string(value) + " is outside [0, " +
                                                  std::string(bound_name) + "=" +
                                                  std::to_string(bound) + "); " + std::string(why) +
                                                  "; " + std::string(launch_hint));
}

}  // namespace mpp::detail

namespace mpp {

MPP_DECL Environment environment() {
  return parse_environment([](std::string_view name) -> std::optional<std::string> {
    const char* value = std::getenv(std::string(name).c_str());
    if (!value) return std::nullopt;
    return std::string(value);
  });
}

}  // namespace mpp
