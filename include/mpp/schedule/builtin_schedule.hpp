#pragma once
// BuiltinSchedule<Family, M, V>: what every built-in schedule tag inherits (its knobs, its table
// from its family's generator, its display name).
#include <string>
#include <string_view>

#include "mpp/schedule/table.hpp"

namespace mpp {

/// The base of a built-in schedule tag: `template <int M> struct GPipe : BuiltinSchedule<
/// GPipeFamily, M, 1> {}`. The family (see `schedule_family`) holds the generator.
template <class Family, int M, int V>
struct BuiltinSchedule {
  static constexpr int micro_batches = M;    ///< M, micro-batches per step.
  static constexpr int chunks_per_rank = V;  ///< V, model chunks per rank.
  /// The family's name: "GPipe", "OneFOneB", ...
  static constexpr std::string_view name = Family::name;
  /// The family this tag belongs to (its run-time counterpart).
  using family = Family;

  /// Fills `t` with the compute table on `ranks` ranks; a rule it breaks is in its `error`.
  static constexpr void generate(ScheduleTable& t, int ranks) { Family::generate(t, ranks, M, V); }
  /// The compute table on `ranks` ranks; a rule it breaks is in its `error`.
  static constexpr ScheduleTable table(int ranks) {
    ScheduleTable t{};
    generate(t, ranks);
    return t;
  }
  /// "GPipe<8>", "Interleaved1F1B<8,2>", "Naive": the name with the knobs the family takes.
  static std::string display_name() {
    // Appended piece by piece: `"<" + std::to_string(M)` makes g++ 12 at -O3 warn of a memcpy
    // overflow that cannot happen (-Wstringop-overflow, a known false positive).
    std::string n(name);
    if (!Family::takes_micro_batches) return n;
    n += '<';
    n += std::to_string(M);
    if (Family::fixed_chunks == 0) {
      n += ',';
      n += std::to_string(V);
    }
    n += '>';
    return n;
  }
};

}  // namespace mpp
