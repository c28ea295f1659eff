#pragma once
// The job's shape from the variables a multi-node launcher script exports before it calls mpprun
// (NNODES, NODE_RANK, MASTER_ADDR, MASTER_PORT), so that the same line runs on every node.
// Standard library only: tested with a map instead of the process environment.
#include <charconv>
#include <optional>
#include <string>
#include <string_view>

#include "mpp/launch/environment.hpp"

namespace mpp::launch {

/// Fills `layout` from NNODES, NODE_RANK, MASTER_ADDR and MASTER_PORT where they are set and not
/// empty, reading them through `get(name) -> std::optional<std::string>`. Flags given on the
/// command line are applied afterwards and win. Throws LaunchError naming the variable, its
/// value and the fix when a value is not a number in its range.
template <class Lookup>
void apply_layout_environment(WorldLayout& layout, Lookup get) {
  auto read = [&](std::string_view name) -> std::optional<std::string> {
    std::optional<std::string> value = get(name);
    if (value && value->empty()) return std::nullopt;
    return value;
  };
  auto read_int = [&](std::string_view name, int min_value, int max_value,
                      std::string_view meaning) -> std::optional<int> {
    const std::optional<std::string> text = read(name);
    if (!text) return std::nullopt;
    int value = 0;
    const auto [end, ec] = std::from_chars(text->data(), text->data() + text->size(), value);
    if (ec != std::errc{} || end != text->data() + text->size() || value < min_value ||
        value > max_value)
      throw LaunchError("mpprun: " + std::string(name) + "='" + *text +
                        "' (from the environment) is not an integer in [" +
                        std::to_string(min_value) + ", " + std::to_string(max_value) +
                        "]; set it to " + std::string(meaning) + ", or unset it and pass --" +
                        (name == "NNODES"      ? std::string("nnodes")
                         : name == "NODE_RANK" ? std::string("node-rank")
                                               : std::string("master-port")));
    return value;
  };
  constexpr int max_int = 1 << 30;
  if (auto nnodes = read_int("NNODES", 1, max_int, "the number of nodes in the job"))
    layout.nnodes = *nnodes;
  if (auto node_rank = read_int("NODE_RANK", 0, max_int, "this node's index in [0, NNODES)"))
    layout.node_rank = *node_rank;
  if (auto port = read_int("MASTER_PORT", 1, 65535, "the rendezvous port, the same on every node"))
    layout.master_port = *port;
  if (auto addr = read("MASTER_ADDR")) layout.master_addr = *addr;
}

}  // namespace mpp::launch
