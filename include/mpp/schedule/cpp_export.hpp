#pragma once
// A table as C++: a header that defines its rows as constexpr data and a schedule type over
// them, and proves that schedule with static_assert. What `mpp-schedule --emit-cpp` writes, so
// that a table found or imported at run time becomes a compile-time schedule of another project.
#include <string>
#include <string_view>

#include "mpp/schedule/action_format.hpp"
#include "mpp/schedule/table.hpp"

namespace mpp {

/// The header text for table `t` (compute-only or lowered, any placement). `type_name` names the
/// schedule type (`using <type_name> = mpp::Custom<...>`) inside namespace `ns`; `source` says
/// where the table came from, in the header's first comment. The rows name their stages, so the
/// placement travels with them; a lowered table keeps its sends and receives for `t.semantics`.
inline std::string to_cpp_header(const ScheduleTable& t, std::string_view type_name,
                                 std::string_view ns, std::string_view source) {
  int width = 1;
  for (int r = 0; r < t.ranks; ++r) width = t.length[r] > width ? t.length[r] : width;
  const std::string P = std::to_string(t.ranks), name(type_name);
  const char* semantics = t.semantics == CommSemantics::rendezvous
                              ? "mpp::CommSemantics::rendezvous"
                              : "mpp::CommSemantics::buffered";
  std::string out;
  out += "#pragma once\n";
  out += "// " + name + ": " + std::string(source) + "; " + P + " ranks, " +
         std::to_string(t.micro_batches) + " micro-batches, " + std::to_string(t.chunks_per_rank) +
         " chunks per rank, placement " + std::string(describe(t.placement).view()) + ".\n";
  out += "// Each row is one rank's actions, in PyTorch's spelling in the comment above it.\n";
  out += "#include \"mpp/schedule.hpp\"\n\nnamespace " + std::string(ns) + " {\n\n";
  out += "inline constexpr mpp::Action " + name + "_rows[" + P + "][" + std::to_string(width) +
         "] = {\n";
  for (int r = 0; r < t.ranks; ++r) {
    out += "    // rank " + std::to_string(r) + ":";
    for (int k = 0; k < t.length[r]; ++k) out += ' ' + to_action_string(t.actions[r][k]);
    out += "\n    {";
    for (int k = 0; k < t.length[r]; ++k) {
      const Action& a = t.actions[r][k];
      out += std::string(k ? ", " : "") + "{mpp::Op::" + std::string(to_string(a.op)) + ", " +
             std::to_string(a.micro_batch) + ", " + std::to_string(a.chunk) + ", " +
             std::to_string(a.stage) + ", " + std::to_string(a.peer) +
             (a.overlap_with_next ? ", true}" : "}");
    }
    out += "},\n";
  }
  out += "};\n\n";
  out += "/// The rows as a schedule: `mpp::Pipeline<Partition, " + std::string(ns) + "::" + name +
         ", Comm>`.\n";
  out += "using " + name + " = mpp::Custom<" + name + "_rows" +
         (t.lowered ? std::string(", ") + semantics : std::string()) + ">;\n\n";
  const auto assertion = [&](const char* s) {
    out += "static_assert(mpp::sound<mpp::verify<" + name + ">(" + P + ", " + s + ")>,\n" +
           "              \"mpp: " + name + " failed verification on " + P + " ranks\");\n";
  };
  if (t.lowered) {
    assertion(semantics);
  } else {  // a compute-only table is lowered for either kind of comm policy
    assertion("mpp::CommSemantics::buffered");
    assertion("mpp::CommSemantics::rendezvous");
  }
  out += "\n}  // namespace " + std::string(ns) + "\n";
  return out;
}

}  // namespace mpp
