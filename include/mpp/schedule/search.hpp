#pragma once
// Schedule search: from per-stage costs (measured or given) and a cap on activation memory, a
// compute table that the verifier proves and that minimises the predicted step time, with the
// lower bound it is compared with.
//
// The method is list scheduling, as the Zero Bubble paper's automatic scheduler does, repeated
// over a small space of policies. Each candidate replays the pipeline in time under the costs: a
// rank that is free takes, by the candidate's priorities, a forward whose input is there (while
// it is below its warm-up limit and its cap on activations), the input grad (I) of its oldest
// micro-batch whose output grad is there, or a pending weight grad (W), which fills what would
// otherwise be idle time. The candidates differ in how far each rank runs forwards ahead of its
// input grads (flat or falling by one per rank as 1F1B's), in whether a ready I goes before a ready
// forward, in whether a W may wait while nothing else is ready, and, with several chunks per rank
// under a cap, in how much of the cap a micro-batch that entered a rank keeps for its later chunks
// there (none, one, all: with none, a rank whose cap is full of first chunks cannot run the later
// chunk that would free one, and messages that cost make that happen). The built-ins with the same
// placement are candidates too. Every candidate is verified under the costs; the shortest sound
// one wins, and of equally short ones of a placement the first tried: a built-in before a table
// of the search. Deterministic, and a few milliseconds per candidate for P <= 8, M <= 32.
//
// With a free placement the search also chooses which rank holds which stage. Every map with V
// stages per rank is allowed, too many to search each (2 027 025 for P = 8, V = 2), so a few are:
// the ready-made ones (looped, V, and blocks of V consecutive stages), and from each the map that
// swapping two stages between ranks reaches while every swap lowers the map's lower bound (its
// busiest rank's compute and head) or keeps it and sends fewer messages. Each is searched as above.
#include <string_view>

#include "mpp/schedule/builtin.hpp"
#include "mpp/schedule/cost_model.hpp"
#include "mpp/schedule/lowering.hpp"
#include "mpp/schedule/table.hpp"
#include "mpp/schedule/verify.hpp"

namespace mpp {

/// What to search for.
struct SearchSpec {
  int ranks = 4;          ///< P
  int micro_batches = 8;  ///< M
  /// Where the stages live; unplaced (ranks 0): interleaved with one chunk per rank.
  Placement placement{.ranks = 0};
  /// The search chooses where the stages live as well: `placement` then fixes only the number of
  /// chunks per rank (and is one of the maps tried).
  bool free_placement = false;
  /// The cap on activations a rank holds (chunk activations, forwarded and not yet through their
  /// weight grad): 1F1B's peak is P for one chunk per rank, 2P for two. 0: no cap.
  int max_in_flight = 0;
  bool split_backward = true;  ///< I and W (zero-bubble style), or full backwards B only
  Costs costs{};               ///< per-op and per-stage durations, and the cost of a message
  CommSemantics semantics = CommSemantics::buffered;  ///< what the figures are predicted for
};

/// What the search found. `table` is compute-only (lower it for a comm policy, or run it as
/// `Custom` rows through `to_cpp_header`); `figures` are the verifier's under the spec's costs.
struct SearchResult {
  ScheduleTable table{};   ///< the best sound table found
  VerifyResult figures{};  ///< its makespan, bubble and peak per rank, lowered for the semantics
  /// A step cannot be shorter: the busiest rank's compute plus the forwards (and messages) before
  /// its first stage can start. With a free placement, that of the placement the table has.
  int lower_bound = 0;
  int candidates = 0;  ///< the tables tried
  int placements = 0;  ///< the placements tried: 1 unless the placement is free
  /// Where the table came from: "list scheduling", or the built-in it is (the built-ins that fit
  /// the spec are candidates too).
  FixedText origin{};
  FixedText error{};  ///< non-empty when the spec is refused or no candidate is sound

  /// True when a sound table was found.
  constexpr bool ok() const { return error.empty() && figures.ok; }
  /// How far the makespan is above the lower bound, as a fraction of the bound.
  constexpr double gap() const {
    return lower_bound > 0 ? static_cast<double>(figures.makespan - lower_bound) / lower_bound
                           : 0.0;
  }
};

namespace detail {

/// One candidate's knobs (see the file comment).
struct SearchPolicy {
  /// How many forwards rank 0 runs ahead of its input grads (flat: every rank the same).
  int limit = 1;
  bool falling = false;            ///< rank r runs limit + (P - 1 - r) ahead, as 1F1B's warm-up
  bool input_grad_first = true;    ///< a ready I goes before a ready forward
  bool weight_grad_waits = false;  ///< a W runs only when nothing else can start before it ends
  /// Under a cap, the slots a micro-batch that entered a rank keeps for its later chunks there
  /// (see SearchState::reserved): none, one (the oldest can always go on), or all of them.
  int reserve = 0;
};

/// The replay's scratch, one int per (stage * M + mb) (times + 1; 0: not yet).
struct SearchState {
  int forward_end[max_slots];
  int input_grad_end[max_slots];
  int next_forward[max_stages], next_input_grad[max_stages];
  int clock[max_ranks], limit[max_ranks];
  int in_flight[max_ranks];  // forwarded, weight grad not yet done: the memory the cap bounds
  // Later chunks to come of the micro-batches that entered the rank (its chunk 0). Under a cap a
  // rank that filled it with first chunks cannot run the later chunk that would free them (a V
  // with messages that cost deadlocks so): a policy keeps room for some of them.
  int reserved[max_ranks];
  int open[max_ranks];     // forwarded, input grad not yet done: what the warm-up limit bounds
  int waiting[max_ranks];  // 1: nothing can start until another rank moves
  int pending_w[max_ranks][max_actions_per_rank];  // stage * M + mb of each I whose W is to come
  int pending_head[max_ranks], pending_tail[max_ranks];
};

/// The time `stage`'s input (forward) or output grad (backward) is there for micro-batch `mb`, or
/// -1 when the action it waits for has not run.
constexpr int arrival(const ScheduleTable& t, const SearchState& st, const Costs& costs, int stage,
                      int mb, bool forward) {
  const int M = t.micro_batches;
  const StageLink link = t.placement.link(stage, forward ? -1 : +1);
  if (link.is_edge()) return 0;
  const int from = link.stage;
  const int end = forward ? st.forward_end[from * M + mb] : st.input_grad_end[from * M + mb];
  if (end == 0) return -1;
  return end - 1 + (link.is_message() ? costs.comm : 0);
}

/// Replays one candidate into `t` (compute-only, placed). False if it cannot finish (a limit that
/// leaves no forward to run while nothing else can: the candidate is dropped).
constexpr bool list_schedule(ScheduleTable& t, const SearchSpec& spec, const SearchPolicy& policy,
                             SearchState& st) {
  const int P = t.ranks, M = t.micro_batches, V = t.chunks_per_rank, S = t.stages();
  const Costs& costs = spec.costs;
  for (int r = 0; r < P; ++r) {
    const int limit = policy.limit + (policy.falling ? P - 1 - r : 0);
    st.limit[r] = limit < 1 ? 1 : limit;
  }
  const bool split = spec.split_backward;
  int remaining = S * M * (split ? 3 : 2);
  constexpr int never = 0x3fffffff;
  while (remaining > 0) {
    // The rank that is free first, has work left and is not waiting for another rank.
    int r = -1;
    for (int q = 0; q < P; ++q)
      if (t.length[q] < V * M * (split ? 3 : 2) && st.waiting[q] == 0 &&
          (r < 0 || st.clock[q] < st.clock[r]))
        r = q;
    if (r < 0) return false;  // every rank with work waits for another: this limit cannot run
    const int now = st.clock[r];
    // Candidates: their start times (never: not ready, or not allowed).
    int f_stage = -1, f_start = never, i_stage = -1, i_start = never;
    for (int c = V - 1; c >= 0; --c) {  // the deeper chunk first on a tie
      const int s = t.stage_of(r, c);
      const int later = st.reserved[r] + V - 1;  // with this micro-batch's own
      const int kept = policy.reserve < later ? policy.reserve : later;
      const bool room = spec.max_in_flight == 0 ||
                        st.in_flight[r] + 1 + (c == 0 ? kept : 0) <= spec.max_in_flight;
      if (st.next_forward[s] < M && st.open[r] < st.limit[r] && room) {
        const int at = arrival(t, st, costs, s, st.next_forward[s], true);
        if (at >= 0 && (at > now ? at : now) < f_start) {
          f_start = at > now ? at : now;
          f_stage = s;
        }
      }
      const int k = st.next_input_grad[s];
      if (k < M && st.forward_end[s * M + k] != 0) {
        const int at = arrival(t, st, costs, s, k, false);
        const int ready =
            at < 0 ? -1 : (at > st.forward_end[s * M + k] - 1 ? at : st.forward_end[s * M + k] - 1);
        if (ready >= 0 && (ready > now ? ready : now) < i_start) {
          i_start = ready > now ? ready : now;
          i_stage = s;
        }
      }
    }
    const bool has_w = split && st.pending_head[r] < st.pending_tail[r];
    Op op = Op::F;
    int stage = -1, start = never;
    const bool f_now = f_start == now, i_now = i_start == now;
    if (f_now && i_now) {
      op = policy.input_grad_first ? (split ? Op::I : Op::B) : Op::F;
      stage = policy.input_grad_first ? i_stage : f_stage;
      start = now;
    } else if (i_now) {
      op = split ? Op::I : Op::B;
      stage = i_stage;
      start = now;
    } else if (f_now) {
      op = Op::F;
      stage = f_stage;
      start = now;
    } else if (has_w) {
      const int id = st.pending_w[r][st.pending_head[r]];
      const int w_end = now + costs.of(Op::W, id / M);
      const int next = f_start < i_start ? f_start : i_start;
      if (!policy.weight_grad_waits || w_end <= next || next == never) {
        op = Op::W;
        stage = id / M;
        start = now;
      }
    }
    if (stage < 0) {
      // Nothing to start now: move to the first input known to come; else run a held-back W;
      // else wait until another rank has moved.
      const int next = f_start < i_start ? f_start : i_start;
      if (next != never) {
        st.clock[r] = next;
        continue;
      }
      if (!has_w) {
        st.waiting[r] = 1;
        continue;
      }
      op = Op::W;
      stage = st.pending_w[r][st.pending_head[r]] / M;
      start = now;
    }
    const int chunk = t.chunk_of(stage);
    int mb = 0;
    const int end = start + costs.of(op, stage);
    if (op == Op::F) {
      mb = st.next_forward[stage]++;
      st.forward_end[stage * M + mb] = end + 1;
      ++st.in_flight[r];
      st.reserved[r] += chunk == 0 ? V - 1 : -1;
      ++st.open[r];
    } else if (op == Op::W) {
      const int id = st.pending_w[r][st.pending_head[r]++];
      mb = id % M;
      --st.in_flight[r];
    } else {
      mb = st.next_input_grad[stage]++;
      st.input_grad_end[stage * M + mb] = end + 1;
      --st.open[r];
      if (op == Op::I)
        st.pending_w[r][st.pending_tail[r]++] = stage * M + mb;
      else
        --st.in_flight[r];
    }
    emit(t, r, op, mb, chunk);
    st.clock[r] = end;
    for (int q = 0; q < P; ++q) st.waiting[q] = 0;
    --remaining;
  }
  return true;
}

/// The lower bound of SearchResult, for M micro-batches through placement `p`. On fewer cores
/// than ranks, the cores cannot do the ranks' compute in less than its sum over the cores either.
constexpr int search_lower_bound(const Placement& p, int M, const Costs& costs, bool split) {
  const int P = p.ranks, V = p.chunks_per_rank;
  int bound = 0, total = 0;
  for (int r = 0; r < P; ++r) {
    int busy = 0, head = 0x3fffffff;
    for (int c = 0; c < V; ++c) {
      const int s = p.stage_of(r, c);
      // Split, a built-in with whole backwards is a candidate too: the cheaper of the two.
      const int halves = costs.of(Op::I, s) + costs.of(Op::W, s), whole = costs.of(Op::B, s);
      busy += M * (costs.of(Op::F, s) + (split && halves < whole ? halves : whole));
      int reach = 0;  // the first forward's input reaches stage s
      for (int q = 0; q < s; ++q)
        reach += costs.of(Op::F, q) + (p.link(q, +1).is_message() ? costs.comm : 0);
      head = reach < head ? reach : head;
    }
    bound = head + busy > bound ? head + busy : bound;
    total += busy;
  }
  if (costs.shares_cores(P)) {
    const int shared = (total + costs.cores - 1) / costs.cores;
    bound = shared > bound ? shared : bound;
  }
  return bound;
}

/// At most this many placements are searched when the placement is free.
inline constexpr int max_free_placements = 8;

/// How a free search ranks a placement before searching it: its lower bound, then its messages
/// (links between consecutive stages on two ranks).
struct PlacementScore {
  int bound = 0;
  int messages = 0;
  friend constexpr auto operator<=>(const PlacementScore&, const PlacementScore&) = default;
};

constexpr PlacementScore placement_score(const Placement& p, const SearchSpec& spec) {
  PlacementScore score{search_lower_bound(p, spec.micro_batches, spec.costs, spec.split_backward),
                       0};
  for (int s = 0; s + 1 < p.stages(); ++s) score.messages += p.link(s, +1).is_message() ? 1 : 0;
  return score;
}

/// `p` with its ranks renumbered in the order of their lowest stage (stage 0 on rank 0): every
/// rank and every link cost the same to the cost model, so renumbered maps are one map.
constexpr Placement canonical(const Placement& p) {
  int renamed[max_ranks], rank_of_stage[max_stages]{};
  for (int& r : renamed) r = -1;
  int next = 0;
  for (int s = 0; s < p.stages(); ++s) {
    int& to = renamed[p.rank_of(s)];
    if (to < 0) to = next++;
    rank_of_stage[s] = to;
  }
  Placement out{};
  FixedText ignored{};  // a renumbered placement is a placement
  place_stages(out, p.ranks,
               std::span<const int>(rank_of_stage, static_cast<std::size_t>(p.stages())), ignored);
  return out;
}

/// Rank r holds stages r * V .. r * V + V - 1: no message inside a rank's block.
constexpr Placement block_placement(int ranks, int chunks_per_rank) {
  int rank_of_stage[max_stages]{};
  for (int s = 0; s < ranks * chunks_per_rank; ++s) rank_of_stage[s] = s / chunks_per_rank;
  Placement out{};
  FixedText ignored{};  // V stages on each of P ranks
  place_stages(
      out, ranks,
      std::span<const int>(rank_of_stage, static_cast<std::size_t>(ranks * chunks_per_rank)),
      ignored);
  return out;
}

/// From `p`, swaps two stages between ranks while a swap scores lower, taking the best swap each
/// time (see the file comment).
constexpr Placement improve_placement(Placement p, const SearchSpec& spec) {
  const int S = p.stages();
  PlacementScore score = placement_score(p, spec);
  for (int round = 0; round < S * S; ++round) {
    int best_a = -1, best_b = -1;
    PlacementScore best = score;
    for (int a = 0; a < S; ++a)
      for (int b = a + 1; b < S; ++b) {
        if (p.rank_of(a) == p.rank_of(b)) continue;
        int rank_of_stage[max_stages]{};
        for (int s = 0; s < S; ++s) rank_of_stage[s] = p.rank_of(s);
        rank_of_stage[a] = p.rank_of(b);
        rank_of_stage[b] = p.rank_of(a);
        Placement swapped{};
        FixedText ignored{};  // a swap keeps V stages on every rank
        place_stages(swapped, p.ranks,
                     std::span<const int>(rank_of_stage, static_cast<std::size_t>(S)), ignored);
        const PlacementScore candidate = placement_score(swapped, spec);
        if (candidate < best) {
          best = candidate;
          best_a = a;
          best_b = b;
        }
      }
    if (best_a < 0) break;
    int rank_of_stage[max_stages]{};
    for (int s = 0; s < S; ++s) rank_of_stage[s] = p.rank_of(s);
    rank_of_stage[best_a] = p.rank_of(best_b);
    rank_of_stage[best_b] = p.rank_of(best_a);
    FixedText ignored{};
    place_stages(p, p.ranks, std::span<const int>(rank_of_stage, static_cast<std::size_t>(S)),
                 ignored);
    score = best;
  }
  return p;
}

/// The placements a free search tries, distinct up to renumbering, the given one first; returns
/// how many were written to `out`.
constexpr int free_placements(Placement (&out)[max_free_placements], const Placement& given,
                              const SearchSpec& spec) {
  const int P = given.ranks, V = given.chunks_per_rank;
  int n = 0;
  const auto add = [&](const Placement& p) {
    const Placement c = canonical(p);
    for (int k = 0; k < n; ++k)
      if (canonical(out[k]) == c) return;
    if (n < max_free_placements) out[n++] = p;
  };
  const Placement starts[] = {given, interleaved_placement(P, V), v_shape_placement(P, V),
                              block_placement(P, V)};
  for (const Placement& p : starts) add(p);
  for (const Placement& p : starts) add(improve_placement(p, spec));
  return n;
}

/// Searches the tables of one placement (the file comment), keeping in `out` the shortest sound
/// one within the cap found so far, over every placement searched into it.
constexpr void search_placed(SearchResult& out, const SearchSpec& spec,
                             const Placement& placement) {
  const int V = placement.chunks_per_rank;
  ScheduleTable probe{};
  init_table(probe, "the search", spec.ranks, spec.micro_batches, V, spec.split_backward ? 7 : 6);
  probe.placement = placement;
  const int bound =
      search_lower_bound(placement, spec.micro_batches, spec.costs, spec.split_backward);
  ++out.placements;
  const int deepest = spec.micro_batches * V;  // a warm-up deeper than this changes nothing
  ScheduleTable candidate{};
  ScheduleTable lowered{};
  VerifyResult figures{};
  bool found = out.figures.ok;
  // Lowers, verifies and keeps `candidate` when it is sound, within the cap and the shortest yet.
  const auto consider = [&](std::string_view origin) {
    ++out.candidates;
    lower_into(lowered, candidate, spec.semantics, spec.costs);
    verify_into(figures, lowered, spec.semantics, spec.costs, nullptr);
    if (!figures.ok) return;
    if (spec.max_in_flight > 0 && figures.max_peak_in_flight() > spec.max_in_flight) return;
    if (!found || figures.makespan < out.figures.makespan) {
      found = true;
      out.figures = figures;
      out.table = candidate;
      out.lower_bound = bound;
      out.origin = FixedText{};
      out.origin << origin;
    }
  };
  // The built-ins with the same placement, M and kind of backward are candidates too, and first:
  // the result is never predicted slower than one of them at the same cap, and a table of the
  // search takes a built-in's place only when it is predicted strictly faster.
  for_each_builtin_schedule([&]<class F>() {
    if (F::fixed_chunks != 0 && F::fixed_chunks != V) return;
    candidate = ScheduleTable{};
    F::generate(candidate, spec.ranks, F::takes_micro_batches ? spec.micro_batches : 1, V);
    if (!candidate.ok() || candidate.micro_batches != spec.micro_batches ||
        !(candidate.placement == placement))
      return;
    if (!spec.split_backward)
      for (int r = 0; r < candidate.ranks; ++r)
        for (int k = 0; k < candidate.length[r]; ++k)
          if (candidate.actions[r][k].op == Op::I || candidate.actions[r][k].op == Op::W) return;
    consider(F::name);
  });
  for (int limit = 1; limit <= deepest; ++limit)
    for (int shape = 0; shape < (V > 1 && spec.max_in_flight > 0 ? 24 : 8); ++shape) {
      const int reserve = shape / 8 == 2 ? spec.micro_batches * V : shape / 8;
      const SearchPolicy policy{limit, (shape & 1) != 0, (shape & 2) == 0, (shape & 4) != 0,
                                reserve};
      candidate = probe;
      const bool finished = with_state<SearchState>(
          [&](SearchState& st) { return list_schedule(candidate, spec, policy, st); });
      if (finished)
        consider("list scheduling");
      else
        ++out.candidates;
    }
}

}  // namespace detail

/// Searches in place (a result holds a table: keep it off the stack at run time, e.g.
/// `auto r = std::make_unique<mpp::SearchResult>(); mpp::search_into(*r, spec);`).
constexpr void search_into(SearchResult& out, const SearchSpec& spec) {
  out = SearchResult{};
  const Placement placement =
      spec.placement.ranks == 0 ? interleaved_placement(spec.ranks, 1) : spec.placement;
  const int V = placement.ranks == 0 ? 1 : placement.chunks_per_rank;
  ScheduleTable probe{};
  detail::init_table(probe, "the search", spec.ranks, spec.micro_batches, V,
                     spec.split_backward ? 7 : 6);
  if (!probe.ok()) {
    out.error = probe.error;
    return;
  }
  if (placement.ranks != spec.ranks) {
    out.error << "mpp: the search's placement is for " << placement.ranks << " ranks, not "
              << spec.ranks;
    return;
  }
  if (spec.costs.cores < 0) {
    out.error << "mpp: the search's cost model has " << spec.costs.cores
              << " cores; give the cores the ranks share, or 0 for a core per rank";
    return;
  }
  if (spec.max_in_flight < 0) {
    out.error << "mpp: the search's cap on activations must be >= 1 (or 0 for none), not "
              << spec.max_in_flight;
    return;
  }
  if (!spec.free_placement) {
    detail::search_placed(out, spec, placement);
  } else {
    Placement maps[detail::max_free_placements]{};
    const int n = detail::free_placements(maps, placement, spec);
    for (int k = 0; k < n; ++k) detail::search_placed(out, spec, maps[k]);
  }
  const int cap = spec.max_in_flight > 0 ? spec.max_in_flight : spec.micro_batches * V;
  if (!out.figures.ok)
    out.error << "mpp: no schedule of " << spec.ranks << " ranks and " << spec.micro_batches
              << " micro-batches fits within " << cap
              << " activations per rank; raise the cap (one micro-batch at a time needs " << V
              << ", 1F1B with one chunk per rank " << spec.ranks << ")";
}

}  // namespace mpp
