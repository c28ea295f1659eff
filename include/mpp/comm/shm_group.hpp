#pragma once
// The Shm backend: ranks of one host exchange tensors through a shared-memory segment instead of
// TCP over loopback, where every byte crosses the kernel twice each way, a message waits tens of
// microseconds for Gloo's threads to wake, and those threads compete with compute for the cores.
// send/recv and broadcast go through one ring per ordered pair of ranks (shm_mailbox.hpp:
// a few microseconds from send to a waiting receiver); all-reduce, all_gather_runs and
// reduce_scatter_runs through the chunk buffers described below. Every other operation
// (barrier, gathers, scatters, and all-reduces of other dtypes or of bitwise ops) goes to an
// inner Gloo group, built exactly as the Gloo backend builds it.
//
// all_gather_runs() goes through the segment as well: every rank owns one run of a flat tensor
// (ZeRO's parameter shards) and every rank ends with every owner's run, each byte copied once in
// and once out instead of being reduced with zeros from the other ranks.
//
// An all-reduce runs on the group's worker thread, in submission order. The tensor is cut into
// chunks of Shm::chunk_bytes; chunk k uses buffer k % Shm::buffers of the segment, which holds
// one slot per rank:
//   1. copy my piece of chunk k into my slot (once every rank has finished reading what that
//      buffer held Shm::buffers chunks ago), then publish arrived[me] = k; copy further chunks
//      in the same way while buffers are free, so a late peer finds them ready;
//   2. wait until every rank has arrived at k;
//   3. reduce the whole chunk from every slot, in rank order, straight into my tensor, then
//      publish consumed[me] = k.
// Every rank runs the same code on the same bytes in the same order: replicas get the same bits.
// For 2 ranks this moves less memory than each rank reducing a 1/world slice into a shared
// result that all then copy out (3 reads + 2 writes per element instead of 3 + 2.5), and it
// needs one rendezvous per chunk instead of two: on 2 cores shared with compute, where a peer's
// worker is often not running at the moment it is waited for, that decides the step time
// (docs/13-ddp.md). The counters only grow (sequence numbers), so nothing is reset between
// collectives. Every wait spins briefly, then sleeps on a futex in short slices until the group's
// deadline; a peer whose process is gone is noticed within ~0.1 s and named.
//
// The segment (/dev/shm/mpp-shm-<pid>-<random>) is created by rank 0 and unlinked as soon as every
// rank has mapped it, so nothing is left behind however the job ends afterwards (shm_segment.hpp).
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty_like.h>
#include <c10/util/BFloat16.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <fcntl.h>
#include <linux/futex.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <fstream>
#include <memory>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include "mpp/comm/backend.hpp"
#include "mpp/comm/error.hpp"
#include "mpp/comm/owned_runs.hpp"
#include "mpp/comm/policy.hpp"
#include "mpp/comm/shm_mailbox.hpp"
#include "mpp/comm/shm_reduce.hpp"
#include "mpp/comm/shm_segment.hpp"
#include "mpp/comm/shm_work.hpp"
#include "mpp/config.hpp"
#include "mpp/error.hpp"

namespace mpp {

/// How a ShmProcessGroup is laid out and waits; every rank of a group passes the same.
struct ShmOptions {
  /// Bytes of a tensor copied and reduced per step: a multiple of 64, at least 4096.
  std::size_t chunk_bytes = Shm::chunk_bytes;
  /// Chunks a rank may copy in ahead of the slowest peer: 2 to 16.
  std::size_t buffers = Shm::buffers;
  /// Bytes of the ring from one rank to another: a multiple of 64, at least 4096.
  std::size_t ring_bytes = Shm::ring_bytes;
  /// How long a waiting rank spins before it sleeps; MPP_SHM_SPIN_US overrides it.
  std::chrono::microseconds spin{Shm::spin_us};
};

/// A c10d process group for ranks of one host: send, recv and broadcast of any CPU tensor,
/// all-reduce of CPU float32/float64/bfloat16 with sum, avg, product, min or max,
/// all_gather_runs and reduce_scatter_runs, through shared memory; everything else through
/// `inner` (Gloo).
class ShmProcessGroup : public c10d::ProcessGroup {
 public:
  /// A collective: every rank of the group constructs it with the same store and options.
  MPP_DECL ShmProcessGroup(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                           c10::intrusive_ptr<c10d::ProcessGroup> inner, ShmOptions options,
                           std::chrono::milliseconds timeout);

  /// Lets the worker thread finish the queued work, then stops it.
  MPP_DECL ~ShmProcessGroup() override;

  /// "mpp-shm".
  const std::string getBackendName() const override { return "mpp-shm"; }

  /// The segment's name under /dev/shm (already unlinked once the group exists); empty for 1 rank.
  std::string segment_name() const { return segment_ ? segment_->name() : std::string(); }
  /// The Gloo group that runs what shared memory does not.
  c10d::ProcessGroup& inner() const { return *inner_; }
  /// Bytes per chunk of an all-reduce (ShmOptions::chunk_bytes).
  std::size_t chunk_bytes() const { return layout_.chunk_bytes; }

  /// Whether an all-reduce goes through shared memory (the same answer on every rank, since the
  /// ranks pass tensors of the same dtype and the same op).
  MPP_DECL bool handles(const std::vector<at::Tensor>& tensors,
                        const c10d::AllreduceOptions& opts) const;

  /// Through shared memory when handles() says so (queued to the worker thread, run in submission
  /// order); otherwise the inner Gloo group's.
  MPP_DECL c10::intrusive_ptr<c10d::Work> allreduce(
      std::vector<at::Tensor>& tensors,
      const c10d::AllreduceOptions& opts = c10d::AllreduceOptions()) override;

  /// Waits for the all-reduces submitted before it, then for Gloo's barrier (c10d's contract:
  /// a barrier completes after the group's earlier collectives).
  MPP_DECL c10::intrusive_ptr<c10d::Work> barrier(
      const c10d::BarrierOptions& opts = c10d::BarrierOptions()) override;

  /// Every rank owns one run of `flat`, `runs[r]` = {offset, numel} for rank r (the same list on
  /// every rank, the runs tiling `flat`; a run may be empty); when the work completes, every
  /// rank's `flat` holds every owner's run, bit for bit. In place, through the segment: the owner
  /// copies its run in, the others copy it out. Any dtype (bytes are copied). Bad arguments throw
  /// std::invalid_argument (detail::check_owned_runs) before anything is queued.
  MPP_DECL c10::intrusive_ptr<c10d::Work> all_gather_runs(
      const at::Tensor& flat, std::vector<std::pair<std::int64_t, std::int64_t>> runs);

  /// Every rank owns one run of `flat` as in all_gather_runs; when the work completes, each
  /// rank's own run holds the reduction (`op`) of every rank's `flat` over that run, the same
  /// bits an all-reduce gives; outside its run a rank's `flat` is left as it was. Each rank reads
  /// only its own run of the others' tensors: half an all-reduce's memory traffic on 2 ranks.
  /// float, double, bfloat16; sum, avg, product, min, max (handles(), as the all-reduce).
  MPP_DECL c10::intrusive_ptr<c10d::Work> reduce_scatter_runs(
      const at::Tensor& flat, std::vector<std::pair<std::int64_t, std::int64_t>> runs,
      const c10d::ReduceOp& op);

  // ---- everything else is Gloo's -------------------------------------------------------------
  /// The inner Gloo group's allreduce_coalesced.
  MPP_DECL c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors,
      const c10d::AllreduceCoalescedOptions& opts = c10d::AllreduceCoalescedOptions()) override;
  /// The inner Gloo group's reduce.
  MPP_DECL c10::intrusive_ptr<c10d::Work> reduce(
      std::vector<at::Tensor>& tensors,
      const c10d::ReduceOptions& opts = c10d::ReduceOptions()) override;
  /// The inner Gloo group's allgather.
  MPP_DECL c10::intrusive_ptr<c10d::Work> allgather(
      std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  /// The inner Gloo group's _allgather_base.
  MPP_DECL c10::intrusive_ptr<c10d::Work> _allgather_base(
      at::Tensor& output, at::Tensor& input,
      const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  /// The inner Gloo group's allgather_coalesced.
  MPP_DECL c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  /// The inner Gloo group's gather.
  MPP_DECL c10::intrusive_ptr<c10d::Work> gather(
      std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::GatherOptions& opts = c10d::GatherOptions()) override;
  /// The inner Gloo group's scatter.
  MPP_DECL c10::intrusive_ptr<c10d::Work> scatter(
      std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
      const c10d::ScatterOptions& opts = c10d::ScatterOptions()) override;
  /// The inner Gloo group's reduce_scatter.
  MPP_DECL c10::intrusive_ptr<c10d::Work> reduce_scatter(
      std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
      const c10d::ReduceScatterOptions& opts = c10d::ReduceScatterOptions()) override;
  /// The inner Gloo group's _reduce_scatter_base.
  MPP_DECL c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input,
      const c10d::ReduceScatterOptions& opts = c10d::ReduceScatterOptions()) override;
  /// The inner Gloo group's alltoall_base.
  MPP_DECL c10::intrusive_ptr<c10d::Work> alltoall_base(
      at::Tensor& output, at::Tensor& input, std::vector<int64_t>& output_counts,
      std::vector<int64_t>& input_counts,
      const c10d::AllToAllOptions& opts = c10d::AllToAllOptions()) override;
  /// The inner Gloo group's alltoall.
  MPP_DECL c10::intrusive_ptr<c10d::Work> alltoall(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllToAllOptions& opts = c10d::AllToAllOptions()) override;
  /// The inner Gloo group's monitoredBarrier.
  MPP_DECL void monitoredBarrier(const c10d::BarrierOptions& opts,
                                 bool wait_all_ranks = false) override;
  /// The inner Gloo group's setSequenceNumberForGroup.
  void setSequenceNumberForGroup() override { inner_->setSequenceNumberForGroup(); }
  /// The inner Gloo group's getSequenceNumberForGroup.
  uint64_t getSequenceNumberForGroup() override { return inner_->getSequenceNumberForGroup(); }

  // ---- point to point and broadcast through the rings ------------------------------------------
  /// Completes once the tensor's bytes are in the ring to `dst` (at once when they fit); the
  /// tensor is read in place until then. Matched by `dst`'s recv(src = this rank, tag), in order.
  MPP_DECL c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst,
                                               int tag) override;
  /// Receives `src`'s send with the same `tag`, in order, through the ring; a non-contiguous tensor
  /// is filled when the wait returns. One dense CPU tensor (std::invalid_argument otherwise).
  MPP_DECL c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src,
                                               int tag) override;
  /// Not supported over Shm: throws std::invalid_argument.
  MPP_DECL c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>&, int) override;
  /// The root sends its tensor to every other rank through the rings.
  MPP_DECL c10::intrusive_ptr<c10d::Work> broadcast(
      std::vector<at::Tensor>& tensors,
      const c10d::BroadcastOptions& opts = c10d::BroadcastOptions()) override;

 private:
  using RankBlock = detail::shm::RankBlock;
  using Counter = detail::shm::Counter;

  static const at::Tensor& single_cpu_tensor(const std::vector<at::Tensor>& tensors,
                                             const char* op) {
    if (tensors.size() != 1 || !tensors.front().defined() || !tensors.front().device().is_cpu() ||
        tensors.front().is_sparse())
      throw InvalidArgument(std::string("mpp: ") + op + " over Shm takes one dense CPU tensor");
    return tensors.front();
  }

  MPP_DECL c10::intrusive_ptr<c10d::Work> mail_work(
      c10d::OpType type, std::vector<std::shared_ptr<detail::shm::MailOp>> ops,
      at::Tensor target = {});

  RankBlock& block(int q) const {
    return reinterpret_cast<RankBlock*>(segment_->base() + layout_.blocks)[q];
  }
  char* slot(std::uint32_t chunk, int q) const {
    const std::size_t buffer = chunk % layout_.buffers;
    return segment_->base() + layout_.data +
           (buffer * static_cast<std::size_t>(size_) + static_cast<std::size_t>(q)) *
               layout_.chunk_bytes;
  }

  MPP_DECL void enqueue(const c10::intrusive_ptr<ShmWork>& work);

  MPP_DECL void run();

  MPP_DECL void publish(Counter& counter, std::uint32_t value);

  /// Waits until every peer's `which` counter reaches `target`: spins briefly, then sleeps on
  /// the futex in slices, checking the deadline, the peers' processes and the group's end.
  MPP_DECL void wait_all(Counter RankBlock::*which, std::uint32_t target, const char* verb,
                         const ShmWork& work, std::size_t chunk, std::size_t chunks);

  static std::string name(const ShmWork& work) {
    return std::string(detail::shm::kind_name(work.kind_)) + " #" + std::to_string(work.number());
  }

  MPP_DECL std::string describe(const ShmWork& work) const;

  /// Moves `work.data_` through the segment chunk by chunk (Shm::chunk_bytes each, the same
  /// chunking on every rank): `fill(c, slot)` puts this rank's part of chunk c into its slot,
  /// `consume(c, k)` reads every rank's slot of chunk number k once all have arrived.
  template <class Fill, class Consume>
  void exchange(ShmWork& work, const detail::shm::ChunkTag& tag, Fill fill, Consume consume);

  MPP_DECL void all_reduce(ShmWork& work);

  /// What an all-gather or reduce-scatter of owned runs works with: the tensor's bytes, its
  /// chunks with every rank's run in each, and the tag its chunks carry.
  struct RunsWork {
    char* bytes;
    std::size_t element;
    detail::shm::RunsByChunk chunks;
    detail::shm::ChunkTag tag;
  };
  MPP_DECL RunsWork runs_work(const ShmWork& work, detail::shm::Kind kind,
                              std::int32_t reduce) const;

  MPP_DECL void all_gather(ShmWork& work);

  MPP_DECL void reduce_scatter(ShmWork& work);

  /// Whether every peer's `which` counter has reached `target` (no waiting).
  MPP_DECL bool all_reached(Counter RankBlock::*which, std::uint32_t target) const;

  c10::intrusive_ptr<c10d::ProcessGroup> inner_;
  detail::shm::Layout layout_;
  std::chrono::milliseconds timeout_;
  std::shared_ptr<detail::shm::Segment> segment_;
  std::shared_ptr<detail::shm::Mailbox> mailbox_;  // send, recv, broadcast
  std::uint32_t broadcasts_ = 0;                   // broadcasts posted on this group
  std::vector<bool> watchable_;                    // peers whose process this rank can see
  std::shared_ptr<detail::shm::Progress> progress_;

  // caller side
  std::uint64_t submitted_ = 0;

  // worker side
  std::uint32_t next_chunk_ = 1;  // counters start at 0: the first chunk is 1
  std::string failure_;
  std::vector<float> scratch_;

  std::mutex queue_mutex_;
  std::condition_variable queue_cv_;
  std::deque<c10::intrusive_ptr<ShmWork>> queue_;
  std::atomic<bool> stopping_{false};
  std::thread worker_;
};

/// Shm: a ShmProcessGroup over an inner Gloo group, for ranks of one host.
template <>
struct backend_traits<Shm> {
  /// The name the group reports (getBackendName()).
  static constexpr std::string_view c10d_name = "mpp-shm";
  /// The c10d group make() returns (Group<Shm>::backend_group()).
  using group_type = ShmProcessGroup;

  /// Every rank's run of `flat` to every rank, through the segment: each run copied in once by its
  /// owner and out once by the others. `pg` is a group this backend made.
  MPP_DECL static c10::intrusive_ptr<c10d::Work> all_gather_runs(
      c10d::ProcessGroup& pg, const at::Tensor& flat,
      const std::vector<std::pair<std::int64_t, std::int64_t>>& runs);

  /// Each rank's own run of the reduction, through the segment; no work (the caller all-reduces)
  /// for a dtype or op the segment does not reduce. `pg` is a group this backend made.
  MPP_DECL static c10::intrusive_ptr<c10d::Work> reduce_scatter_runs(
      c10d::ProcessGroup& pg, const at::Tensor& flat,
      const std::vector<std::pair<std::int64_t, std::int64_t>>& runs, c10d::ReduceOp op);

  /// The inner Gloo group's device: loopback, since the ranks share this host.
  static std::shared_ptr<::gloo::transport::Device> device(const Environment& env,
                                                           const CommOptions& opts) {
    return backend_traits<Gloo>::device(env, opts);
  }

  /// Checks that every rank is on this host (CommError naming the ranks otherwise), then connects
  /// the inner Gloo group and maps the shared segment (a collective: every rank calls it).
  MPP_DECL static c10::intrusive_ptr<c10d::ProcessGroup> make(
      const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
      const std::shared_ptr<::gloo::transport::Device>& device, std::chrono::milliseconds timeout);
};

}  // namespace mpp

#ifndef MPP_SEPARATE_COMPILATION
#include "mpp/comm/impl/shm_group.ipp"
#endif
