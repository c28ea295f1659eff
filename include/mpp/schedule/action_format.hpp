#pragma once
// The action string format of torch.distributed.pipelining (`0F1`, `1SEND_F0`, `2I3`: stage,
// op, micro-batch) and its CSV (one row per rank, one action per cell), so that tables can be
// exchanged and compared with PyTorch's schedules.
#include <string>
#include <string_view>

#include "mpp/schedule/table.hpp"

namespace mpp {

/// "1SEND_F0" for SEND_F of stage 1, micro-batch 0.
inline std::string to_action_string(const Action& a) {
  return std::to_string(a.stage) + std::string(to_string(a.op)) + std::to_string(a.micro_batch);
}

/// One line per rank, actions separated by commas.
inline std::string to_action_csv(const ScheduleTable& t) {
  std::string out;
  for (int r = 0; r < t.ranks; ++r) {
    for (int k = 0; k < t.length[r]; ++k) {
      if (k) out += ',';
      out += to_action_string(t.actions[r][k]);
    }
    out += '\n';
  }
  return out;
}

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

/// Builds a table from torch's CSV action format, one line per rank (empty cells are skipped).
/// Stage s runs on rank s % P as chunk s / P, where P is the number of lines.
constexpr void table_from_action_csv(ScheduleTable& t, std::string_view csv,
                                     CommSemantics semantics = CommSemantics::buffered) {
  t = ScheduleTable{};
  // First pass: shape (ranks, micro-batches, chunks) and whether communication is explicit.
  int ranks = 0, max_stage = -1, max_mb = -1;
  bool has_comm = false;
  for (std::string_view rest = csv; !rest.empty();) {
    const std::size_t eol = rest.find('\n');
    std::string_view line = rest.substr(0, eol);
    rest = eol == std::string_view::npos ? std::string_view{} : rest.substr(eol + 1);
    if (detail::trim(line).empty()) continue;
    ++ranks;
    for (std::string_view cells = line; !cells.empty();) {
      const std::size_t comma = cells.find(',');
      const std::string_view cell = detail::trim(cells.substr(0, comma));
      cells = comma == std::string_view::npos ? std::string_view{} : cells.substr(comma + 1);
      if (cell.empty()) continue;
      int stage = 0, mb = 0;
      Op op = Op::F;
      if (!parse_action(cell, stage, op, mb)) {
        t.ranks = 1;
        t.error << "mpp: cannot parse action '" << cell << "' in line " << ranks
                << "; expected <stage><F|B|I|W|SEND_F|RECV_F|SEND_B|RECV_B><micro-batch>, e.g. "
                   "1SEND_F0";
        return;
      }
      max_stage = stage > max_stage ? stage : max_stage;
      max_mb = mb > max_mb ? mb : max_mb;
      has_comm = has_comm || is_comm(op);
    }
  }
  const int chunks = ranks > 0 ? max_stage / ranks + 1 : 1;
  detail::init_table(t, "the action CSV", ranks, max_mb + 1, chunks, 1);
  if (!t.ok()) return;
  t.lowered = has_comm;
  t.semantics = semantics;
  int r = 0;
  for (std::string_view rest = csv; !rest.empty();) {
    const std::size_t eol = rest.find('\n');
    std::string_view line = rest.substr(0, eol);
    rest = eol == std::string_view::npos ? std::string_view{} : rest.substr(eol + 1);
    if (detail::trim(line).empty()) continue;
    for (std::string_view cells = line; !cells.empty();) {
      const std::size_t comma = cells.find(',');
      const std::string_view cell = detail::trim(cells.substr(0, comma));
      cells = comma == std::string_view::npos ? std::string_view{} : cells.substr(comma + 1);
      if (cell.empty()) continue;
      int stage = 0, mb = 0;
      Op op = Op::F;
      parse_action(cell, stage, op, mb);
      // The stage decides the chunk; if it does not live on this rank the verifier says so.
      t.push(r, Action{op, mb, stage / ranks, stage, -1});
    }
    ++r;
  }
}

}  // namespace mpp
