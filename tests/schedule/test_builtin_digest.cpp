// Every built-in schedule as it is: for every P <= 8 and M <= 32 (V = 2 where V is a knob), under
// both comm semantics and two cost models, its lowered rows and everything the verifier says of
// them, folded into one digest per family. A change meant to make generating, lowering or
// verifying cheaper must leave every digest as it is; a change meant to alter a schedule updates
// that family's digest below, on purpose, and says why in its commit.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string_view>

#include "mpp/schedule.hpp"

using namespace mpp;

namespace {

/// FNV-1a over 64-bit values, byte by byte from the low end (the same on every host).
struct Digest {
  std::uint64_t value = 14695981039346656037ull;
  void add(long long v) {
    const auto u = static_cast<std::uint64_t>(v);
    for (int byte = 0; byte < 8; ++byte) {
      value ^= (u >> (8 * byte)) & 0xffu;
      value *= 1099511628211ull;
    }
  }
  void add(std::string_view text) {
    add(static_cast<long long>(text.size()));
    for (const char c : text) add(static_cast<long long>(static_cast<unsigned char>(c)));
  }
  void add(const Action& a) {
    add(static_cast<long long>(a.op));
    add(a.micro_batch);
    add(a.chunk);
    add(a.stage);
    add(a.peer);
    add(a.overlap_with_next ? 1 : 0);
  }
};

/// The unit costs, and a model in which the stages differ, messages cost time and the ranks share
/// two cores: the rendezvous lowering, the replay and the core sharing all read the costs.
Costs cost_model(int which) {
  if (which == 0) return Costs{};
  Costs c{.forward = 2, .backward = 4, .input_grad = 2, .weight_grad = 2, .comm = 1};
  c.send_overhead = 1;
  c.cores = 2;
  for (int s = 0; s < 16; ++s) c.stage[static_cast<std::size_t>(s)].forward = 2 + s % 3;
  c.stage[15].backward = 6;
  return c;
}

template <class Family>
std::uint64_t family_digest() {
  Digest d;
  auto compute = std::make_unique<ScheduleTable>();
  auto lowered = std::make_unique<ScheduleTable>();
  VerifyResult result{};
  const int last_m = Family::takes_micro_batches ? 32 : 1;
  const int v = Family::fixed_chunks == 0 ? 2 : Family::fixed_chunks;
  for (int m = 1; m <= last_m; ++m)
    for (int p = 1; p <= 8; ++p) {
      *compute = ScheduleTable{};
      Family::generate(*compute, p, m, v);
      d.add(compute->error.view());
      for (int model = 0; model < 2; ++model)
        for (const CommSemantics semantics : {CommSemantics::rendezvous, CommSemantics::buffered}) {
          *lowered = ScheduleTable{};
          detail::lower_and_verify(*lowered, result, *compute, semantics, cost_model(model));
          for (int r = 0; r < lowered->ranks; ++r) {
            d.add(lowered->length[r]);
            for (const Action& a : lowered->rank_actions(r)) d.add(a);
          }
          d.add(result.ok ? 1 : 0);
          d.add(result.message.view());
          d.add(static_cast<long long>(result.rule));
          d.add(result.rank);
          d.add(result.step);
          d.add(result.action);
          d.add(result.makespan);
          d.add(result.total_busy);
          for (int r = 0; r < result.ranks; ++r) {
            d.add(result.busy[r]);
            d.add(result.peak_in_flight[r]);
            d.add(result.first_start[r]);
            d.add(result.finish[r]);
          }
        }
    }
  return d.value;
}

struct Expected {
  std::string_view family;
  std::uint64_t digest;
};

// clang-format off
constexpr Expected expected[] = {
    {"Naive",           0x62a7a54d7edd3c85ull},
    {"GPipe",           0x81c58a36484f7aa3ull},
    {"OneFOneB",        0x179c51a4fa4a50a0ull},
    {"Interleaved1F1B", 0x7174f6e464b2f9c9ull},
    {"ZeroBubbleH1",    0x5e0b86a0373907abull},
    {"ZeroBubbleH2",    0xfbb15cd9670f1c89ull},
    {"ZeroBubbleV",     0x2311f975c318ff9cull},
    {"DualPipeV",       0x2ca17d399ebb4390ull},
    {"VHalf",           0x2557be755b375265ull},
    {"VMin",            0x9a493a31957d81dbull},
    {"VZeroBubble",     0xc43406e26d8423afull},
};
// clang-format on

}  // namespace

TEST_CASE("every built-in schedule's rows and figures are the ones its digest records") {
  int checked = 0;
  for_each_builtin_schedule([&]<class Family>() {
    const std::uint64_t digest = family_digest<Family>();
    const Expected* entry = nullptr;
    for (const Expected& e : expected)
      if (e.family == Family::name) entry = &e;
    char hex[19];
    std::snprintf(hex, sizeof hex, "0x%016llx", static_cast<unsigned long long>(digest));
    INFO(Family::name, " digest ", hex);
    REQUIRE_MESSAGE(entry != nullptr, "a built-in family with no digest: add its line");
    CHECK_MESSAGE(digest == entry->digest,
                  "its rows or figures changed; if that is meant, update its digest here");
    ++checked;
  });
  CHECK(checked == static_cast<int>(std::size(expected)));
}
