#pragma once
// Lowering: insert the SEND/RECV that a compute table needs, ordered for one comm semantics.
#include "mpp/schedule/cost_model.hpp"
#include "mpp/schedule/stage_lookup.hpp"
#include "mpp/schedule/table.hpp"
#include "mpp/schedule/verify.hpp"

namespace mpp {

namespace detail {

constexpr bool copy_header(ScheduleTable& out, const ScheduleTable& in, CommSemantics semantics) {
  out.ranks = in.ranks;
  out.micro_batches = in.micro_batches;
  out.chunks_per_rank = in.chunks_per_rank;
  out.placement = in.placement;
  out.error = in.error;
  out.lowered = true;
  out.semantics = semantics;
  for (int r = 0; r < in.ranks; ++r) {
    out.length[r] = 0;
    // A lowered compute action brings at most one receive and one send.
    if (3 * in.length[r] > max_actions_per_rank && out.ok()) {
      out.error << "mpp: rank " << r << " has " << in.length[r]
                << " compute actions; lowered they may need " << 3 * in.length[r]
                << ", more than mpp::max_actions_per_rank = " << max_actions_per_rank
                << "; lower micro-batches * chunks";
    }
  }
  return out.ok();
}

constexpr void copy_table(ScheduleTable& out, const ScheduleTable& in) {
  out.ranks = in.ranks;
  out.micro_batches = in.micro_batches;
  out.chunks_per_rank = in.chunks_per_rank;
  out.placement = in.placement;
  out.error = in.error;
  out.lowered = in.lowered;
  out.semantics = in.semantics;
  for (int r = 0; r < in.ranks; ++r) {
    out.length[r] = in.length[r];
    for (int k = 0; k < in.length[r]; ++k) out.actions[r][k] = in.actions[r][k];
  }
}

/// The rank that a value of `stage` travels to or from, `step` stages away (-1: the stage before,
/// +1: the stage after), when another rank holds that stage; -1 when no message carries it (no
/// such stage, or this rank holds it too). `stages` answers for the stages of t's placement.
constexpr int peer_towards(const ScheduleTable& t, const StageLookup& stages, int stage, int step) {
  if (stage < 0 || stage >= t.placement.stages() || stage >= max_stages) {
    const StageLink link = t.placement.link(stage, step);  // a stage the placement lacks
    return link.is_message() ? link.rank : -1;
  }
  return step < 0 ? stages.previous_peer[stage] : stages.next_peer[stage];
}

/// Emits the receive compute `a` on rank r needs (input from another rank), if any.
constexpr void emit_receive_for(ScheduleTable& out, const StageLookup& stages, int r,
                                const Action& a) {
  if (a.op == Op::W) return;
  const bool forward = a.op == Op::F;
  const int from = peer_towards(out, stages, a.stage, forward ? -1 : +1);
  if (from >= 0) emit(out, r, forward ? Op::RECV_F : Op::RECV_B, a.micro_batch, a.chunk, from);
}

/// Emits the send of compute `a`'s result on rank r (to another rank), if any.
constexpr void emit_send_for(ScheduleTable& out, const StageLookup& stages, int r,
                             const Action& a) {
  if (a.op == Op::W) return;
  const bool forward = a.op == Op::F;
  const int to = peer_towards(out, stages, a.stage, forward ? +1 : -1);
  if (to >= 0) emit(out, r, forward ? Op::SEND_F : Op::SEND_B, a.micro_batch, a.chunk, to);
}

/// Receive for compute k posted before compute k - lookahead (lookahead 0: right before it);
/// each send right after its compute.
constexpr void lower_in_order(ScheduleTable& out, const ScheduleTable& in, CommSemantics semantics,
                              int receive_lookahead) {
  if (!copy_header(out, in, semantics)) return;
  with_state<StageLookup>([&](StageLookup& stages) {
    stages.fill_links(in.placement);
    for (int r = 0; r < in.ranks; ++r) {
      const Action* row = in.actions[r];
      const int n = in.length[r];
      for (int k = 0; k < receive_lookahead && k < n; ++k) emit_receive_for(out, stages, r, row[k]);
      for (int k = 0; k < n; ++k) {
        if (receive_lookahead == 0)
          emit_receive_for(out, stages, r, row[k]);
        else if (k + receive_lookahead < n)
          emit_receive_for(out, stages, r, row[k + receive_lookahead]);
        out.actions[r][out.length[r]++] = row[k];
        emit_send_for(out, stages, r, row[k]);
      }
    }
    return 0;
  });
}

/// Clears the OVERLAP_F_B mark of an F that a send now separates from its backward. On one CPU
/// stream a pair runs as its two actions, and the F's output leaves right after the F rather
/// than after the pair: the peer need not wait for the backward. The mark stays where the two
/// are still adjacent.
constexpr void unpair_separated(ScheduleTable& t) {
  for (int r = 0; r < t.ranks; ++r)
    for (int k = 0; k < t.length[r]; ++k)
      if (t.actions[r][k].overlap_with_next &&
          (k + 1 == t.length[r] || !is_backward(t.actions[r][k + 1].op)))
        t.actions[r][k].overlap_with_next = false;
}

/// Scratch of the rendezvous lowering (see with_state).
struct RendezvousState {
  static constexpr int never = 0x3fffffff;
  static constexpr int max_queues = 2 * max_ranks * max_chunks_per_rank;
  int clock[max_ranks], pc[max_ranks];
  // One queue per (rank, kind, chunk): [(rank * 2 + kind) * V + chunk], kind 0: F to the next
  // stage's rank, 1: B to the previous stage's rank.
  int head[max_queues], tail[max_queues];
  int sender_of_queue[max_queues];  // the sending rank
  int peer_of_queue[max_queues];    // the receiving rank, or -1 (no such stage, or local)
  // What an event is chosen from: the queues holding a result to send (in no order, with each
  // one's place + 1, 0 when it is empty), and the ranks whose next compute has its inputs.
  int pending[max_queues], pending_place[max_queues], pending_count;
  bool ready[max_ranks];
  int received[2 * max_slots];                    // [kind * slots + stage * M + mb] of the consumer
  int needs[max_ranks][max_actions_per_rank];     // per compute: 0, or 1 + index into received
  int produces[max_ranks][max_actions_per_rank];  // per compute: -1, or the queue of its send
  int queue[max_queues][max_actions_per_rank];    // producing step of each unsent result
  StageLookup stages;

  /// Adds queue q to `pending` (it was empty and now holds a result).
  constexpr void add_pending(int q) {
    pending[pending_count] = q;
    pending_place[q] = ++pending_count;
  }
  /// Removes queue q from `pending` (its last result was sent).
  constexpr void remove_pending(int q) {
    const int place = pending_place[q] - 1, last = pending[--pending_count];
    pending[place] = last;
    pending_place[last] = place + 1;
    pending_place[q] = 0;
  }
  /// Marks rank r ready or not, as its next compute of `in` has its inputs or not.
  constexpr void update_ready(const ScheduleTable& in, int r) {
    const int k = pc[r];
    ready[r] = k < in.length[r] && (needs[r][k] == 0 || received[needs[r][k] - 1]);
  }
};

/// The events of the rendezvous lowering (lower_rendezvous), on a zeroed `st`; false if a
/// compute of `in` is out of range or not a compute, or if the table cannot run at all.
constexpr bool rendezvous_events(ScheduleTable& out, const ScheduleTable& in, const Costs& costs,
                                 RendezvousState& st) {
  constexpr int never = RendezvousState::never;
  const int P = in.ranks, M = in.micro_batches, V = in.chunks_per_rank, slots = P * V * M;
  if (in.placement.ranks != P || in.placement.chunks_per_rank != V) return false;
  st.stages.fill(in.placement, costs);
  const int queues = 2 * P * V;
  for (int q = 0; q < queues; ++q) {
    const int r = q / (2 * V), kind = (q / V) % 2, chunk = q % V;
    st.sender_of_queue[q] = r;
    st.peer_of_queue[q] =
        peer_towards(in, st.stages, in.placement.stage_at[r][chunk], kind == 0 ? +1 : -1);
  }
  for (int r = 0; r < P; ++r) {
    for (int k = 0; k < in.length[r]; ++k) {
      const Action& c = in.actions[r][k];
      const int s = c.stage, mb = c.micro_batch, chunk = c.chunk, op = static_cast<int>(c.op);
      // Ranges only; the verifier checks the rest.
      if (mb < 0 || mb >= M || chunk < 0 || chunk >= V || s != in.placement.stage_at[r][chunk] ||
          op < 0 || op > static_cast<int>(Op::W))
        return false;
      st.produces[r][k] = -1;
      if (c.op == Op::W) continue;
      const bool forward = c.op == Op::F;
      if ((forward ? st.stages.previous_peer[s] : st.stages.next_peer[s]) >= 0)
        st.needs[r][k] = 1 + (forward ? 0 : slots) + s * M + mb;
      if ((forward ? st.stages.next_peer[s] : st.stages.previous_peer[s]) >= 0)
        st.produces[r][k] = (r * 2 + (forward ? 0 : 1)) * V + chunk;
    }
    st.update_ready(in, r);
  }
  for (;;) {
    // The earliest transfer (the lowest queue on a tie), then a compute that starts before it
    // (the lowest rank on a tie): a transfer starts when both its ranks are free.
    int best_queue = -1, best_start = never;
    for (int i = 0; i < st.pending_count; ++i) {
      const int q = st.pending[i], from = st.clock[st.sender_of_queue[q]],
                to = st.clock[st.peer_of_queue[q]];
      const int start = from > to ? from : to;
      if (start < best_start || (start == best_start && q < best_queue)) {
        best_queue = q;
        best_start = start;
      }
    }
    int best = -1, best_clock = best_start;
    for (int r = 0; r < P; ++r)
      if (st.ready[r] && st.clock[r] < best_clock) {
        best = r;
        best_clock = st.clock[r];
      }
    if (best >= 0) {
      const int k = st.pc[best]++;
      const Action& c = in.actions[best][k];
      out.actions[best][out.length[best]++] = c;
      st.clock[best] += st.stages.duration[c.stage][static_cast<int>(c.op)];
      const int q = st.produces[best][k];
      if (q >= 0) {
        if (st.head[q] == st.tail[q]) st.add_pending(q);
        st.queue[q][st.tail[q]++] = k;
      }
      st.update_ready(in, best);
    } else if (best_queue >= 0) {
      const int q = best_queue, a = st.sender_of_queue[q], kind = (q / V) % 2,
                b = st.peer_of_queue[q];
      const Action& produced = in.actions[a][st.queue[q][st.head[q]++]];
      if (st.head[q] == st.tail[q]) st.remove_pending(q);
      const int mb = produced.micro_batch,
                dst_stage = kind == 0 ? produced.stage + 1 : produced.stage - 1;
      out.actions[a][out.length[a]++] =
          Action{kind == 0 ? Op::SEND_F : Op::SEND_B, mb, produced.chunk, produced.stage, b};
      out.actions[b][out.length[b]++] =
          Action{kind == 0 ? Op::RECV_F : Op::RECV_B, mb, in.placement.chunk_of_stage[dst_stage],
                 dst_stage, a};
      st.clock[a] = best_start + costs.comm;
      st.clock[b] = best_start + costs.comm;
      st.received[kind * slots + dst_stage * M + mb] = 1;
      st.update_ready(in, b);
    } else {
      break;
    }
  }
  for (int r = 0; r < P; ++r)
    if (st.pc[r] < in.length[r]) return false;
  return true;
}

/// Rendezvous lowering: replays the compute table under the cost model and emits each transfer
/// when both its sender and its receiver are between computes, earliest first (transfers before
/// computes on ties, then lower ranks). Every emitted SEND/RECV pair met in that replay, so the
/// tables complete under rendezvous; and since a blocked rank stays blocked until its peer
/// arrives, every execution order completes. Neighbours exchanging both ways come out paired
/// (one sends while the other receives), never both sending first.
/// Returns false if the compute table cannot run at all (the caller falls back to lower_in_order).
constexpr bool lower_rendezvous(ScheduleTable& out, const ScheduleTable& in, const Costs& costs) {
  if (!copy_header(out, in, CommSemantics::rendezvous)) return true;
  if (in.stages() * in.micro_batches > max_slots) return false;
  return with_state<RendezvousState>(
      [&](RendezvousState& st) { return rendezvous_events(out, in, costs, st); });
}

}  // namespace detail

/// How far ahead an async lowering posts receives: all of them, at the start of the step, in the
/// order the computes consume them. A send whose receive is already posted is written straight
/// from the sender's thread; one that arrives first waits for the receiver's notice and is then
/// written by the transport's own thread -- a wake-up (and, on a busy core, a preemption) on the
/// critical path of every message. Posting everything first keeps that off the path. The
/// executor still allocates each buffer only once its shape is known (activations: after the
/// link's shape header; gradients: after the micro-batch's forward).
inline constexpr int async_receive_lookahead = max_actions_per_rank;

/// Lowers in place into `out` (large tables: avoids a copy at compile time).
/// buffered: every receive posted at the start of the step, sends right after their compute.
/// rendezvous: transfers ordered so that no two neighbours wait on each other.
/// An invalid or already lowered table is copied unchanged (the verifier then reports it).
constexpr void lower_into(ScheduleTable& out, const ScheduleTable& in, CommSemantics semantics,
                          const Costs& costs = {}) {
  if (!in.ok() || in.lowered) {
    detail::copy_table(out, in);
    return;
  }
  if (semantics == CommSemantics::buffered) {
    detail::lower_in_order(out, in, semantics, async_receive_lookahead);
  } else if (!detail::lower_rendezvous(out, in, costs)) {
    // Not runnable at all: emit the textbook order so that the verifier names the broken rule.
    detail::lower_in_order(out, in, semantics, 0);
  }
  detail::unpair_separated(out);
}

/// lower_into() returning a new table.
constexpr ScheduleTable lower(const ScheduleTable& in, CommSemantics semantics,
                              const Costs& costs = {}) {
  ScheduleTable out{};
  lower_into(out, in, semantics, costs);
  return out;
}

/// The textbook lowering: RECV right before each compute, SEND right after. Kept to show (and
/// test) that it deadlocks under rendezvous for 1F1B: in the steady state two neighbours both
/// send first.
constexpr ScheduleTable lower_naive(const ScheduleTable& in, CommSemantics semantics) {
  ScheduleTable out{};
  if (!in.ok() || in.lowered)
    detail::copy_table(out, in);
  else
    detail::lower_in_order(out, in, semantics, 0);
  return out;
}

}  // namespace mpp
