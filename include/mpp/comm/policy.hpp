#pragma once
// Communication policy tags. Torch-free on purpose: schedules, the verifier and the benchmark
// policy lists name these types without pulling in LibTorch. The behaviour behind each tag lives
// in mpp/comm/ headers that do include c10d.
#include <concepts>
#include <cstddef>
#include <string>
#include <string_view>

#include "mpp/schedule/comm_semantics.hpp"

namespace mpp {

/// Backend tag: Gloo over TCP (loopback when every rank shares the host), through c10d's
/// ProcessGroupGloo.
struct Gloo {
  /// Display name, as in "Async<Gloo>".
  static constexpr std::string_view name = "Gloo";
};
/// Backend tag: NCCL, available only when mpp is built with MPP_WITH_NCCL.
struct Nccl {
  /// Display name, as in "Async<Nccl>".
  static constexpr std::string_view name = "Nccl";
};
/// Ranks of one host: send/recv, broadcast, all-reduce, all_gather_runs and reduce_scatter_runs
/// through a shared-memory segment, the other collectives through Gloo (mpp/comm/shm_group.hpp).
/// Refused at creation when the ranks are on several hosts.
struct Shm {
  /// Display name, as in "Async<Shm>".
  static constexpr std::string_view name = "Shm";
  /// Bytes of a tensor copied and reduced per step; the segment holds buffers x ranks of them.
  static constexpr std::size_t chunk_bytes = std::size_t{1} << 20;
  /// Chunks a rank may copy in ahead of the slowest peer.
  static constexpr std::size_t buffers = 4;
  /// Bytes of the ring each rank writes its messages to each other rank into. A send returns
  /// once its message is in the ring, received or not; only what does not fit waits for the
  /// receiver. The segment holds ranks x (ranks - 1) rings.
  static constexpr std::size_t ring_bytes = std::size_t{2} << 20;
  /// Microseconds a rank waiting for a message spins before it sleeps (MPP_SHM_SPIN_US). Longer
  /// than a pipeline stage's wait on the course's model: a sleeping receiver costs its sender a
  /// futex call and itself a wake-up (tens of microseconds each on a VM). A spinning rank yields
  /// its core now and then, for ranks that share it.
  static constexpr long spin_us = 2000;
};

/// A backend tag (Gloo, Nccl, Shm): a type with a static display `name`.
template <class B>
concept comm_backend = requires {
  { B::name } -> std::convertible_to<std::string_view>;
};

/// Blocking point-to-point: every send/recv completes before the next action runs. Its schedules
/// are lowered and proven under rendezvous semantics (a send waits for its receiver), what Gloo
/// does. A Shm send returns sooner (once its message is in the ring) or, for a message larger than
/// the ring, at the latest when the receiver takes it: never later than under rendezvous, so a
/// schedule proven deadlock-free for rendezvous stays so over Shm.
template <comm_backend Backend>
struct Blocking {
  /// The backend tag.
  using backend = Backend;
  /// Schedules are lowered and verified as if every send waited for its receiver.
  static constexpr CommSemantics semantics = CommSemantics::rendezvous;
  /// Display name, as in "Blocking<Gloo>".
  static constexpr std::string_view name = "Blocking";
};

/// Asynchronous point-to-point: receives posted ahead, send handles kept and waited.
template <comm_backend Backend>
struct Async {
  /// The backend tag.
  using backend = Backend;
  /// Schedules are lowered and verified with sends that do not wait for their receiver.
  static constexpr CommSemantics semantics = CommSemantics::buffered;
  /// Display name, as in "Async<Gloo>".
  static constexpr std::string_view name = "Async";
};

/// A comm policy (`Blocking<B>`, `Async<B>`): its backend tag, the semantics its schedules are
/// verified under, and a display name.
template <class C>
concept comm_policy = requires {
  typename C::backend;
  requires comm_backend<typename C::backend>;
  { C::semantics } -> std::convertible_to<CommSemantics>;
  { C::name } -> std::convertible_to<std::string_view>;
};

/// "Async<Gloo>".
template <comm_policy C>
std::string comm_display_name() {
  return std::string(C::name) + "<" + std::string(C::backend::name) + ">";
}

}  // namespace mpp
