#pragma once
// The built-in schedule generators as plain constexpr functions of (P, M, V), shared by the
// policy tags (compile time, knobs from the type) and by run-time callers (P, M, V from flags).
#include <string_view>

#include "mpp/schedule/table.hpp"

namespace mpp {

/// The built-in schedules, as named at run time (mpp-schedule, the labs' flags).
enum class ScheduleKind { naive, gpipe, one_f_one_b, interleaved_1f1b, zero_bubble_h1 };

/// A built-in schedule chosen at run time.
struct ScheduleSpec {
  ScheduleKind kind = ScheduleKind::one_f_one_b;  ///< Which generator.
  int micro_batches = 1;                          ///< M, micro-batches per step (>= 1).
  int chunks_per_rank = 1;  ///< V, model chunks per rank (> 1 only for interleaved_1f1b).
};

/// The policy tag's name: "GPipe", "OneFOneB", ...
constexpr std::string_view name_of(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::naive:
      return "Naive";
    case ScheduleKind::gpipe:
      return "GPipe";
    case ScheduleKind::one_f_one_b:
      return "OneFOneB";
    case ScheduleKind::interleaved_1f1b:
      return "Interleaved1F1B";
    case ScheduleKind::zero_bubble_h1:
      return "ZeroBubbleH1";
  }
  return "?";
}

/// Accepts the CLI spellings: naive, gpipe, 1f1b, interleaved, zb-h1 (and the tag names).
constexpr bool parse_schedule_kind(std::string_view s, ScheduleKind& out) {
  struct Entry {
    std::string_view spelling;
    ScheduleKind kind;
  };
  constexpr Entry entries[] = {
      {"naive", ScheduleKind::naive},
      {"Naive", ScheduleKind::naive},
      {"gpipe", ScheduleKind::gpipe},
      {"GPipe", ScheduleKind::gpipe},
      {"1f1b", ScheduleKind::one_f_one_b},
      {"OneFOneB", ScheduleKind::one_f_one_b},
      {"interleaved", ScheduleKind::interleaved_1f1b},
      {"interleaved-1f1b", ScheduleKind::interleaved_1f1b},
      {"Interleaved1F1B", ScheduleKind::interleaved_1f1b},
      {"zb-h1", ScheduleKind::zero_bubble_h1},
      {"zbh1", ScheduleKind::zero_bubble_h1},
      {"ZeroBubbleH1", ScheduleKind::zero_bubble_h1},
  };
  for (const Entry& e : entries)
    if (e.spelling == s) {
      out = e.kind;
      return true;
    }
  return false;
}

namespace detail {

/// GPipe (fill-drain): all forwards, then all backwards, in micro-batch order.
constexpr void fill_gpipe(ScheduleTable& t) {
  for (int r = 0; r < t.ranks; ++r) {
    for (int mb = 0; mb < t.micro_batches; ++mb) emit(t, r, Op::F, mb, 0);
    for (int mb = 0; mb < t.micro_batches; ++mb) emit(t, r, Op::B, mb, 0);
  }
}

/// 1F1B (PipeDream-Flush): rank r runs P-r-1 warm-up forwards, then alternates one forward and
/// one backward, then drains. With M < P the warm-up is capped at M (it becomes fill-drain).
constexpr void fill_one_f_one_b(ScheduleTable& t) {
  const int p = t.ranks, m = t.micro_batches;
  for (int r = 0; r < p; ++r) {
    const int warmup = (p - r - 1) < m ? (p - r - 1) : m;
    for (int mb = 0; mb < warmup; ++mb) emit(t, r, Op::F, mb, 0);
    for (int i = 0; i + warmup < m; ++i) {
      emit(t, r, Op::F, warmup + i, 0);
      emit(t, r, Op::B, i, 0);
    }
    for (int mb = m - warmup; mb < m; ++mb) emit(t, r, Op::B, mb, 0);
  }
}

/// Megatron's interleaved 1F1B: V chunks per rank (stage = chunk * P + rank). Micro-batches go
/// through the chunks in groups of P, which is why M must be a multiple of P.
constexpr void fill_interleaved(ScheduleTable& t) {
  const int p = t.ranks, m = t.micro_batches, v = t.chunks_per_rank;
  if (m % p != 0) {
    t.error << "mpp: Interleaved1F1B<M, V> needs M to be a multiple of the number of ranks (got M="
            << m << " for " << p << " ranks); use M=" << (m / p + 1) * p << " or OneFOneB";
    return;
  }
  const int total = m * v;
  auto unit = [&](int r, int k, bool forward) {
    const int group = k / (p * v), within = k % (p * v);
    const int chunk = forward ? within / p : v - 1 - within / p;
    emit(t, r, forward ? Op::F : Op::B, group * p + within % p, chunk);
  };
  for (int r = 0; r < p; ++r) {
    int warmup = (p - r - 1) * 2 + (v - 1) * p;
    if (warmup > total) warmup = total;
    for (int k = 0; k < warmup; ++k) unit(r, k, true);
    for (int k = 0; k + warmup < total; ++k) {
      unit(r, warmup + k, true);
      unit(r, k, false);
    }
    for (int k = total - warmup; k < total; ++k) unit(r, k, false);
  }
}

/// ZB-H1 (Qi et al., "Zero Bubble Pipeline Parallelism"): the 1F1B order of F and I, with each
/// W delayed by r steps on rank r so that it fills the bubbles 1F1B leaves; every rank then holds
/// at most P micro-batches (1F1B's peak on rank 0).
constexpr void fill_zero_bubble_h1(ScheduleTable& t) {
  const int p = t.ranks, m = t.micro_batches;
  for (int r = 0; r < p; ++r) {
    const int warmup = (p - r - 1) < m ? (p - r - 1) : m;
    int next_w = 0;
    for (int mb = 0; mb < warmup; ++mb) emit(t, r, Op::F, mb, 0);
    for (int i = 0; i < m; ++i) {
      if (i + warmup < m) emit(t, r, Op::F, warmup + i, 0);
      emit(t, r, Op::I, i, 0);
      if (i - r >= 0) emit(t, r, Op::W, next_w++, 0);
    }
    while (next_w < m) emit(t, r, Op::W, next_w++, 0);
  }
}

}  // namespace detail

/// Generates a built-in schedule's compute table in place (no copy of the large table).
constexpr void generate_into(ScheduleTable& t, const ScheduleSpec& spec, int ranks) {
  t = ScheduleTable{};
  const bool split = spec.kind == ScheduleKind::zero_bubble_h1;
  const int m = spec.kind == ScheduleKind::naive ? 1 : spec.micro_batches;
  const int v = spec.kind == ScheduleKind::interleaved_1f1b ? spec.chunks_per_rank : 1;
  detail::init_table(t, name_of(spec.kind), ranks, m, v, split ? 7 : 6);
  if (!t.ok()) return;
  if (spec.kind == ScheduleKind::naive && spec.micro_batches > 1) {
    t.error << "mpp: Naive runs one micro-batch (the whole batch); got M=" << spec.micro_batches
            << "; use GPipe<M> to split the batch";
    return;
  }
  if (spec.kind == ScheduleKind::interleaved_1f1b && v < 2) {
    t.error << "mpp: Interleaved1F1B<M, V> needs V >= 2 chunks per rank (got V=" << v
            << "); use OneFOneB<M> for V = 1";
    return;
  }
  switch (spec.kind) {
    case ScheduleKind::naive:
    case ScheduleKind::gpipe:
      detail::fill_gpipe(t);
      break;
    case ScheduleKind::one_f_one_b:
      detail::fill_one_f_one_b(t);
      break;
    case ScheduleKind::interleaved_1f1b:
      detail::fill_interleaved(t);
      break;
    case ScheduleKind::zero_bubble_h1:
      detail::fill_zero_bubble_h1(t);
      break;
  }
}

/// The table of `spec` on `ranks` ranks; a rule it breaks is in the table's `error` (see
/// generate_into).
constexpr ScheduleTable generate(const ScheduleSpec& spec, int ranks) {
  ScheduleTable t{};
  generate_into(t, spec, ranks);
  return t;
}

}  // namespace mpp
