#pragma once
// The executor-facing API: a verified, lowered plan for (schedule, comm semantics, P ranks).
//
//   const mpp::Plan& plan = *mpp::make_plan(Sched::table(P), Comm::semantics);   // run time
//   for (const mpp::Action& a : plan.actions(rank)) switch (a.op) { ... }
//
// Each rank runs plan.actions(rank) in order:
//   F / B / I / W  compute on local chunk a.chunk (global stage a.stage) for micro-batch
//   a.micro_batch SEND_F         send the output of F(a.stage, mb) to rank a.peer          (tag:
//   activations) RECV_F         receive the input of F(a.stage, mb) from rank a.peer      (tag:
//   activations) SEND_B         send the input grad of B/I(a.stage, mb) to rank a.peer    (tag:
//   gradients) RECV_B         receive the output grad for B/I(a.stage, mb) from a.peer  (tag:
//   gradients)
// Messages between two ranks match in order per direction and kind (use one tag for
// activations and another for gradients). Rendezvous plans: run each SEND/RECV to completion
// in order. Buffered plans: RECV posts an irecv (wait for it before the compute that needs it),
// SEND posts an isend (keep the handle; wait for all of them before the step ends).
#include <memory>

#include "mpp/schedule/builtin.hpp"
#include "mpp/schedule/concepts.hpp"
#include "mpp/schedule/lowering.hpp"
#include "mpp/schedule/verify.hpp"

namespace mpp {

/// A lowered, verified schedule with its predicted figures: what an executor runs (see the file
/// comment for how). Built by make_plan(), plan_into() or plan_for().
struct Plan {
  ScheduleTable table{};  ///< lowered for table.semantics
  VerifyResult
      figures{};  ///< predicted makespan, bubble, peak in-flight per rank (units of `costs`)
  Costs costs{};  ///< The cost model the figures were predicted with.

  /// Pipeline ranks P.
  constexpr int ranks() const { return table.ranks; }
  /// Global stages P * V.
  constexpr int stages() const { return table.stages(); }
  /// Micro-batches M per step.
  constexpr int micro_batches() const { return table.micro_batches; }
  /// Model chunks V per rank.
  constexpr int chunks_per_rank() const { return table.chunks_per_rank; }
  /// The semantics the table was lowered for.
  constexpr CommSemantics semantics() const { return table.semantics; }
  /// What `rank` runs, in order.
  constexpr std::span<const Action> actions(int rank) const { return table.rank_actions(rank); }
  /// The global stage of local `chunk` on `rank`.
  constexpr int stage_of(int rank, int chunk) const { return table.stage_of(rank, chunk); }
  /// The rank that holds `stage`.
  constexpr int rank_of(int stage) const { return table.rank_of(stage); }
  /// The local chunk index of `stage`.
  constexpr int chunk_of(int stage) const { return table.chunk_of(stage); }
};

namespace detail {
/// Lowers and verifies. If the lowered table is unsound and the compute table alone already
/// breaks a rule, that error is reported instead, at the step of the row as written.
constexpr void lower_and_verify(ScheduleTable& lowered, VerifyResult& out,
                                const ScheduleTable& compute, CommSemantics semantics,
                                const Costs& costs) {
  lower_into(lowered, compute, semantics, costs);
  verify_into(out, lowered, semantics, costs, nullptr);
  if (out.ok || !compute.ok() || compute.lowered) return;
  VerifyResult compute_level{};
  verify_into(compute_level, compute, semantics, costs, nullptr, true);
  if (!compute_level.ok) out = compute_level;
}
}  // namespace detail

/// Lowers and verifies in place. figures.ok tells whether the plan is sound.
constexpr void plan_into(Plan& plan, const ScheduleTable& compute, CommSemantics semantics,
                         const Costs& costs = {}) {
  plan.costs = costs;
  detail::lower_and_verify(plan.table, plan.figures, compute, semantics, costs);
}

/// Lowers `compute` for `semantics`, verifies it, and returns the plan on the heap (a Plan is
/// about 650 KB). Throws ScheduleError with the verifier's message if the schedule is unsound.
inline std::unique_ptr<Plan> make_plan(const ScheduleTable& compute, CommSemantics semantics,
                                       const Costs& costs = {}) {
  auto plan = std::make_unique<Plan>();
  plan_into(*plan, compute, semantics, costs);
  if (!plan->figures.ok) throw ScheduleError(std::string(plan->figures.message.view()));
  return plan;
}

/// Run-time choice of a built-in schedule (P, M, V from flags or the world size).
inline std::unique_ptr<Plan> make_plan(const ScheduleSpec& spec, CommSemantics semantics, int ranks,
                                       const Costs& costs = {}) {
  auto compute = std::make_unique<ScheduleTable>();
  generate_into(*compute, spec, ranks);
  return make_plan(*compute, semantics, costs);
}

/// Compile-time (or run-time) plan of a schedule policy for a comm policy's semantics.
template <schedule Sched, class Comm>
requires detail::has_comm_semantics<Comm>
constexpr Plan plan_for(int ranks, const Costs& costs = {}) {
  Plan plan{};
  ScheduleTable compute{};
  table_into<Sched>(compute, ranks);
  plan_into(plan, compute, Comm::semantics, costs);
  return plan;
}

/// `static_assert(mpp::verify<Sched, Comm>(P).ok)`: generate, lower for Comm::semantics, verify.
template <schedule Sched, class Comm>
requires detail::has_comm_semantics<Comm>
constexpr VerifyResult verify(int ranks, const Costs& costs = {}) {
  VerifyResult out{};
  ScheduleTable compute{};
  table_into<Sched>(compute, ranks);  // in place when it can: no copy of a large table
  ScheduleTable lowered{};
  detail::lower_and_verify(lowered, out, compute, Comm::semantics, costs);
  return out;
}

/// `static_assert(mpp::sound<mpp::verify<Sched>(P, mpp::CommSemantics::buffered)>)`: the same
/// proof for a semantics named directly rather than through a comm policy (what a header written
/// by `mpp-schedule --emit-cpp` asserts, with nothing but mpp/schedule.hpp included).
template <schedule Sched>
constexpr VerifyResult verify(int ranks, CommSemantics semantics, const Costs& costs = {}) {
  VerifyResult out{};
  ScheduleTable compute{};
  table_into<Sched>(compute, ranks);
  ScheduleTable lowered{};
  detail::lower_and_verify(lowered, out, compute, semantics, costs);
  return out;
}

}  // namespace mpp
