#pragma once
// Bringing every rank's step trace to one rank, to draw the whole pipeline's timeline there.
#include <ATen/ops/empty.h>

#include <optional>
#include <vector>

#include "mpp/comm/process_group.hpp"
#include "mpp/trace/event.hpp"

namespace mpp {

namespace detail {
inline constexpr int trace_tag = 1 << 22;  // above every tag a step uses
inline constexpr int trace_header = 8;     // then one field per chunk stage, then the events
inline constexpr int trace_fields = 8;

inline at::Tensor pack_trace(const trace::RankTrace& t) {
  const auto n = static_cast<std::int64_t>(t.events.size());
  const auto chunks = static_cast<std::int64_t>(t.chunk_stages.size());
  at::Tensor out = at::empty({trace_header + chunks + n * trace_fields}, at::kDouble);
  double* p = out.data_ptr<double>();
  p[0] = t.rank;
  p[1] = t.start_us;
  p[2] = t.step_us;
  p[3] = static_cast<double>(t.peak_activation_bytes);
  p[4] = t.peak_in_flight;
  p[5] = static_cast<double>(n);
  p[6] = static_cast<double>(chunks);
  p[7] = t.core_time ? 1.0 : 0.0;
  for (std::int64_t c = 0; c < chunks; ++c)
    p[trace_header + c] = t.chunk_stages[static_cast<std::size_t>(c)];
  for (std::int64_t i = 0; i < n; ++i) {
    const auto& e = t.events[static_cast<std::size_t>(i)];
    double* q = p + trace_header + chunks + i * trace_fields;
    q[0] = static_cast<double>(e.kind);
    q[1] = static_cast<double>(e.op);
    q[2] = e.micro_batch;
    q[3] = e.chunk;
    q[4] = e.peer;
    q[5] = e.begin_us;
    q[6] = e.end_us;
    q[7] = 0.0;
  }
  return out;
}

inline trace::RankTrace unpack_trace(const at::Tensor& packed) {
  const double* p = packed.data_ptr<double>();
  trace::RankTrace t;
  t.rank = static_cast<int>(p[0]);
  t.start_us = p[1];
  t.step_us = p[2];
  t.peak_activation_bytes = static_cast<std::int64_t>(p[3]);
  t.peak_in_flight = static_cast<int>(p[4]);
  const auto n = static_cast<std::int64_t>(p[5]);
  const auto chunks = static_cast<std::int64_t>(p[6]);
  t.core_time = p[7] != 0.0;
  for (std::int64_t c = 0; c < chunks; ++c)
    t.chunk_stages.push_back(static_cast<int>(p[trace_header + c]));
  for (std::int64_t i = 0; i < n; ++i) {
    const double* q = p + trace_header + chunks + i * trace_fields;
    t.events.push_back({static_cast<trace::EventKind>(static_cast<int>(q[0])),
                        static_cast<Op>(static_cast<int>(q[1])), static_cast<std::int32_t>(q[2]),
                        static_cast<std::int32_t>(q[3]), static_cast<std::int32_t>(q[4]), q[5],
                        q[6]});
  }
  return t;
}
}  // namespace detail

/// Every rank calls it with its own trace; `root` gets all of them in rank order, the others
/// get nothing. Blocking p2p with the group's deadline (a missing rank is named).
inline std::optional<std::vector<trace::RankTrace>> gather_traces(const ProcessGroup& group,
                                                                  const trace::RankTrace& mine,
                                                                  int root = 0) {
  const at::Tensor packed = detail::pack_trace(mine);
  if (group.rank() != root) {
    at::Tensor size = at::empty({1}, at::kLong);
    size.fill_(packed.numel());
    group.send(size, root, detail::trace_tag);
    group.send(packed, root, detail::trace_tag + 1);
    return std::nullopt;
  }
  std::vector<trace::RankTrace> all(static_cast<std::size_t>(group.size()));
  for (int r = 0; r < group.size(); ++r) {
    if (r == root) {
      all[static_cast<std::size_t>(r)] = mine;
      continue;
    }
    at::Tensor size = at::empty({1}, at::kLong);
    group.recv(size, r, detail::trace_tag);
    at::Tensor buffer = at::empty({size.item<std::int64_t>()}, at::kDouble);
    group.recv(buffer, r, detail::trace_tag + 1);
    all[static_cast<std::size_t>(r)] = detail::unpack_trace(buffer);
  }
  return all;
}

}  // namespace mpp
