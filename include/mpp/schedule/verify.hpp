#pragma once
// The constexpr verifier: static rules over a table, then a replay with rendezvous or buffered
// communication under a cost model. Runs in static_assert and at run time (CLI, executor).
#include <string_view>

#include "mpp/schedule/cost_model.hpp"
#include "mpp/schedule/table.hpp"
#include "mpp/schedule/timed_event.hpp"

namespace mpp {

/// The rules a table must satisfy, in the order the verifier checks them.
enum class Rule {
  none,
  parameters,                     // the generator rejected (P, M, V), or capacity exceeded
  stage_map,                      // micro-batch/chunk in range and stage == chunk * ranks + rank
  comm_endpoint,                  // a SEND/RECV goes to the neighbouring stage's rank and exists there
  exactly_once,                   // every (stage, mb): F once, backward once (B, or I then W), one send, one receive
  forward_before_backward,        // B/I(stage, mb) after F(stage, mb) on its rank
  input_grad_before_weight_grad,  // W(stage, mb) after I(stage, mb)
  dependency_order,               // F(s) after F(s-1), backward(s) after backward(s+1) when both are on one rank
  send_after_compute,             // SEND_F after its F, SEND_B after its B/I
  receive_before_compute,         // lowered tables: RECV_F before F, RECV_B before B/I
  matched_messages,               // the k-th send of a channel meets the k-th receive, same (stage, mb)
  deadlock,                       // the replay runs to the end on every rank
};

constexpr std::string_view to_string(Rule rule) {
  switch (rule) {
    case Rule::none: return "none";
    case Rule::parameters: return "parameters";
    case Rule::stage_map: return "stage map";
    case Rule::comm_endpoint: return "comm endpoint";
    case Rule::exactly_once: return "exactly once";
    case Rule::forward_before_backward: return "forward before backward";
    case Rule::input_grad_before_weight_grad: return "input grad before weight grad";
    case Rule::dependency_order: return "dependency order";
    case Rule::send_after_compute: return "send after compute";
    case Rule::receive_before_compute: return "receive before compute";
    case Rule::matched_messages: return "matched messages";
    case Rule::deadlock: return "no deadlock";
  }
  return "?";
}

/// What the verifier proves and predicts. `ok` false: `rule`, `rank`, `step` (index in that
/// rank's table) and `action` say where, `message` says it in words with the fix.
/// Figures (valid when ok) are in the cost model's units.
struct VerifyResult {
  bool ok = false;
  FixedText message{};
  Rule rule = Rule::none;
  int rank = -1;
  int step = -1;
  Action action{};
  int ranks = 0;
  int makespan = 0;    // time from the first action to the last completion on any rank
  int total_busy = 0;  // summed compute time over ranks (communication is not compute)
  int busy[max_ranks]{};
  int peak_in_flight[max_ranks]{};  // (stage, mb) forwarded but not yet fully backwarded, per rank

  constexpr explicit operator bool() const { return ok; }
  constexpr int total_idle() const { return ranks * makespan - total_busy; }
  /// Idle share of the step: idle / (ranks * makespan). GPipe/1F1B: (P-1)/(M+P-1).
  constexpr double bubble_fraction() const {
    return makespan > 0 ? static_cast<double>(total_idle()) / (static_cast<double>(ranks) * makespan) : 0.0;
  }
  /// Idle relative to ideal compute: idle / busy. Interleaved 1F1B: (P-1)/(V*M).
  constexpr double bubble_ratio() const {
    return total_busy > 0 ? static_cast<double>(total_idle()) / total_busy : 0.0;
  }
  constexpr int max_peak_in_flight() const {
    int m = 0;
    for (int r = 0; r < ranks; ++r) m = peak_in_flight[r] > m ? peak_in_flight[r] : m;
    return m;
  }
};

namespace detail {

/// Heap storage usable in constant evaluation (transient) and at run time.
template <class T>
struct Buffer {
  T* data = nullptr;
  constexpr Buffer(int count, T init) : data(new T[count > 0 ? count : 1]) {
    for (int i = 0; i < (count > 0 ? count : 1); ++i) data[i] = init;
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  constexpr ~Buffer() { delete[] data; }
  constexpr T& operator[](int i) { return data[i]; }
  constexpr const T& operator[](int i) const { return data[i]; }
};

/// Optional destination for the simulated timeline.
struct EventSink {
  TimedEvent* events = nullptr;
  int capacity = 0;
  int count = 0;
  constexpr void add(int rank, int start, int end, const Action& a) {
    if (count < capacity)
      events[count] = TimedEvent{rank, static_cast<double>(start), static_cast<double>(end), a.op, a.micro_batch,
                                 a.chunk, a.stage};
    ++count;
  }
};

constexpr bool reject(VerifyResult& out, Rule rule, int rank, int step, const Action& a) {
  out.ok = false;
  out.rule = rule;
  out.rank = rank;
  out.step = step;
  out.action = a;
  out.message << "mpp: schedule rejected by rule '" << to_string(rule) << "' on rank " << rank << " at step " << step
              << ", " << a << ": ";
  return false;
}

/// Everything the static pass learns and the replay needs, indexed by (stage * M + mb).
struct Ledger {
  int ranks, micro_batches, stages, slots;
  Buffer<int> forward_seen, backward_seen, weight_seen, recv_f_seen, recv_b_seen;
  // Messages are named by the (stage, mb) that consumes them.
  Buffer<int> send_f_step, send_f_seq, recv_f_step, recv_f_seq;
  Buffer<int> send_b_step, send_b_seq, recv_b_step, recv_b_seq;
  constexpr Ledger(int p, int m, int v)
      : ranks(p), micro_batches(m), stages(p * v), slots(p * v * m),
        forward_seen(slots, 0), backward_seen(slots, 0), weight_seen(slots, 0), recv_f_seen(slots, 0),
        recv_b_seen(slots, 0), send_f_step(slots, -1), send_f_seq(slots, -1), recv_f_step(slots, -1),
        recv_f_seq(slots, -1), send_b_step(slots, -1), send_b_seq(slots, -1), recv_b_step(slots, -1),
        recv_b_seq(slots, -1) {}
};

constexpr int rank_of(int stage, int ranks) { return stage % ranks; }

/// Static rules, rank by rank in table order; fills the ledger and peak in-flight.
constexpr bool check_static(const ScheduleTable& t, Ledger& L, VerifyResult& out) {
  const int P = t.ranks, M = t.micro_batches, V = t.chunks_per_rank, S = L.stages;
  Buffer<int> send_seq(P * P * 2, 0), recv_seq(P * P * 2, 0);
  for (int r = 0; r < P; ++r) {
    int in_flight = 0;
    for (int k = 0; k < t.length[r]; ++k) {
      const Action& a = t.actions[r][k];
      const int op = static_cast<int>(a.op);
      if (op < 0 || op >= op_count || a.micro_batch < 0 || a.micro_batch >= M || a.chunk < 0 || a.chunk >= V) {
        reject(out, Rule::stage_map, r, k, a);
        out.message << "micro-batch must be in [0, " << M << ") and chunk in [0, " << V << ")";
        return false;
      }
      if (a.stage != a.chunk * P + r) {
        reject(out, Rule::stage_map, r, k, a);
        out.message << "chunk " << a.chunk << " on rank " << r << " is stage " << a.chunk * P + r
                    << " (stage = chunk * ranks + rank)";
        return false;
      }
      const int s = a.stage, mb = a.micro_batch, id = s * M + mb;
      if (is_comm(a.op) && !t.lowered) {
        reject(out, Rule::comm_endpoint, r, k, a);
        out.message << "a compute-only table holds a communication action; mark it lowered or remove it";
        return false;
      }
      if (is_comm(a.op)) {
        const bool to_next = a.op == Op::SEND_F || a.op == Op::RECV_B;
        const int other = to_next ? s + 1 : s - 1;
        if (other < 0 || other >= S) {
          reject(out, Rule::comm_endpoint, r, k, a);
          out.message << "stage " << s << " has no " << (to_next ? "next" : "previous") << " stage to talk to";
          return false;
        }
        if (a.peer != rank_of(other, P) || a.peer == r) {
          reject(out, Rule::comm_endpoint, r, k, a);
          out.message << "stage " << other << " lives on rank " << rank_of(other, P) << ", not on rank " << a.peer
                      << (a.peer == r ? " (a rank does not message itself)" : "");
          return false;
        }
      }
      switch (a.op) {
        case Op::F: {
          if (L.forward_seen[id]) {
            reject(out, Rule::exactly_once, r, k, a);
            out.message << "F of (stage " << s << ", mb " << mb << ") runs a second time; remove one";
            return false;
          }
          if (s > 0) {
            if (rank_of(s - 1, P) == r) {
              if (!L.forward_seen[id - M]) {
                reject(out, Rule::dependency_order, r, k, a);
                out.message << "F(stage " << s - 1 << ", mb " << mb << ") on the same rank must come first";
                return false;
              }
            } else if (t.lowered && !L.recv_f_seen[id]) {
              reject(out, Rule::receive_before_compute, r, k, a);
              out.message << "its input was not received; put RECV_F(stage " << s << ", mb " << mb << ") before it";
              return false;
            }
          }
          L.forward_seen[id] = 1;
          ++in_flight;
          if (in_flight > out.peak_in_flight[r]) out.peak_in_flight[r] = in_flight;
          break;
        }
        case Op::B:
        case Op::I: {
          if (L.backward_seen[id]) {
            reject(out, Rule::exactly_once, r, k, a);
            out.message << "the backward of (stage " << s << ", mb " << mb
                        << ") runs a second time (B, or I then W, exactly once); remove one";
            return false;
          }
          if (!L.forward_seen[id]) {
            reject(out, Rule::forward_before_backward, r, k, a);
            out.message << "F(stage " << s << ", mb " << mb << ") has not run on this rank yet; move the backward after it";
            return false;
          }
          if (s < S - 1) {
            if (rank_of(s + 1, P) == r) {
              if (!L.backward_seen[id + M]) {
                reject(out, Rule::dependency_order, r, k, a);
                out.message << "the backward of (stage " << s + 1 << ", mb " << mb << ") on the same rank must come first";
                return false;
              }
            } else if (t.lowered && !L.recv_b_seen[id]) {
              reject(out, Rule::receive_before_compute, r, k, a);
              out.message << "its output grad was not received; put RECV_B(stage " << s << ", mb " << mb
                          << ") before it";
              return false;
            }
          }
          L.backward_seen[id] = a.op == Op::B ? 1 : 2;
          if (a.op == Op::B) {
            L.weight_seen[id] = 1;
            --in_flight;
          }
          break;
        }
        case Op::W: {
          if (L.weight_seen[id]) {
            reject(out, Rule::exactly_once, r, k, a);
            out.message << "the weight grad of (stage " << s << ", mb " << mb
                        << ") is already done (by B or an earlier W); remove this W";
            return false;
          }
          if (L.backward_seen[id] != 2) {
            reject(out, Rule::input_grad_before_weight_grad, r, k, a);
            out.message << "I(stage " << s << ", mb " << mb << ") must come before W";
            return false;
          }
          L.weight_seen[id] = 1;
          --in_flight;
          break;
        }
        case Op::SEND_F:
        case Op::SEND_B: {
          const bool fwd = a.op == Op::SEND_F;
          if (fwd ? !L.forward_seen[id] : !L.backward_seen[id]) {
            reject(out, Rule::send_after_compute, r, k, a);
            out.message << "it sends the result of " << (fwd ? "F" : "the backward") << "(stage " << s << ", mb " << mb
                        << ") before computing it; move the send after the compute";
            return false;
          }
          const int dst = fwd ? id + M : id - M;
          int* step = fwd ? L.send_f_step.data : L.send_b_step.data;
          int* seq = fwd ? L.send_f_seq.data : L.send_b_seq.data;
          if (step[dst] >= 0) {
            reject(out, Rule::exactly_once, r, k, a);
            out.message << "this message was already sent at step " << step[dst] << "; send it once";
            return false;
          }
          step[dst] = k;
          seq[dst] = send_seq[(r * P + a.peer) * 2 + (fwd ? 0 : 1)]++;
          break;
        }
        case Op::RECV_F:
        case Op::RECV_B: {
          const bool fwd = a.op == Op::RECV_F;
          int* step = fwd ? L.recv_f_step.data : L.recv_b_step.data;
          int* seq = fwd ? L.recv_f_seq.data : L.recv_b_seq.data;
          if (step[id] >= 0) {
            reject(out, Rule::exactly_once, r, k, a);
            out.message << "this message was already received at step " << step[id] << "; receive it once";
            return false;
          }
          step[id] = k;
          seq[id] = recv_seq[(a.peer * P + r) * 2 + (fwd ? 0 : 1)]++;
          (fwd ? L.recv_f_seen : L.recv_b_seen)[id] = 1;
          break;
        }
        default: break;
      }
    }
  }
  return true;
}


/// Every (stage, mb) has its F, its backward and (after I) its W somewhere.
constexpr bool check_complete(const ScheduleTable& t, const Ledger& L, VerifyResult& out) {
  const int P = t.ranks, M = t.micro_batches;
  for (int s = 0; s < L.stages; ++s)
    for (int mb = 0; mb < M; ++mb) {
      const int id = s * M + mb, r = rank_of(s, P), c = s / P;
      if (!L.forward_seen[id]) {
        reject(out, Rule::exactly_once, r, t.length[r], Action{Op::F, mb, c, s, -1});
        out.message << "rank " << r << " never runs F(stage " << s << ", mb " << mb << "); add it";
        return false;
      }
      if (!L.backward_seen[id]) {
        reject(out, Rule::exactly_once, r, t.length[r], Action{Op::B, mb, c, s, -1});
        out.message << "rank " << r << " never runs the backward of (stage " << s << ", mb " << mb
                    << "); add B, or I then W";
        return false;
      }
      if (!L.weight_seen[id]) {
        reject(out, Rule::exactly_once, r, t.length[r], Action{Op::W, mb, c, s, -1});
        out.message << "rank " << r << " runs I(stage " << s << ", mb " << mb << ") but never its W; add W";
        return false;
      }
    }
  return true;
}

/// Sends and receives pair up channel by channel (sender, receiver, F or B), in order.
constexpr bool check_matching(const ScheduleTable& t, const Ledger& L, VerifyResult& out) {
  const int P = t.ranks, M = t.micro_batches;
  for (int kind = 0; kind < 2; ++kind) {
    const bool fwd = kind == 0;
    const int* send_step = fwd ? L.send_f_step.data : L.send_b_step.data;
    const int* send_seq = fwd ? L.send_f_seq.data : L.send_b_seq.data;
    const int* recv_step = fwd ? L.recv_f_step.data : L.recv_b_step.data;
    const int* recv_seq = fwd ? L.recv_f_seq.data : L.recv_b_seq.data;
    for (int id = 0; id < L.slots; ++id) {
      if (send_step[id] < 0 && recv_step[id] < 0) continue;
      const int s = id / M, mb = id % M;
      const int src_stage = fwd ? s - 1 : s + 1;
      const int sender = rank_of(src_stage, P), receiver = rank_of(s, P);
      const Action recv{fwd ? Op::RECV_F : Op::RECV_B, mb, s / P, s, sender};
      const Action send{fwd ? Op::SEND_F : Op::SEND_B, mb, src_stage / P, src_stage, receiver};
      if (send_step[id] < 0) {
        reject(out, Rule::matched_messages, receiver, recv_step[id], recv);
        out.message << "rank " << sender << " never sends it; add " << to_string(send.op) << "(stage " << src_stage
                    << ", mb " << mb << ") on rank " << sender;
        return false;
      }
      if (recv_step[id] < 0) {
        reject(out, Rule::matched_messages, sender, send_step[id], send);
        out.message << "rank " << receiver << " never receives it; add " << to_string(recv.op) << "(stage " << s
                    << ", mb " << mb << ") on rank " << receiver;
        return false;
      }
      if (send_seq[id] != recv_seq[id]) {
        reject(out, Rule::matched_messages, receiver, recv_step[id], recv);
        out.message << "it is receive number " << recv_seq[id] << " from rank " << sender << " but the matching send is number "
                    << send_seq[id] << " on that channel; post receives in the order the peer sends";
        return false;
      }
    }
  }
  return true;
}

/// The replay. Every rank runs its table in order; an action starts when its rank is free and
/// its inputs are there. Rendezvous: a SEND and its RECV start together when both ranks reach
/// them. Buffered: SEND and RECV only post; the data arrives T_comm after the SEND, and the
/// compute that needs it waits; a rank's step ends when its sends have been received.
constexpr bool replay(const ScheduleTable& t, CommSemantics semantics, const Costs& costs, const Ledger& L,
                      VerifyResult& out, EventSink* sink) {
  const int P = t.ranks, M = t.micro_batches, S = L.stages;
  const bool rendezvous = t.lowered && semantics == CommSemantics::rendezvous;
  Buffer<int> clock(P, 0), pc(P, 0), finish(P, 0);
  Buffer<int> forward_end(L.slots, -1), backward_end(L.slots, -1);
  Buffer<int> arrival_f(L.slots, -1), arrival_b(L.slots, -1);      // input of (stage, mb) available at
  Buffer<int> posted_f(L.slots, -1), posted_b(L.slots, -1);        // buffered: when the RECV was posted
  Buffer<int> sent_f(L.slots, -1), sent_b(L.slots, -1);            // buffered: when the SEND was posted

  auto try_step = [&](int r) -> bool {
    const Action& a = t.actions[r][pc[r]];
    const int s = a.stage, id = s * M + a.micro_batch;
    switch (a.op) {
      case Op::F:
      case Op::B:
      case Op::I:
      case Op::W: {
        int ready = clock[r];
        if (a.op == Op::F && s > 0) {
          const bool local = rank_of(s - 1, P) == r;
          int dep = (t.lowered && !local) ? arrival_f[id] : forward_end[id - M];
          if (dep < 0) return false;
          if (!t.lowered && !local) dep += costs.comm;
          ready = dep > ready ? dep : ready;
        }
        if (is_backward(a.op) && s < S - 1) {
          const bool local = rank_of(s + 1, P) == r;
          int dep = (t.lowered && !local) ? arrival_b[id] : backward_end[id + M];
          if (dep < 0) return false;
          if (!t.lowered && !local) dep += costs.comm;
          ready = dep > ready ? dep : ready;
        }
        const int end = ready + costs.of(a.op);
        if (a.op == Op::F) forward_end[id] = end;
        if (is_backward(a.op)) backward_end[id] = end;
        out.busy[r] += costs.of(a.op);
        clock[r] = end;
        if (sink) sink->add(r, ready, end, a);
        ++pc[r];
        return true;
      }
      default: break;
    }
    const bool fwd = carries_activation(a.op);
    if (!rendezvous) {
      if (is_send(a.op)) {
        const int dst = fwd ? id + M : id - M;
        (fwd ? arrival_f : arrival_b)[dst] = clock[r] + costs.comm;
        (fwd ? sent_f : sent_b)[dst] = clock[r];
      } else {
        (fwd ? posted_f : posted_b)[id] = clock[r];
      }
      ++pc[r];
      return true;
    }
    // Rendezvous: both sides must be at the matching pair.
    const int msg = is_send(a.op) ? (fwd ? id + M : id - M) : id;
    const int q = a.peer;
    const int partner_step =
        is_send(a.op) ? (fwd ? L.recv_f_step[msg] : L.recv_b_step[msg]) : (fwd ? L.send_f_step[msg] : L.send_b_step[msg]);
    if (pc[q] != partner_step) return false;
    const int start = clock[r] > clock[q] ? clock[r] : clock[q];
    const int end = start + costs.comm;
    clock[r] = clock[q] = end;
    (fwd ? arrival_f : arrival_b)[msg] = end;
    if (sink && costs.comm > 0) {
      sink->add(r, start, end, a);
      sink->add(q, start, end, t.actions[q][pc[q]]);
    }
    ++pc[r];
    ++pc[q];
    return true;
  };

  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < P; ++r)
      while (pc[r] < t.length[r] && try_step(r)) progress = true;
  }

  for (int r = 0; r < P; ++r) {
    if (pc[r] >= t.length[r]) continue;
    // Deadlock: name the first blocked rank, what it waits for, and where that peer is stuck.
    const Action& a = t.actions[r][pc[r]];
    reject(out, Rule::deadlock, r, pc[r], a);
    const int s = a.stage;
    int q = a.peer;
    if (is_compute(a.op)) {
      q = rank_of(a.op == Op::F ? s - 1 : s + 1, P);
      out.message << "it waits for " << (a.op == Op::F ? "the activation" : "the output grad") << " of (stage "
                  << (a.op == Op::F ? s - 1 : s + 1) << ", mb " << a.micro_batch << ") from rank " << q;
    } else {
      out.message << "the " << (is_send(a.op) ? "send" : "receive") << " completes only when rank " << q
                  << " reaches its matching " << (is_send(a.op) ? "receive" : "send");
    }
    if (q >= 0 && q < P && pc[q] < t.length[q]) {
      out.message << ", while rank " << q << " is blocked at step " << pc[q] << " on " << t.actions[q][pc[q]];
    } else if (q >= 0 && q < P) {
      out.message << ", but rank " << q << " has finished its table";
    }
    out.message << (rendezvous ? "; order each exchange so one neighbour receives first (mpp::lower does), or use an "
                                 "async comm policy"
                               : "; reorder the tables so every wait can be met");
    return false;
  }

  // Buffered: a rank's step ends when the peers have received its sends.
  for (int r = 0; r < P; ++r) finish[r] = clock[r];
  if (t.lowered && !rendezvous) {
    for (int id = 0; id < L.slots; ++id) {
      if (sent_f[id] >= 0) {
        const int r = rank_of(id / M - 1, P);
        int done = sent_f[id] + costs.comm;
        done = posted_f[id] > done ? posted_f[id] : done;
        finish[r] = done > finish[r] ? done : finish[r];
      }
      if (sent_b[id] >= 0) {
        const int r = rank_of(id / M + 1, P);
        int done = sent_b[id] + costs.comm;
        done = posted_b[id] > done ? posted_b[id] : done;
        finish[r] = done > finish[r] ? done : finish[r];
      }
    }
  }
  out.makespan = 0;
  out.total_busy = 0;
  for (int r = 0; r < P; ++r) {
    out.makespan = finish[r] > out.makespan ? finish[r] : out.makespan;
    out.total_busy += out.busy[r];
  }
  return true;
}

constexpr void verify_into(VerifyResult& out, const ScheduleTable& t, CommSemantics semantics, const Costs& costs,
                           EventSink* sink) {
  out = VerifyResult{};
  out.ranks = t.ranks;
  if (!t.ok()) {
    out.rule = Rule::parameters;
    out.message = t.error;
    return;
  }
  Ledger ledger(t.ranks, t.micro_batches, t.chunks_per_rank);
  if (!check_static(t, ledger, out)) return;
  if (!check_complete(t, ledger, out)) return;
  if (t.lowered && !check_matching(t, ledger, out)) return;
  if (!replay(t, semantics, costs, ledger, out, sink)) return;
  out.ok = true;
  out.message << "mpp: sound; makespan " << out.makespan << ", busy " << out.total_busy << " of "
              << out.ranks * out.makespan;
}

}  // namespace detail

/// Verifies a table (compute-only or lowered) under a comm semantics and a cost model.
/// A compute-only table is replayed with implicit transfers of T_comm between ranks.
constexpr VerifyResult verify(const ScheduleTable& table, CommSemantics semantics, const Costs& costs = {}) {
  VerifyResult out{};
  detail::verify_into(out, table, semantics, costs, nullptr);
  return out;
}

namespace detail {
template <class C>
concept has_comm_semantics = requires {
  { C::semantics } -> std::convertible_to<CommSemantics>;
};

/// A short result for diagnostics: printed in full by the compiler when it is a template argument.
struct Diagnosis {
  bool ok = false;
  FixedText message{};
};

template <Diagnosis D>
struct SoundCheck {
  static_assert(D.ok, "mpp: the schedule failed verification; the rule, rank, step and action are in the "
                      "mpp::detail::Diagnosis template argument shown above");
  static constexpr bool value = D.ok;
};
}  // namespace detail

/// `static_assert(mpp::sound<mpp::verify<GPipe<8>, Blocking<Gloo>>(4)>)`: like
/// `static_assert(verify<...>(4).ok)`, but on failure the compiler prints the rule, rank, step,
/// action and fix (C++20 static_assert messages cannot be computed; a template argument can).
template <VerifyResult R>
inline constexpr bool sound = detail::SoundCheck<detail::Diagnosis{R.ok, R.message}>::value;

}  // namespace mpp
