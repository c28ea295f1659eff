#pragma once
// The action string format of torch.distributed.pipelining (`0F1`, `1SEND_F0`, `2I3`: stage,
// op, micro-batch; `(0F7;7B3)OVERLAP_F_B`: an overlapped pair) and its CSV (one row per rank,
// one action per cell), both ways, so that tables can be exchanged with PyTorch's schedules.
// The stages an action names are the placement: stage 7 on rank 0's line lives on rank 0.
#include <string>
#include <string_view>

#include "mpp/schedule/table.hpp"

namespace mpp {

/// "1SEND_F0" for SEND_F of stage 1, micro-batch 0.
inline std::string to_action_string(const Action& a) {
  return std::to_string(a.stage) + std::string(to_string(a.op)) + std::to_string(a.micro_batch);
}

/// One line per rank, actions separated by commas; an F marked overlap_with_next and the
/// backward right after it are written as one `(aFm;bBn)OVERLAP_F_B` cell.
inline std::string to_action_csv(const ScheduleTable& t) {
  std::string out;
  for (int r = 0; r < t.ranks; ++r) {
    for (int k = 0; k < t.length[r]; ++k) {
      if (k) out += ',';
      const Action& a = t.actions[r][k];
      if (a.overlap_with_next && k + 1 < t.length[r] && is_backward(t.actions[r][k + 1].op)) {
        out += '(' + to_action_string(a) + ';' + to_action_string(t.actions[r][k + 1]) +
               ")OVERLAP_F_B";
        ++k;
      } else {
        out += to_action_string(a);
      }
    }
    out += '\n';
  }
  return out;
}

/// Why an imported CSV's UNSHARD, RESHARD and REDUCE_GRAD actions are skipped.
inline constexpr std::string_view ignored_action_reason =
    "UNSHARD, RESHARD and REDUCE_GRAD are FSDP's parameter all-gather, its release and its "
    "gradient reduce-scatter; mpp's pipeline ranks hold whole stages, and data-parallel "
    "gradients are reduced after the step (DataParallelPipeline), so they are skipped";

namespace detail {
constexpr bool parse_uint(std::string_view s, int& value) {
  if (s.empty() || s.size() > 6) return false;
  value = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    value = value * 10 + (c - '0');
  }
  return true;
}
constexpr std::string_view trim(std::string_view s) {
  while (!s.empty() &&
         (s.front() == ' ' || s.front() == '\t' || s.front() == '\r' || s.front() == '"'))
    s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r' || s.back() == '"'))
    s.remove_suffix(1);
  return s;
}
}  // namespace detail

/// Parses "3RECV_B12" into stage 3, RECV_B, micro-batch 12 (chunk and peer are left unset).
constexpr bool parse_action(std::string_view text, int& stage, Op& op, int& micro_batch) {
  text = detail::trim(text);
  std::size_t i = 0;
  while (i < text.size() && text[i] >= '0' && text[i] <= '9') ++i;
  if (!detail::parse_uint(text.substr(0, i), stage)) return false;
  std::size_t j = i;
  while (j < text.size() && !(text[j] >= '0' && text[j] <= '9')) ++j;
  const std::string_view name = text.substr(i, j - i);
  for (int o = 0; o < op_count; ++o)
    if (to_string(static_cast<Op>(o)) == name) {
      op = static_cast<Op>(o);
      return detail::parse_uint(text.substr(j), micro_batch);
    }
  return false;
}

/// What one cell of an action CSV holds: nothing (empty, or an action mpp skips, see
/// ignored_action_reason), one action, or an OVERLAP_F_B pair (the F marked overlap_with_next).
struct ActionCell {
  int count = 0;         ///< actions in `actions`: 0, 1 or 2
  bool ignored = false;  ///< an UNSHARD, RESHARD or REDUCE_GRAD
  Action actions[2]{};   ///< op, micro-batch and stage set; chunk and peer left to the table
};

/// Parses one cell. False, with what is wrong and what is expected in `error`, for a cell that
/// is no action of the format.
constexpr bool parse_cell(std::string_view text, ActionCell& out, FixedText& error) {
  out = ActionCell{};
  text = detail::trim(text);
  if (text.empty()) return true;
  const auto single = [&](std::string_view s, Action& a) {
    int stage = 0, mb = 0;
    Op op = Op::F;
    if (!parse_action(s, stage, op, mb)) return false;
    a = Action{op, mb, 0, stage, -1};
    return true;
  };
  if (text.front() == '(') {
    const std::size_t close = text.find(')'), semicolon = text.find(';');
    if (close == std::string_view::npos || text.substr(close + 1) != "OVERLAP_F_B" ||
        semicolon == std::string_view::npos || semicolon > close ||
        !single(text.substr(1, semicolon - 1), out.actions[0]) ||
        !single(text.substr(semicolon + 1, close - semicolon - 1), out.actions[1]) ||
        out.actions[0].op != Op::F || !is_backward(out.actions[1].op)) {
      error << "cannot parse '" << text
            << "'; an overlapped pair is (<stage>F<mb>;<stage>B<mb>)OVERLAP_F_B, the backward a "
               "B or an I";
      return false;
    }
    out.actions[0].overlap_with_next = true;
    out.count = 2;
    return true;
  }
  std::size_t i = 0;
  while (i < text.size() && text[i] >= '0' && text[i] <= '9') ++i;
  const std::string_view rest = text.substr(i);
  if (i > 0 && (rest.starts_with("UNSHARD") || rest.starts_with("RESHARD") ||
                rest.starts_with("REDUCE_GRAD"))) {
    out.ignored = true;
    return true;
  }
  if (!single(text, out.actions[0])) {
    error << "cannot parse action '" << text
          << "'; expected <stage><F|B|I|W|SEND_F|RECV_F|SEND_B|RECV_B><micro-batch>, e.g. "
             "1SEND_F0, or (<stage>F<mb>;<stage>B<mb>)OVERLAP_F_B";
    return false;
  }
  out.count = 1;
  return true;
}

namespace detail {
/// Calls f(line, column, cell) for every non-empty line's cells, line and column from 1 (blank
/// lines are not counted: each line is a rank); stops when f returns false.
template <class F>
constexpr bool for_each_csv_cell(std::string_view csv, F&& f) {
  int line = 0;
  for (std::string_view rest = csv; !rest.empty();) {
    const std::size_t eol = rest.find('\n');
    const std::string_view text = rest.substr(0, eol);
    rest = eol == std::string_view::npos ? std::string_view{} : rest.substr(eol + 1);
    if (trim(text).empty()) continue;
    ++line;
    int column = 0;
    for (std::string_view cells = text; !cells.empty();) {
      const std::size_t comma = cells.find(',');
      const std::string_view cell = cells.substr(0, comma);
      cells = comma == std::string_view::npos ? std::string_view{} : cells.substr(comma + 1);
      ++column;
      if (!f(line, column, cell)) return false;
    }
  }
  return true;
}
}  // namespace detail

/// Builds a table from torch's CSV action format, one line per rank (empty cells are skipped),
/// compute-only or with its SEND/RECV (then lowered for `semantics`). The placement is the one
/// the stages name: each stage on the rank of the line that names it, each rank's chunks its
/// stages in increasing order. Returns how many UNSHARD, RESHARD and REDUCE_GRAD actions it
/// skipped (see ignored_action_reason). A cell that is no action, or a stage named on two
/// lines, leaves the reason in `t.error`, naming the line and the column.
constexpr int table_from_action_csv(ScheduleTable& t, std::string_view csv,
                                    CommSemantics semantics = CommSemantics::buffered) {
  t = ScheduleTable{};
  // First pass: shape (ranks, micro-batches), the stages each line names, explicit comms.
  StageSightings seen{};
  int ranks = 0, max_mb = -1, ignored = 0;
  bool has_comm = false;
  FixedText why{};
  ActionCell cell{};
  const bool parsed =
      detail::for_each_csv_cell(csv, [&](int line, int column, std::string_view text) {
        ranks = line;
        if (!parse_cell(text, cell, why)) {
          t.error << "mpp: line " << line << ", column " << column
                  << " of the action CSV: " << why.view();
          return false;
        }
        ignored += cell.ignored ? 1 : 0;
        for (int i = 0; i < cell.count; ++i) {
          const Action& a = cell.actions[i];
          const int holder = seen.holder(a.stage);
          if (holder == -2 || (holder >= 0 && holder != line - 1)) {
            t.error << "mpp: line " << line << ", column " << column << " of the action CSV: ";
            if (holder == -2)
              t.error << "stage " << a.stage << " is beyond mpp::max_stages = " << max_stages;
            else
              t.error << "stage " << a.stage << " is on line " << holder + 1 << " (rank " << holder
                      << ") already; a stage lives on one rank";
            return false;
          }
          seen.see(a.stage, line - 1);
          max_mb = a.micro_batch > max_mb ? a.micro_batch : max_mb;
          has_comm = has_comm || is_comm(a.op);
        }
        return true;
      });
  if (!parsed) {
    t.ranks = 1;
    return ignored;
  }
  Placement placement{};
  if (ranks == 0) {
    t.error << "mpp: the action CSV holds no line; write one line of actions per rank";
    t.ranks = 1;
    return ignored;
  }
  if (!seen.build(placement, ranks, t.error)) {
    t.ranks = ranks;
    return ignored;
  }
  detail::init_table(t, "the action CSV", ranks, max_mb + 1, placement.chunks_per_rank, 1);
  if (!t.ok()) return ignored;
  t.placement = placement;
  t.lowered = has_comm;
  t.semantics = semantics;
  detail::for_each_csv_cell(csv, [&](int line, int, std::string_view text) {
    parse_cell(text, cell, why);
    for (int i = 0; i < cell.count; ++i) {
      Action a = cell.actions[i];
      a.chunk = placement.chunk_of(a.stage);
      t.push(line - 1, a);
    }
    return true;
  });
  return ignored;
}

/// Hand-written rows in PyTorch's spelling: `using namespace mpp::action_literals;` then
/// `{"0F0"_act, "0F1"_act, "0B0"_act}`. The actions name their stages, so the rows carry their
/// placement (see Custom). A string that is no action stops the compilation here.
namespace action_literals {
/// `"7F0"_act` is F of micro-batch 0 on stage 7 (chunk and peer are filled in by the table).
consteval Action operator""_act(const char* text, std::size_t size) {
  int stage = 0, mb = 0;
  Op op = Op::F;
  if (!parse_action(std::string_view(text, size), stage, op, mb))
    throw "mpp: not an action string; write <stage><F|B|I|W|SEND_F|RECV_F|SEND_B|RECV_B><mb>";
  return Action{op, mb, 0, stage, -1};
}
}  // namespace action_literals

}  // namespace mpp
