#pragma once
// Lowering: insert the SEND/RECV that a compute table needs, ordered for one comm semantics.
#include "mpp/schedule/cost_model.hpp"
#include "mpp/schedule/table.hpp"
#include "mpp/schedule/verify.hpp"

namespace mpp {

namespace detail {

/// The receive a compute action needs before it runs, if its input comes from another rank.
constexpr bool needs_receive(const ScheduleTable& t, int rank, const Action& a, Action& recv) {
  const int s = a.stage;
  if (a.op == Op::F && s > 0 && t.rank_of(s - 1) != rank) {
    recv = Action{Op::RECV_F, a.micro_batch, a.chunk, s, t.rank_of(s - 1)};
    return true;
  }
  if (is_backward(a.op) && s < t.stages() - 1 && t.rank_of(s + 1) != rank) {
    recv = Action{Op::RECV_B, a.micro_batch, a.chunk, s, t.rank_of(s + 1)};
    return true;
  }
  return false;
}

/// The send a compute action's result needs, if its consumer is on another rank.
constexpr bool needs_send(const ScheduleTable& t, int rank, const Action& a, Action& send) {
  const int s = a.stage;
  if (a.op == Op::F && s < t.stages() - 1 && t.rank_of(s + 1) != rank) {
    send = Action{Op::SEND_F, a.micro_batch, a.chunk, s, t.rank_of(s + 1)};
    return true;
  }
  if (is_backward(a.op) && s > 0 && t.rank_of(s - 1) != rank) {
    send = Action{Op::SEND_B, a.micro_batch, a.chunk, s, t.rank_of(s - 1)};
    return true;
  }
  return false;
}

constexpr void copy_header(ScheduleTable& out, const ScheduleTable& in, CommSemantics semantics) {
  out.ranks = in.ranks;
  out.micro_batches = in.micro_batches;
  out.chunks_per_rank = in.chunks_per_rank;
  out.error = in.error;
  out.lowered = true;
  out.semantics = semantics;
  for (int r = 0; r < in.ranks; ++r) out.length[r] = 0;
}

constexpr void copy_table(ScheduleTable& out, const ScheduleTable& in) {
  out.ranks = in.ranks;
  out.micro_batches = in.micro_batches;
  out.chunks_per_rank = in.chunks_per_rank;
  out.error = in.error;
  out.lowered = in.lowered;
  out.semantics = in.semantics;
  for (int r = 0; r < in.ranks; ++r) {
    out.length[r] = in.length[r];
    for (int k = 0; k < in.length[r]; ++k) out.actions[r][k] = in.actions[r][k];
  }
}

/// Receive right before the compute, send right after. Fine with buffered sends; under
/// rendezvous it deadlocks 1F1B (two neighbours that both send first), which is the point of
/// keeping it: the textbook mistake, for tests and the docs.
constexpr void lower_in_place_order(ScheduleTable& out, const ScheduleTable& in, CommSemantics semantics,
                                    int receive_lookahead) {
  copy_header(out, in, semantics);
  for (int r = 0; r < in.ranks; ++r) {
    const int n = in.length[r];
    Action comm{};
    // Receives for compute k are posted before compute k - lookahead (or at the start).
    for (int k = 0; k < receive_lookahead && k < n; ++k)
      if (needs_receive(in, r, in.actions[r][k], comm)) out.push(r, comm);
    for (int k = 0; k < n; ++k) {
      const Action& a = in.actions[r][k];
      const int ahead = k + receive_lookahead;
      if (receive_lookahead > 0 && ahead < n && needs_receive(in, r, in.actions[r][ahead], comm)) out.push(r, comm);
      if (receive_lookahead == 0 && needs_receive(in, r, a, comm)) out.push(r, comm);
      out.push(r, a);
      if (needs_send(in, r, a, comm)) out.push(r, comm);
    }
  }
}

/// Rendezvous lowering: replays the compute table under the cost model and emits each transfer
/// when both its sender and its receiver are between computes, earliest first. Because every
/// emitted SEND/RECV pair actually met in that replay, the tables complete under rendezvous
/// (each rank's next action stays enabled until taken, so any execution order finishes).
/// Neighbours that exchange in both directions come out paired (one sends while the other
/// receives, then the reverse), never both sending first.
constexpr bool lower_rendezvous(ScheduleTable& out, const ScheduleTable& in, const Costs& costs) {
  copy_header(out, in, CommSemantics::rendezvous);
  const int P = in.ranks, M = in.micro_batches, S = in.stages(), slots = S * M;
  int capacity = 1;
  for (int r = 0; r < P; ++r) capacity = in.length[r] > capacity ? in.length[r] : capacity;
  Buffer<int> clock(P, 0), pc(P, 0), received_f(slots, 0), received_b(slots, 0);
  // Per rank, FIFO of produced-but-unsent results: [rank * 2 + kind] -> (stage * M + mb) of the producer.
  Buffer<int> queue(P * 2 * capacity, -1), head(P * 2, 0), tail(P * 2, 0);
  for (;;) {
    int best = -1, best_start = 0, best_kind = 0;  // best_kind: 0 compute, 1 transfer F, 2 transfer B
    for (int a = 0; a < P; ++a)
      for (int kind = 0; kind < 2; ++kind) {
        const int q = a * 2 + kind;
        if (head[q] == tail[q]) continue;
        const int b = ((kind == 0 ? a + 1 : a - 1) % P + P) % P;
        const int start = clock[a] > clock[b] ? clock[a] : clock[b];
        if (best < 0 || start < best_start) {
          best = a;
          best_start = start;
          best_kind = 1 + kind;
        }
      }
    for (int r = 0; r < P; ++r) {
      if (pc[r] >= in.length[r]) continue;
      const Action& c = in.actions[r][pc[r]];
      const int id = c.stage * M + c.micro_batch;
      Action recv{};
      if (needs_receive(in, r, c, recv) && !(c.op == Op::F ? received_f[id] : received_b[id])) continue;
      if (best < 0 || clock[r] < best_start) {
        best = r;
        best_start = clock[r];
        best_kind = 0;
      }
    }
    if (best < 0) break;
    if (best_kind == 0) {
      const Action& c = in.actions[best][pc[best]];
      out.push(best, c);
      clock[best] += costs.of(c.op);
      ++pc[best];
      Action send{};
      if (needs_send(in, best, c, send)) {
        const int q = best * 2 + (send.op == Op::SEND_F ? 0 : 1);
        queue[q * capacity + tail[q]++] = c.stage * M + c.micro_batch;
      }
    } else {
      const int kind = best_kind - 1, q = best * 2 + kind;
      const int src = queue[q * capacity + head[q]++];
      const int stage = src / M, mb = src % M;
      const int dst_stage = kind == 0 ? stage + 1 : stage - 1;
      const int b = in.rank_of(dst_stage);
      out.push(best, Action{kind == 0 ? Op::SEND_F : Op::SEND_B, mb, in.chunk_of(stage), stage, b});
      out.push(b, Action{kind == 0 ? Op::RECV_F : Op::RECV_B, mb, in.chunk_of(dst_stage), dst_stage, best});
      const int end = best_start + costs.comm;
      clock[best] = clock[b] = end;
      (kind == 0 ? received_f : received_b)[dst_stage * M + mb] = 1;
    }
  }
  for (int r = 0; r < P; ++r)
    if (pc[r] < in.length[r]) return false;  // the compute table itself cannot run
  return true;
}

}  // namespace detail

/// How far ahead an async lowering posts receives: the receive for compute k is posted before
/// compute k - 1 runs, so the transfer overlaps it (two receive buffers per rank at most).
inline constexpr int async_receive_lookahead = 1;

/// Lowers in place into `out` (large tables: avoids a copy at compile time).
/// buffered: receives posted one compute early, sends right after their compute.
/// rendezvous: transfers ordered by a replay so that no two neighbours wait on each other.
/// An invalid or already lowered table is copied unchanged (the verifier then reports it).
constexpr void lower_into(ScheduleTable& out, const ScheduleTable& in, CommSemantics semantics,
                          const Costs& costs = {}) {
  out = ScheduleTable{};
  if (!in.ok() || in.lowered) {
    detail::copy_table(out, in);
    return;
  }
  if (semantics == CommSemantics::buffered) {
    detail::lower_in_place_order(out, in, semantics, async_receive_lookahead);
    return;
  }
  if (!detail::lower_rendezvous(out, in, costs)) {
    // Not runnable at all: emit the textbook order so the verifier names the stuck action.
    out = ScheduleTable{};
    detail::lower_in_place_order(out, in, semantics, 0);
  }
}

constexpr ScheduleTable lower(const ScheduleTable& in, CommSemantics semantics, const Costs& costs = {}) {
  ScheduleTable out{};
  lower_into(out, in, semantics, costs);
  return out;
}

/// The textbook lowering: RECV right before each compute, SEND right after. Kept to show (and
/// test) that it deadlocks under rendezvous for 1F1B.
constexpr ScheduleTable lower_naive(const ScheduleTable& in, CommSemantics semantics) {
  ScheduleTable out{};
  if (!in.ok() || in.lowered) {
    detail::copy_table(out, in);
    return out;
  }
  detail::lower_in_place_order(out, in, semantics, 0);
  return out;
}

}  // namespace mpp
