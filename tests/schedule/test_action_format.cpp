// Placement as data, and PyTorch's action format both ways: every built-in survives its own CSV,
// the stages a table names are its placement, OVERLAP_F_B pairs, and what is refused or skipped.
#include <doctest/doctest.h>

#include <fstream>
#include <iterator>
#include <memory>
#include <string>

#include "mpp/schedule.hpp"

using namespace mpp;

namespace {

// The ready-made maps.
constexpr Placement looped = interleaved_placement(4, 2);
static_assert(looped.stage_of(1, 1) == 5 && looped.rank_of(5) == 1 && looped.chunk_of(5) == 1);
constexpr Placement vee = v_shape_placement(4, 2);
static_assert(vee.stage_of(0, 1) == 7 && vee.rank_of(7) == 0 && vee.rank_of(4) == 3 &&
              vee.chunk_of(4) == 1);
static_assert(vee.stage_of(4, 0) == -1 && vee.rank_of(8) == -1);  // out of range: no stage

// Any map in which every rank holds the same number of stages: here neither looped nor a V.
constexpr int odd_map[] = {0, 1, 2, 1, 0, 2};
constexpr Placement custom_map = [] {
  Placement p{};
  FixedText error{};
  place_stages(p, 3, odd_map, error);
  return p;
}();
static_assert(custom_map.stage_of(0, 1) == 4 && custom_map.stage_of(2, 1) == 5 &&
              custom_map.chunk_of(3) == 1 && custom_map.rank_of(4) == 0);

// How a stage meets its neighbours, the one answer lowering, verifier, search and executor use:
// an edge at the pipeline's ends, the same rank (in memory), or a message to the holder.
static_assert(vee.link(0, -1) == StageLink{} && vee.link(7, +1).is_edge());
static_assert(vee.link(3, +1) == StageLink{LinkKind::same_rank, 4, 3, 1});  // the V's turn
static_assert(vee.link(4, -1) == StageLink{LinkKind::same_rank, 3, 3, 0});
static_assert(vee.link(0, +1) == StageLink{LinkKind::message, 1, 1, 0});
static_assert(vee.link(7, -1) == StageLink{LinkKind::message, 6, 1, 1});
// In the odd map stages 3 and 4 (ranks 1 and 0) meet by message, 4 and 5 (ranks 0 and 2) too.
static_assert(custom_map.link(3, +1) == StageLink{LinkKind::message, 4, 0, 1});
static_assert(custom_map.link(5, -1) == StageLink{LinkKind::message, 4, 0, 1});
static_assert(interleaved_placement(1, 2).link(0, +1).is_same_rank());  // one rank, two chunks

// Rows that name their stages carry their placement: a V on 2 ranks, written by stage.
using namespace mpp::actions;
inline constexpr Action v_rows[2][8] = {
    {on_stage(0, F(0)), on_stage(0, F(1)), on_stage(3, F(0)), on_stage(3, B(0)), on_stage(3, F(1)),
     on_stage(3, B(1)), on_stage(0, B(0)), on_stage(0, B(1))},
    {on_stage(1, F(0)), on_stage(2, F(0)), on_stage(1, F(1)), on_stage(2, F(1)), on_stage(2, B(0)),
     on_stage(1, B(0)), on_stage(2, B(1)), on_stage(1, B(1))}};
using VRows = Custom<v_rows>;
static_assert(VRows::chunks_per_rank == 2);
static_assert(VRows::table(2).placement == v_shape_placement(2, 2));
static_assert(verify<VRows>(2, CommSemantics::buffered).ok);
static_assert(verify<VRows>(2, CommSemantics::rendezvous).ok);

// The same rows in PyTorch's spelling.
using namespace mpp::action_literals;
inline constexpr Action literal_rows[2][8] = {
    {"0F0"_act, "0F1"_act, "3F0"_act, "3B0"_act, "3F1"_act, "3B1"_act, "0B0"_act, "0B1"_act},
    {"1F0"_act, "2F0"_act, "1F1"_act, "2F1"_act, "2B0"_act, "1B0"_act, "2B1"_act, "1B1"_act}};
static_assert(Custom<literal_rows>::table(2).placement == v_shape_placement(2, 2));

// Rows by chunk with a map given: the same V.
inline constexpr Placement v_map = v_shape_placement(2, 2);
inline constexpr Action chunk_rows[2][8] = {
    {F(0), F(1), F(0, 1), B(0, 1), F(1, 1), B(1, 1), B(0), B(1)},
    {F(0), F(0, 1), F(1), F(1, 1), B(0, 1), B(0), B(1, 1), B(1)}};
static_assert(
    verify<Custom<chunk_rows, CommSemantics::buffered, v_map>>(2, CommSemantics::buffered).ok);
// Without the map the same rows are interleaved, and F(stage 3) would come before F(stage 2).
static_assert(!verify<Custom<chunk_rows>>(2, CommSemantics::buffered).ok);

std::unique_ptr<ScheduleTable> import_csv(const std::string& csv, int* ignored = nullptr,
                                          CommSemantics semantics = CommSemantics::buffered) {
  auto t = std::make_unique<ScheduleTable>();
  const int n = table_from_action_csv(*t, csv, semantics);
  if (ignored) *ignored = n;
  return t;
}

std::string error_of(const std::string& csv) { return std::string(import_csv(csv)->error.view()); }

// One generator's rows are its own; another's, or the same on a V, are not.
static_assert(same_rows(OneFOneB<4>::table(2), OneFOneB<4>::table(2)));
static_assert(!same_rows(OneFOneB<4>::table(2), GPipe<4>::table(2)));
static_assert(!same_rows(OneFOneB<4>::table(2), OneFOneB<4>::table(4)));
static_assert(!same_rows(Interleaved1F1B<4, 2>::table(2), ZeroBubbleV<4>::table(2)));

}  // namespace

TEST_CASE("a placement is any map in which every rank holds as many stages") {
  Placement p{};
  FixedText error{};
  const int uneven[] = {0, 0, 0, 1};
  CHECK_FALSE(place_stages(p, 2, uneven, error));
  CHECK(std::string(error.view()).find("rank 0 holds more than 2 of the 4 stages") !=
        std::string::npos);
  error = FixedText{};
  const int three[] = {0, 1, 0};
  CHECK_FALSE(place_stages(p, 2, three, error));
  CHECK(std::string(error.view()).find("every rank must hold the same number of stages") !=
        std::string::npos);
  CHECK(describe(interleaved_placement(4, 2)).view() == "interleaved");
  CHECK(describe(v_shape_placement(4, 2)).view() == "v-shape");
  CHECK(describe(custom_map).view() == "rank 0: 0 4, rank 1: 1 3, rank 2: 2 5");
}

TEST_CASE("hand-written rows name their stages all or none") {
  static constexpr Action mixed[2][2] = {{on_stage(0, F(0)), B(0)},
                                         {on_stage(1, F(0)), on_stage(1, B(0))}};
  const ScheduleTable t = table_from_rows(mixed, 2);
  CHECK(std::string(t.error.view())
            .find("3 actions of the hand-written table name their stage "
                  "and 1 do not") != std::string::npos);
  static constexpr Action twice[2][2] = {{on_stage(0, F(0)), on_stage(0, B(0))},
                                         {on_stage(0, F(1)), on_stage(0, B(1))}};
  CHECK(std::string(table_from_rows(twice, 2).error.view())
            .find("rank 1 names stage 0, which rank 0 names too") != std::string::npos);
}

TEST_CASE("every built-in survives its own action CSV, compute-only and lowered") {
  for_each_builtin_schedule([]<class F>() {
    const int m = F::takes_micro_batches ? 8 : 1;
    const int v = F::fixed_chunks == 0 ? 2 : F::fixed_chunks;
    auto compute = std::make_unique<ScheduleTable>();
    F::generate(*compute, 4, m, v);
    REQUIRE(compute->ok());
    INFO(F::name);
    // Compute-only: the same rows and the same placement come back.
    const auto back = import_csv(to_action_csv(*compute));
    REQUIRE(back->ok());
    CHECK(same_rows(*back, *compute));
    for (int s = 0; s < 2; ++s) {
      const auto semantics = static_cast<CommSemantics>(s);
      const auto plan = make_plan(*compute, semantics);
      const auto plan_back = make_plan(*back, semantics);
      CHECK(plan_back->figures.makespan == plan->figures.makespan);
      CHECK(plan_back->figures.total_busy == plan->figures.total_busy);
      for (int r = 0; r < 4; ++r)
        CHECK(plan_back->figures.peak_in_flight[r] == plan->figures.peak_in_flight[r]);
      // Lowered (compute and comms): the same actions, sends and receives included.
      const auto lowered = import_csv(to_action_csv(plan->table), nullptr, semantics);
      REQUIRE(lowered->ok());
      CHECK(same_rows(*lowered, plan->table));
      const VerifyResult again = verify(*lowered, semantics);
      CHECK(again.ok);
      CHECK(again.makespan == plan->figures.makespan);
    }
  });
}

TEST_CASE("the stages an imported CSV names are its placement") {
  // ZB-V's V on 2 ranks: rank 0 holds stages 0 and 3.
  const auto t = import_csv("0F0,3F0,3I0,0I0,3W0,0W0\n1F0,2F0,2I0,1I0,2W0,1W0\n");
  REQUIRE(t->ok());
  CHECK(t->placement == v_shape_placement(2, 2));
  CHECK(t->chunks_per_rank == 2);
  CHECK(t->actions[0][1] == Action{Op::F, 0, 1, 3, -1});
  CHECK(verify(*t, CommSemantics::buffered).ok);
  // A free map: rank 0 holds 0 and 2, rank 1 holds 1 and 3 (interleaved), or 0 and 1 alone.
  const auto looped_csv = import_csv("0F0,2F0,2B0,0B0\n1F0,3F0,3B0,1B0\n");
  REQUIRE(looped_csv->ok());
  CHECK(looped_csv->placement == interleaved_placement(2, 2));
}

TEST_CASE("OVERLAP_F_B pairs: imported, timed as their two actions, exported as pairs") {
  // Rank 1 runs F(stage 1, mb 1) overlapped with the backward of (stage 1, mb 0).
  const std::string csv = "0F0,0F1,0B0,0B1\n1F0,1B0,(1F1;1B1)OVERLAP_F_B\n";
  const auto bad = import_csv(csv);
  CHECK(std::string(bad->error.view()).empty());
  // The pair above is F1 with B1 of the same micro-batch: sound, and written back the same way.
  REQUIRE(bad->ok());
  CHECK(bad->actions[1][2].overlap_with_next);
  CHECK(to_action_csv(*bad) == csv);
  const auto plan = make_plan(*bad, CommSemantics::buffered);
  CHECK(plan->figures.busy[1] == 6);  // F + B + (F + B): the pair takes the time of both
  CHECK(to_action_csv(plan->table).find("(1F1;1B1)OVERLAP_F_B") != std::string::npos);
  // A pair whose second action is no backward is refused where it is written.
  CHECK(error_of("0F0,(0F1;0F2)OVERLAP_F_B\n")
            .find("line 1, column 2 of the action CSV: cannot parse '(0F1;0F2)OVERLAP_F_B'") !=
        std::string::npos);
  // The mark on an F whose next compute is no backward breaks the overlap-pair rule.
  auto t = import_csv("0F0,0F1,0B0,0B1\n1F0,1B0,1F1,1B1\n");
  t->actions[0][0].overlap_with_next = true;
  CHECK(verify(*t, CommSemantics::buffered).rule == Rule::overlap_pair);
}

TEST_CASE("the action CSV: what is refused names its line and column, what is skipped says why") {
  CHECK(error_of("0F0,0B0\n1F0,1X0\n")
            .find("line 2, column 2 of the action CSV: cannot parse "
                  "action '1X0'") != std::string::npos);
  CHECK(error_of("0F0,1F0\n1F0,1B0\n")
            .find("line 2, column 1 of the action CSV: stage 1 is on "
                  "line 1 (rank 0) already") != std::string::npos);
  CHECK(error_of("0F0,0B0\n2F0,2B0\n").find("stage 1 is named by no rank") != std::string::npos);
  int ignored = 0;
  const auto t = import_csv("0UNSHARD,0F0,0B0,0REDUCE_GRAD\n1UNSHARD,1F0,1B0,1RESHARD\n", &ignored);
  REQUIRE(t->ok());
  CHECK(ignored == 4);
  CHECK(t->length[0] == 2);
  CHECK(ignored_action_reason.find("FSDP") != std::string_view::npos);
}

TEST_CASE("a table as a C++ header: constexpr rows, a schedule type and its proof") {
  auto compute = std::make_unique<ScheduleTable>();
  ZeroBubbleVFamily::generate(*compute, 2, 4, 2);
  const std::string header = to_cpp_header(*compute, "ZbvP2", "user", "mpp-schedule zb-v");
  CHECK(header.find("#include \"mpp/schedule.hpp\"") != std::string::npos);
  CHECK(header.find("inline constexpr mpp::Action ZbvP2_rows[2][") != std::string::npos);
  CHECK(header.find("// rank 0: 0F0 0F1 0F2 3F0 3I0") != std::string::npos);
  CHECK(header.find("{mpp::Op::F, 0, 1, 3, -1}") != std::string::npos);
  CHECK(header.find("using ZbvP2 = mpp::Custom<ZbvP2_rows>;") != std::string::npos);
  CHECK(header.find("static_assert(mpp::sound<mpp::verify<ZbvP2>(2, "
                    "mpp::CommSemantics::rendezvous)>") != std::string::npos);
  CHECK(header.find("placement v-shape") != std::string::npos);
}

// DualPipeV on 4 ranks and 10 micro-batches: proven under both kinds of comm policy, with
// DualPipe's figures (every rank holds 2P + 1 = 9 chunk activations; idles at most 2(P - 1)).
static_assert(verify<DualPipeV<10>>(4, CommSemantics::buffered).ok);
static_assert(verify<DualPipeV<10>>(4, CommSemantics::rendezvous).ok);
static_assert(verify<DualPipeV<10>>(4, CommSemantics::buffered).max_peak_in_flight() == 9);
static_assert(DualPipeVFamily::matches_literature(verify<DualPipeV<10>>(4, CommSemantics::buffered),
                                                  4, 10, 2));

TEST_CASE("a DualPipeV table written in PyTorch's format imports with mpp's own figures") {
  // Written by tests/schedule/data/dualpipev_torch.py, which follows PyTorch's ScheduleDualPipeV.
  std::ifstream in(std::string(MPP_SCHEDULE_DATA_DIR) + "/dualpipev_p4_m10.csv");
  REQUIRE(in);
  const std::string csv((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(csv.find(")OVERLAP_F_B") != std::string::npos);
  const auto imported = import_csv(csv);
  REQUIRE(imported->ok());
  CHECK(imported->placement == v_shape_placement(4, 2));
  auto generated = std::make_unique<ScheduleTable>();
  DualPipeVFamily::generate(*generated, 4, 10, 2);
  CHECK(same_rows(*imported, *generated));
  for (int s = 0; s < 2; ++s) {
    const auto semantics = static_cast<CommSemantics>(s);
    const auto mine = make_plan(*generated, semantics);
    const auto theirs = make_plan(*imported, semantics);
    CHECK(theirs->figures.makespan == mine->figures.makespan);
    CHECK(theirs->figures.bubble_fraction() == doctest::Approx(mine->figures.bubble_fraction()));
    CHECK(theirs->figures.max_peak_in_flight() == 9);
  }
  CHECK(make_plan(*imported, CommSemantics::buffered)->figures.makespan == 63);
  CHECK(make_plan(*imported, CommSemantics::rendezvous)->figures.makespan == 66);
  CHECK(to_action_csv(*imported) == csv);
}
