#pragma once
// The constexpr verifier: static rules over a table, then a replay with rendezvous or buffered
// communication under a cost model. Runs in static_assert and at run time (CLI, executor).
#include <string_view>
#include <type_traits>

#include "mpp/schedule/core_sharing.hpp"
#include "mpp/schedule/cost_model.hpp"
#include "mpp/schedule/stage_lookup.hpp"
#include "mpp/schedule/table.hpp"
#include "mpp/schedule/timed_event.hpp"

namespace mpp {

/// The rules a table must satisfy, in the order the verifier checks them.
enum class Rule {
  none,        ///< No rule broken.
  parameters,  ///< the generator rejected (P, M, V), or capacity exceeded
  stage_map,   ///< micro-batch/chunk in range and stage == the placement's stage of (rank, chunk)
  comm_endpoint,  ///< a SEND/RECV goes to the neighbouring stage's rank and exists there
  overlap_pair,   ///< an OVERLAP_F_B mark is on an F whose next compute is a B or an I
  /// every (stage, mb): F once, backward once (B, or I then W), one send, one receive
  exactly_once,
  forward_before_backward,        ///< B/I(stage, mb) after F(stage, mb) on its rank
  input_grad_before_weight_grad,  ///< W(stage, mb) after I(stage, mb)
  /// F(s) after F(s-1), backward(s) after backward(s+1) when both are on one rank
  dependency_order,
  send_after_compute,      ///< SEND_F after its F, SEND_B after its B/I
  receive_before_compute,  ///< lowered tables: RECV_F before F, RECV_B before B/I
  matched_messages,        ///< the k-th send of a channel meets the k-th receive, same (stage, mb)
  deadlock,                ///< the replay runs to the end on every rank
};

/// The rule's name as messages print it ("no deadlock", "exactly once").
constexpr std::string_view to_string(Rule rule) {
  switch (rule) {
    case Rule::none:
      return "none";
    case Rule::parameters:
      return "parameters";
    case Rule::stage_map:
      return "stage map";
    case Rule::comm_endpoint:
      return "comm endpoint";
    case Rule::overlap_pair:
      return "overlap pair";
    case Rule::exactly_once:
      return "exactly once";
    case Rule::forward_before_backward:
      return "forward before backward";
    case Rule::input_grad_before_weight_grad:
      return "input grad before weight grad";
    case Rule::dependency_order:
      return "dependency order";
    case Rule::send_after_compute:
      return "send after compute";
    case Rule::receive_before_compute:
      return "receive before compute";
    case Rule::matched_messages:
      return "matched messages";
    case Rule::deadlock:
      return "no deadlock";
  }
  return "?";
}

/// What the verifier proves and predicts. `ok` false: `rule`, `rank`, `step` (index in that
/// rank's table) and `action` say where, `message` says it in words with the fix.
/// Figures (valid when ok) are in the cost model's units.
struct VerifyResult {
  bool ok = false;         ///< True when every rule holds.
  FixedText message{};     ///< The broken rule in words, with the fix; empty when ok.
  Rule rule = Rule::none;  ///< The broken rule.
  int rank = -1;           ///< Where it broke: the rank, -1 when no single rank is to blame.
  int step = -1;           ///< Index of the offending action in that rank's table, or -1.
  Action action{};         ///< The offending action.
  int ranks = 0;           ///< P.
  int makespan = 0;        ///< time from the first action to the last completion on any rank
  int total_busy = 0;      ///< summed compute time over ranks (communication is not compute)
  int busy[max_ranks]{};   ///< Compute time of each rank.
  /// Peak (stage, mb) pairs forwarded but not yet fully backwarded, per rank.
  int peak_in_flight[max_ranks]{};
  int first_start[max_ranks]{};  ///< When each rank's first compute starts.
  int finish[max_ranks]{};       ///< When each rank's last action (or last send) completes.

  /// Idle time of `rank` between its own first compute and its own end: the bubble a pipeline
  /// has when consecutive steps overlap (each rank starts its next step as soon as its own
  /// optimizer step is done, as zero-bubble schedules assume).
  constexpr int span_idle(int rank) const { return finish[rank] - first_start[rank] - busy[rank]; }

  /// True when the table is sound (same as `ok`).
  constexpr explicit operator bool() const { return ok; }
  /// Summed idle time over ranks: ranks * makespan - total_busy.
  constexpr int total_idle() const { return ranks * makespan - total_busy; }
  /// Idle share of the step: idle / (ranks * makespan). GPipe/1F1B: (P-1)/(M+P-1).
  constexpr double bubble_fraction() const {
    return makespan > 0
               ? static_cast<double>(total_idle()) / (static_cast<double>(ranks) * makespan)
               : 0.0;
  }
  /// Idle relative to ideal compute: idle / busy. Interleaved 1F1B: (P-1)/(V*M).
  constexpr double bubble_ratio() const {
    return total_busy > 0 ? static_cast<double>(total_idle()) / total_busy : 0.0;
  }
  /// The largest peak_in_flight over the ranks.
  constexpr int max_peak_in_flight() const {
    int m = 0;
    for (int r = 0; r < ranks; ++r) m = peak_in_flight[r] > m ? peak_in_flight[r] : m;
    return m;
  }
};

namespace detail {

/// Upper bound of stages * micro-batches (every (stage, mb) needs >= 1 action on its rank).
inline constexpr int max_slots = max_ranks * max_actions_per_rank;

/// Runs `f` on a zero-initialised scratch object: a local at compile time (GCC evaluates
/// member-array indexing far faster than pointers into `new`ed storage), the heap at run time.
template <class State, class F>
constexpr auto with_state(F&& f) {
  if (std::is_constant_evaluated()) {
    State state{};
    return f(state);
  } else {
    State* state = new State();  // a few MB: never on the stack; f does not throw
    auto result = f(*state);
    delete state;
    return result;
  }
}

/// Optional destination for the simulated timeline.
struct EventSink {
  TimedEvent* events = nullptr;
  int capacity = 0;
  int count = 0;
  constexpr void add(int rank, int start, int end, const Action& a) {
    if (count < capacity)
      events[count] = TimedEvent{rank,
                                 static_cast<double>(start),
                                 static_cast<double>(end),
                                 a.op,
                                 a.micro_batch,
                                 a.chunk,
                                 a.stage};
    ++count;
  }
};

constexpr bool reject(VerifyResult& out, Rule rule, int rank, int step, const Action& a) {
  out.ok = false;
  out.rule = rule;
  out.rank = rank;
  out.step = step;
  out.action = a;
  out.message << "mpp: schedule rejected by rule '" << to_string(rule) << "' on rank " << rank
              << " at step " << step << ", " << a << ": ";
  return false;
}

/// The verifier's scratch: what the static pass learns and the replay needs, one int per
/// (stage * M + mb). Messages are named by the (stage, mb) that consumes them. Steps and
/// times are stored +1 (0 = none yet).
struct Ledger {
  int forward_step[max_slots];
  int backward_kind[max_slots];  // 1 = B, 2 = I
  int weight_done[max_slots];
  int recv_f_step[max_slots], recv_f_seq[max_slots], recv_b_step[max_slots], recv_b_seq[max_slots];
  int send_f_step[max_slots], send_f_seq[max_slots], send_b_step[max_slots], send_b_seq[max_slots];
  int channel_seq[max_ranks * max_ranks * 4];  // [sender][receiver][kind][send|recv]
  // Replay.
  int clock[max_ranks], pc[max_ranks], finish[max_ranks], seen[max_ranks], started[max_ranks];
  int forward_end[max_slots], backward_end[max_slots];
  int arrival_f[max_slots],
      arrival_b[max_slots];  // input of F / output grad of B,I is on its rank at
  int posted_f[max_slots], posted_b[max_slots];  // buffered: when the RECV was posted
  int sent_f[max_slots], sent_b[max_slots];      // buffered: when the SEND was posted
  CoreSharing sharing;  // ranks on fewer cores than ranks: when their computes end
  StageLookup stages;   // each stage's neighbours and costs, filled before the static pass
};

/// Static rules, rank by rank in table order; fills the ledger and peak in-flight.
constexpr bool check_static(const ScheduleTable& t, Ledger& L, VerifyResult& out) {
  const int P = t.ranks, M = t.micro_batches, V = t.chunks_per_rank, S = P * V;
  const bool lowered = t.lowered;
  constexpr int forward_op = static_cast<int>(Op::F), backward_op = static_cast<int>(Op::B),
                weight_grad_op = static_cast<int>(Op::W), send_f = static_cast<int>(Op::SEND_F),
                send_b = static_cast<int>(Op::SEND_B), recv_f = static_cast<int>(Op::RECV_F),
                recv_b = static_cast<int>(Op::RECV_B);
  for (int r = 0; r < P; ++r) {
    int in_flight = 0, peak = 0;
    const int n = t.length[r];
    for (int k = 0; k < n; ++k) {
      const Action& a = t.actions[r][k];
      const int op = static_cast<int>(a.op), mb = a.micro_batch, s = a.stage, chunk = a.chunk,
                peer = a.peer;
      if (op < 0 || op >= op_count || mb < 0 || mb >= M || chunk < 0 || chunk >= V) {
        reject(out, Rule::stage_map, r, k, a);
        out.message << "micro-batch must be in [0, " << M << ") and chunk in [0, " << V << ")";
        return false;
      }
      if (s != t.placement.stage_at[r][chunk]) {
        reject(out, Rule::stage_map, r, k, a);
        out.message << "chunk " << a.chunk << " on rank " << r << " is stage "
                    << t.stage_of(r, a.chunk) << " (placement: " << describe(t.placement).view()
                    << ")";
        return false;
      }
      if (a.overlap_with_next) {
        int next = k + 1;
        while (next < n && is_comm(t.actions[r][next].op)) ++next;
        if (a.op != Op::F || next == n || !is_backward(t.actions[r][next].op)) {
          reject(out, Rule::overlap_pair, r, k, a);
          out.message << "an OVERLAP_F_B pair is an F and the B or I computed right after it on "
                         "the same rank; pair the F with a backward, or drop the mark";
          return false;
        }
      }
      const int id = s * M + mb;
      if (op >= static_cast<int>(Op::SEND_F)) {
        if (!lowered) {
          reject(out, Rule::comm_endpoint, r, k, a);
          out.message
              << "a compute-only table holds a communication action; mark it lowered or remove it";
          return false;
        }
        const bool to_next = op == send_f || op == recv_b;
        const int other = to_next ? s + 1 : s - 1;
        if (other < 0 || other >= S) {
          reject(out, Rule::comm_endpoint, r, k, a);
          out.message << "stage " << s << " has no " << (to_next ? "next" : "previous")
                      << " stage to talk to";
          return false;
        }
        const int holder = t.placement.rank_of_stage[other];
        if (peer != holder || peer == r) {
          reject(out, Rule::comm_endpoint, r, k, a);
          out.message << "stage " << other << " lives on rank " << holder << ", not on rank "
                      << a.peer << (a.peer == r ? " (a rank does not message itself)" : "");
          return false;
        }
        if (op == send_f || op == send_b) {
          const bool fwd = op == send_f;
          if (fwd ? L.forward_step[id] == 0 : L.backward_kind[id] == 0) {
            reject(out, Rule::send_after_compute, r, k, a);
            out.message << "it sends the result of " << (fwd ? "F" : "the backward") << "(stage "
                        << s << ", mb " << mb
                        << ") before computing it; move the send after the compute";
            return false;
          }
          const int dst = fwd ? id + M : id - M;
          const int earlier = fwd ? L.send_f_step[dst] : L.send_b_step[dst];
          if (earlier != 0) {
            reject(out, Rule::exactly_once, r, k, a);
            out.message << "this message was already sent at step " << earlier - 1
                        << "; send it once";
            return false;
          }
          const int seq = L.channel_seq[((r * P + peer) * 2 + (fwd ? 0 : 1)) * 2]++;
          if (fwd) {
            L.send_f_step[dst] = k + 1;
            L.send_f_seq[dst] = seq;
          } else {
            L.send_b_step[dst] = k + 1;
            L.send_b_seq[dst] = seq;
          }
        } else {
          const bool fwd = op == recv_f;
          const int earlier = fwd ? L.recv_f_step[id] : L.recv_b_step[id];
          if (earlier != 0) {
            reject(out, Rule::exactly_once, r, k, a);
            out.message << "this message was already received at step " << earlier - 1
                        << "; receive it once";
            return false;
          }
          const int seq = L.channel_seq[((peer * P + r) * 2 + (fwd ? 0 : 1)) * 2 + 1]++;
          if (fwd) {
            L.recv_f_step[id] = k + 1;
            L.recv_f_seq[id] = seq;
          } else {
            L.recv_b_step[id] = k + 1;
            L.recv_b_seq[id] = seq;
          }
        }
        continue;
      }
      if (op == forward_op) {
        if (L.forward_step[id] != 0) {
          reject(out, Rule::exactly_once, r, k, a);
          out.message << "F of (stage " << s << ", mb " << mb << ") runs a second time; remove one";
          return false;
        }
        if (s > 0) {
          if (L.stages.previous_same_rank[s]) {
            if (L.forward_step[id - M] == 0) {
              reject(out, Rule::dependency_order, r, k, a);
              out.message << "F(stage " << s - 1 << ", mb " << mb
                          << ") on the same rank must come first";
              return false;
            }
          } else if (lowered && L.recv_f_step[id] == 0) {
            reject(out, Rule::receive_before_compute, r, k, a);
            out.message << "its input was not received; put RECV_F(stage " << s << ", mb " << mb
                        << ") before it";
            return false;
          }
        }
        L.forward_step[id] = k + 1;
        if (++in_flight > peak) peak = in_flight;
      } else if (op == weight_grad_op) {
        if (L.weight_done[id] != 0) {
          reject(out, Rule::exactly_once, r, k, a);
          out.message << "the weight grad of (stage " << s << ", mb " << mb
                      << ") is already done (by B or an earlier W); remove this W";
          return false;
        }
        if (L.backward_kind[id] != 2) {
          reject(out, Rule::input_grad_before_weight_grad, r, k, a);
          out.message << "I(stage " << s << ", mb " << mb << ") must come before W";
          return false;
        }
        L.weight_done[id] = 1;
        --in_flight;
      } else {  // B or I
        if (L.backward_kind[id] != 0) {
          reject(out, Rule::exactly_once, r, k, a);
          out.message << "the backward of (stage " << s << ", mb " << mb
                      << ") runs a second time (B, or I then W, exactly once); remove one";
          return false;
        }
        if (L.forward_step[id] == 0) {
          reject(out, Rule::forward_before_backward, r, k, a);
          out.message << "F(stage " << s << ", mb " << mb
                      << ") has not run on this rank yet; move the backward after it";
          return false;
        }
        if (s < S - 1) {
          if (L.stages.next_same_rank[s]) {
            if (L.backward_kind[id + M] == 0) {
              reject(out, Rule::dependency_order, r, k, a);
              out.message << "the backward of (stage " << s + 1 << ", mb " << mb
                          << ") on the same rank must come first";
              return false;
            }
          } else if (lowered && L.recv_b_step[id] == 0) {
            reject(out, Rule::receive_before_compute, r, k, a);
            out.message << "its output grad was not received; put RECV_B(stage " << s << ", mb "
                        << mb << ") before it";
            return false;
          }
        }
        if (op == backward_op) {
          L.backward_kind[id] = 1;
          L.weight_done[id] = 1;
          --in_flight;
        } else {
          L.backward_kind[id] = 2;
        }
      }
    }
    out.peak_in_flight[r] = peak;
  }
  return true;
}

/// Every (stage, mb) has its F, its backward and (after I) its W somewhere.
constexpr bool check_complete(const ScheduleTable& t, const Ledger& L, VerifyResult& out) {
  const int M = t.micro_batches, slots = t.stages() * M;
  for (int id = 0; id < slots; ++id) {
    if (L.forward_step[id] != 0 && L.backward_kind[id] != 0 && L.weight_done[id] != 0) continue;
    const int s = id / M, mb = id % M, r = t.rank_of(s), c = t.chunk_of(s);
    if (L.forward_step[id] == 0) {
      reject(out, Rule::exactly_once, r, t.length[r], Action{Op::F, mb, c, s, -1});
      out.message << "rank " << r << " never runs F(stage " << s << ", mb " << mb << "); add it";
    } else if (L.backward_kind[id] == 0) {
      reject(out, Rule::exactly_once, r, t.length[r], Action{Op::B, mb, c, s, -1});
      out.message << "rank " << r << " never runs the backward of (stage " << s << ", mb " << mb
                  << "); add B, or I then W";
    } else {
      reject(out, Rule::exactly_once, r, t.length[r], Action{Op::W, mb, c, s, -1});
      out.message << "rank " << r << " runs I(stage " << s << ", mb " << mb
                  << ") but never its W; add W";
    }
    return false;
  }
  return true;
}

/// Sends and receives pair up channel by channel (sender, receiver, F or B), in order.
constexpr bool check_matching(const ScheduleTable& t, const Ledger& L, VerifyResult& out) {
  const int M = t.micro_batches, slots = t.stages() * M;
  for (int kind = 0; kind < 2; ++kind) {
    const bool fwd = kind == 0;
    for (int id = 0; id < slots; ++id) {
      const int send_step = fwd ? L.send_f_step[id] : L.send_b_step[id];
      const int recv_step = fwd ? L.recv_f_step[id] : L.recv_b_step[id];
      if (send_step == 0 && recv_step == 0) continue;
      const int send_seq = fwd ? L.send_f_seq[id] : L.send_b_seq[id];
      const int recv_seq = fwd ? L.recv_f_seq[id] : L.recv_b_seq[id];
      if (send_step != 0 && recv_step != 0 && send_seq == recv_seq) continue;
      const int s = id / M, mb = id % M;
      const int src_stage = fwd ? s - 1 : s + 1;
      const int sender = t.rank_of(src_stage), receiver = t.rank_of(s);
      const Action recv{fwd ? Op::RECV_F : Op::RECV_B, mb, t.chunk_of(s), s, sender};
      const Action send{fwd ? Op::SEND_F : Op::SEND_B, mb, t.chunk_of(src_stage), src_stage,
                        receiver};
      if (send_step == 0) {
        reject(out, Rule::matched_messages, receiver, recv_step - 1, recv);
        out.message << "rank " << sender << " never sends it; add " << to_string(send.op)
                    << "(stage " << src_stage << ", mb " << mb << ") on rank " << sender;
      } else if (recv_step == 0) {
        reject(out, Rule::matched_messages, sender, send_step - 1, send);
        out.message << "rank " << receiver << " never receives it; add " << to_string(recv.op)
                    << "(stage " << s << ", mb " << mb << ") on rank " << receiver;
      } else {
        reject(out, Rule::matched_messages, receiver, recv_step - 1, recv);
        out.message << "it is receive number " << recv_seq << " from rank " << sender
                    << " but the matching send is number " << send_seq
                    << " on that channel; post receives in the order the peer sends";
      }
      return false;
    }
  }
  return true;
}

/// The replay. Every rank runs its table in order; an action starts when its rank is free and
/// its inputs are there. Rendezvous: a SEND and its RECV start together when both ranks reach
/// them. Buffered: SEND and RECV only post; the data arrives T_comm after the SEND, and the
/// compute that needs it waits; a rank's step ends when its sends have been received.
/// A compute-only table is replayed with implicit transfers (T_comm between ranks).
/// On fewer cores than ranks (Costs::cores) a compute's start is found the same way, but its end
/// waits until the shared clock (CoreSharing) gets there: the sweep stops at it, and when no rank
/// can move the clock ends the next compute.
constexpr bool replay(const ScheduleTable& t, CommSemantics semantics, const Costs& costs,
                      Ledger& L, VerifyResult& out, EventSink* sink) {
  const int P = t.ranks, M = t.micro_batches, S = t.stages(), slots = S * M;
  const bool lowered = t.lowered, rendezvous = lowered && semantics == CommSemantics::rendezvous;
  const int comm = costs.comm;
  const bool shared = costs.shares_cores(P);
  int remaining = 0;
  for (int r = 0; r < P; ++r) remaining += t.length[r];
  // Alternate sweep direction: activations flow to higher ranks, gradients to lower ones.
  for (int pass = 0, progress = 1; progress && remaining > 0; ++pass) {
    progress = 0;
    for (int i = 0; i < P; ++i) {
      const int r = (pass & 1) ? P - 1 - i : i;
      const int n = t.length[r];
      while (L.pc[r] < n) {
        const Action& a = t.actions[r][L.pc[r]];
        const int s = a.stage, id = s * M + a.micro_batch;
        const Op op = a.op;
        if (static_cast<int>(op) <= static_cast<int>(Op::W)) {  // a compute (ops are in range)
          int ready = L.clock[r];
          if (op == Op::F && s > 0) {
            int dep;
            if (L.stages.previous_same_rank[s])
              dep = L.forward_end[id - M];
            else if (lowered)
              dep = L.arrival_f[id];
            else
              dep = L.forward_end[id - M] == 0 ? 0 : L.forward_end[id - M] + comm;
            if (dep == 0) break;
            if (dep - 1 > ready) ready = dep - 1;
          } else if ((op == Op::B || op == Op::I) && s < S - 1) {
            int dep;
            if (L.stages.next_same_rank[s])
              dep = L.backward_end[id + M];
            else if (lowered)
              dep = L.arrival_b[id];
            else
              dep = L.backward_end[id + M] == 0 ? 0 : L.backward_end[id + M] + comm;
            if (dep == 0) break;
            if (dep - 1 > ready) ready = dep - 1;
          }
          const int cost = L.stages.duration[s][static_cast<int>(op)];
          int end = ready + cost;
          if (shared && !L.sharing.run(r, ready, cost, end)) break;  // ends on the shared clock
          if (op == Op::F)
            L.forward_end[id] = end + 1;
          else if (op != Op::W)
            L.backward_end[id] = end + 1;
          if (L.started[r] == 0) {
            out.first_start[r] = ready;
            L.started[r] = 1;
          }
          out.busy[r] += cost;
          L.clock[r] = end;
          if (sink) sink->add(r, ready, end, a);
          ++L.pc[r];
          --remaining;
          progress = 1;
          continue;
        }
        const bool fwd = op == Op::SEND_F || op == Op::RECV_F;
        const bool send = op == Op::SEND_F || op == Op::SEND_B;
        if (!rendezvous) {
          if (send) {
            if (fwd) {
              L.arrival_f[id + M] = L.clock[r] + comm + 1;
              L.sent_f[id + M] = L.clock[r] + 1;
            } else {
              L.arrival_b[id - M] = L.clock[r] + comm + 1;
              L.sent_b[id - M] = L.clock[r] + 1;
            }
          } else if (fwd) {
            L.posted_f[id] = L.clock[r] + 1;
          } else {
            L.posted_b[id] = L.clock[r] + 1;
          }
          // Posting costs the rank its overhead (LogP's o); the transfer is not delayed by it.
          // It is CPU time too: on shared cores it shares them as a compute does.
          const int overhead = send ? costs.send_overhead : costs.recv_overhead;
          if (overhead > 0) {
            int end = L.clock[r] + overhead;
            if (shared && !L.sharing.run(r, L.clock[r], overhead, end)) break;
            if (sink) sink->add(r, L.clock[r], end, a);
            L.clock[r] = end;
          }
          ++L.pc[r];
          --remaining;
          progress = 1;
          continue;
        }
        // Rendezvous: both sides must be at the matching pair.
        const int msg = send ? (fwd ? id + M : id - M) : id;
        const int q = a.peer;
        const int partner = send ? (fwd ? L.recv_f_step[msg] : L.recv_b_step[msg])
                                 : (fwd ? L.send_f_step[msg] : L.send_b_step[msg]);
        if (L.pc[q] + 1 != partner) break;
        const int start = L.clock[r] > L.clock[q] ? L.clock[r] : L.clock[q];
        const int end = start + comm;
        L.clock[r] = end;
        L.clock[q] = end;
        if (fwd)
          L.arrival_f[msg] = end + 1;
        else
          L.arrival_b[msg] = end + 1;
        if (sink && comm > 0) {
          sink->add(r, start, end, a);
          sink->add(q, start, end, t.actions[q][L.pc[q]]);
        }
        ++L.pc[r];
        ++L.pc[q];
        remaining -= 2;
        progress = 1;
      }
    }
    // No rank can move: the shared clock ends the next compute, which lets some move again.
    if (!progress && shared) progress = L.sharing.advance(P, costs.cores) ? 1 : 0;
  }

  if (remaining > 0) {
    // Deadlock: follow "waits for" from the first blocked rank until it closes a cycle or
    // reaches a rank that finished without providing what is awaited.
    auto waits_for = [&](int r) {
      const Action& a = t.actions[r][L.pc[r]];
      if (a.op == Op::F) return a.stage > 0 ? t.rank_of(a.stage - 1) : r;
      if (is_backward(a.op)) return a.stage < S - 1 ? t.rank_of(a.stage + 1) : r;
      return a.peer >= 0 && a.peer < P ? a.peer : r;
    };
    int first = 0;
    while (L.pc[first] >= t.length[first]) ++first;
    int r = first;
    while (L.seen[r] == 0 && L.pc[r] < t.length[r]) {
      L.seen[r] = 1;
      r = waits_for(r);
    }
    const bool cycle = L.pc[r] < t.length[r];
    const int start = cycle ? r : first;
    reject(out, Rule::deadlock, start, L.pc[start], t.actions[start][L.pc[start]]);
    int q = start;
    for (int hop = 0; hop < P; ++hop) {
      const int next = waits_for(q);
      if (hop > 0)
        out.message << ", which is blocked at step " << L.pc[q] << " on " << t.actions[q][L.pc[q]]
                    << " and ";
      out.message << "waits for rank " << next;
      q = next;
      if (q == start || L.pc[q] >= t.length[q]) break;
    }
    out.message << (cycle ? " (a cycle)" : ", which finished its table without providing it");
    out.message
        << (rendezvous
                ? "; under rendezvous a send completes only when the peer receives: order each "
                  "exchange "
                  "so one neighbour receives first (mpp::lower does), or use an async comm policy"
                : "; reorder the tables so that every wait can be met");
    return false;
  }

  // Buffered: a rank's step ends when the peers have received its sends.
  for (int r = 0; r < P; ++r) L.finish[r] = L.clock[r];
  if (lowered && !rendezvous) {
    for (int id = 0; id < slots; ++id) {
      if (L.sent_f[id] != 0) {
        const int r = t.placement.rank_of_stage[id / M - 1];
        int done = L.sent_f[id] - 1 + comm;
        if (L.posted_f[id] - 1 > done) done = L.posted_f[id] - 1;
        if (done > L.finish[r]) L.finish[r] = done;
      }
      if (L.sent_b[id] != 0) {
        const int r = t.placement.rank_of_stage[id / M + 1];
        int done = L.sent_b[id] - 1 + comm;
        if (L.posted_b[id] - 1 > done) done = L.posted_b[id] - 1;
        if (done > L.finish[r]) L.finish[r] = done;
      }
    }
  }
  out.makespan = 0;
  out.total_busy = 0;
  for (int r = 0; r < P; ++r) {
    out.finish[r] = L.finish[r];
    if (L.finish[r] > out.makespan) out.makespan = L.finish[r];
    out.total_busy += out.busy[r];
  }
  return true;
}

constexpr void verify_into(VerifyResult& out, const ScheduleTable& t, CommSemantics semantics,
                           const Costs& costs, EventSink* sink, bool static_rules_only = false) {
  out = VerifyResult{};
  out.ranks = t.ranks;
  if (!t.ok()) {
    out.rule = Rule::parameters;
    out.message = t.error;
    return;
  }
  if (t.placement.ranks != t.ranks || t.placement.chunks_per_rank != t.chunks_per_rank) {
    out.rule = Rule::parameters;
    out.message << "mpp: the table has " << t.ranks << " ranks of " << t.chunks_per_rank
                << " chunks but ";
    if (t.placement.ranks == 0)
      out.message << "no placement; fill it with push() or set it (interleaved_placement)";
    else
      out.message << "its placement is for " << t.placement.ranks << " ranks of "
                  << t.placement.chunks_per_rank << "; build the placement for the table's shape";
    return;
  }
  if (costs.cores < 0) {
    out.rule = Rule::parameters;
    out.message << "mpp: the cost model's cores must be >= 0 (got " << costs.cores
                << "); give the cores the ranks share, or 0 for a core per rank";
    return;
  }
  if (t.stages() * t.micro_batches > max_slots) {
    out.rule = Rule::parameters;
    out.message << "mpp: stages * micro-batches = " << t.stages() * t.micro_batches
                << " exceeds mpp::detail::max_slots = " << max_slots << "; lower M or V";
    return;
  }
  with_state<Ledger>([&](Ledger& ledger) {
    ledger.stages.fill(t.placement, costs);
    if (!check_static(t, ledger, out)) return 0;
    if (!check_complete(t, ledger, out)) return 0;
    if (static_rules_only) {
      out.ok = true;
      return 0;
    }
    if (t.lowered && !check_matching(t, ledger, out)) return 0;
    if (!replay(t, semantics, costs, ledger, out, sink)) return 0;
    out.ok = true;
    out.message << "mpp: sound; makespan " << out.makespan << ", busy " << out.total_busy << " of "
                << out.ranks * out.makespan;
    return 0;
  });
}

}  // namespace detail

/// Verifies a table (compute-only or lowered) under a comm semantics and a cost model.
/// A compute-only table is replayed with implicit transfers of T_comm between ranks.
constexpr VerifyResult verify(const ScheduleTable& table, CommSemantics semantics,
                              const Costs& costs = {}) {
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
  static_assert(D.ok,
                "mpp: the schedule failed verification; the rule, rank, step and action are in the "
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
