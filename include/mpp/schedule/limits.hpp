#pragma once
// The capacity limits of a schedule table: a table is plain arrays so that it can be constexpr
// data. Beyond them a generator or make_plan() reports an error naming the limit.

namespace mpp {

inline constexpr int max_ranks = 32;           ///< pipeline ranks P
inline constexpr int max_chunks_per_rank = 8;  ///< V
/// Global stages P * V.
inline constexpr int max_stages = max_ranks * max_chunks_per_rank;
/// Compute and communication actions of one rank. The worst case is 7 * V * M actions (ZB-H1
/// lowered: F, I, W and four comm ops), so any schedule with V * M <= 146 fits; 1F1B/GPipe
/// lowered need 6 * V * M.
inline constexpr int max_actions_per_rank = 1024;

}  // namespace mpp
