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
  ShmProcessGroup(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                  c10::intrusive_ptr<c10d::ProcessGroup> inner, ShmOptions options,
                  std::chrono::milliseconds timeout)
      : c10d::ProcessGroup(rank, size),
        inner_(std::move(inner)),
        layout_(options.chunk_bytes, options.buffers, options.ring_bytes, size),
        timeout_(timeout),
        progress_(std::make_shared<detail::shm::Progress>()) {
    if (options.buffers < 2 || options.buffers > detail::shm::max_buffers)
      throw InvalidArgument("mpp: Shm::buffers must be between 2 and " +
                            std::to_string(detail::shm::max_buffers) + " (got " +
                            std::to_string(options.buffers) + ")");
    if (options.chunk_bytes < 4096 || options.chunk_bytes % 64 != 0)
      throw InvalidArgument(
          "mpp: Shm::chunk_bytes must be a multiple of 64 and at least 4096 (got " +
          std::to_string(options.chunk_bytes) + ")");
    if (options.ring_bytes < 4096 || options.ring_bytes % 64 != 0)
      throw InvalidArgument(
          "mpp: Shm::ring_bytes must be a multiple of 64 and at least 4096 (got " +
          std::to_string(options.ring_bytes) + ")");
    if (size > 1) {
      segment_ = detail::shm::open_segment(*store, rank, size, layout_, timeout);
      for (int q = 0; q < size; ++q) {
        const std::int32_t pid = block(q).pid;
        // A peer in another pid namespace cannot be watched; it is still bounded by the deadline.
        watchable_.push_back(pid > 0 && (::kill(pid, 0) == 0 || errno == EPERM));
      }
      mailbox_ = std::make_shared<detail::shm::Mailbox>(segment_, layout_, rank, size, watchable_,
                                                        detail::shm::spin_from_env(options.spin));
      worker_ = std::thread([this] { run(); });
    }
    init();
  }

  /// Lets the worker thread finish the queued work, then stops it.
  ~ShmProcessGroup() override {
    {
      std::lock_guard<std::mutex> lock(queue_mutex_);
      stopping_ = true;
    }
    queue_cv_.notify_all();
    if (worker_.joinable()) worker_.join();
  }

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
  bool handles(const std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) const {
    if (size_ == 1 || tensors.size() != 1) return false;
    const at::Tensor& t = tensors.front();
    if (!t.defined() || !t.device().is_cpu() || t.layout() != at::kStrided) return false;
    const auto dtype = t.scalar_type();
    if (dtype != at::kFloat && dtype != at::kDouble && dtype != at::kBFloat16) return false;
    switch (opts.reduceOp.op_) {
      case detail::shm::RedOp::SUM:
      case detail::shm::RedOp::AVG:
      case detail::shm::RedOp::PRODUCT:
      case detail::shm::RedOp::MIN:
      case detail::shm::RedOp::MAX:
        return true;
      default:
        return false;
    }
  }

  /// Through shared memory when handles() says so (queued to the worker thread, run in submission
  /// order); otherwise the inner Gloo group's.
  c10::intrusive_ptr<c10d::Work> allreduce(
      std::vector<at::Tensor>& tensors,
      const c10d::AllreduceOptions& opts = c10d::AllreduceOptions()) override {
    if (!handles(tensors, opts)) return inner_->allreduce(tensors, opts);
    const at::Tensor& t = tensors.front();
    auto work =
        c10::make_intrusive<ShmWork>(rank_, c10d::OpType::ALLREDUCE, ++submitted_, progress_);
    work->op_ = opts.reduceOp.op_;
    if (t.is_contiguous()) {
      work->data_ = t;
    } else {  // reduced in a contiguous copy, written back by the worker
      work->data_ = t.contiguous();
      work->target_ = t;
    }
    enqueue(work);
    return work;
  }

  /// Waits for the all-reduces submitted before it, then for Gloo's barrier (c10d's contract:
  /// a barrier completes after the group's earlier collectives).
  c10::intrusive_ptr<c10d::Work> barrier(
      const c10d::BarrierOptions& opts = c10d::BarrierOptions()) override {
    if (!worker_.joinable()) return inner_->barrier(opts);
    auto work = c10::make_intrusive<ShmWork>(rank_, c10d::OpType::BARRIER, submitted_, progress_);
    work->barrier_ = true;
    work->barrier_options_ = opts;
    enqueue(work);
    return work;
  }

  /// Every rank owns one run of `flat`, `runs[r]` = {offset, numel} for rank r (the same list on
  /// every rank, the runs tiling `flat`; a run may be empty); when the work completes, every
  /// rank's `flat` holds every owner's run, bit for bit. In place, through the segment: the owner
  /// copies its run in, the others copy it out. Any dtype (bytes are copied). Bad arguments throw
  /// std::invalid_argument (detail::check_owned_runs) before anything is queued.
  c10::intrusive_ptr<c10d::Work> all_gather_runs(
      const at::Tensor& flat, std::vector<std::pair<std::int64_t, std::int64_t>> runs) {
    detail::check_owned_runs(flat, runs, size_);
    if (!flat.device().is_cpu())
      throw InvalidArgument("mpp: all_gather_runs over shared memory needs a CPU tensor (got " +
                            flat.device().str() + ")");
    auto work =
        c10::make_intrusive<ShmWork>(rank_, c10d::OpType::ALLGATHER, ++submitted_, progress_);
    work->kind_ = detail::shm::Kind::all_gather;
    work->data_ = flat;
    work->runs_ = std::move(runs);
    if (!worker_.joinable()) {  // one rank: it owns everything there is
      work->data_ = at::Tensor();
      work->complete(nullptr);
      return work;
    }
    enqueue(work);
    return work;
  }

  /// Every rank owns one run of `flat` as in all_gather_runs; when the work completes, each
  /// rank's own run holds the reduction (`op`) of every rank's `flat` over that run, the same
  /// bits an all-reduce gives; outside its run a rank's `flat` is left as it was. Each rank reads
  /// only its own run of the others' tensors: half an all-reduce's memory traffic on 2 ranks.
  /// float, double, bfloat16; sum, avg, product, min, max (handles(), as the all-reduce).
  c10::intrusive_ptr<c10d::Work> reduce_scatter_runs(
      const at::Tensor& flat, std::vector<std::pair<std::int64_t, std::int64_t>> runs,
      const c10d::ReduceOp& op) {
    detail::check_owned_runs(flat, runs, size_, "reduce_scatter_runs");
    std::vector<at::Tensor> one{flat};
    c10d::AllreduceOptions opts;
    opts.reduceOp = op;
    if (!handles(one, opts))
      throw InvalidArgument(
          "mpp: reduce_scatter_runs over shared memory takes a CPU float, double or bfloat16 "
          "tensor on 2 or more ranks and sum, avg, product, min or max (got " +
          std::string(c10::toString(flat.scalar_type())) + " on " + flat.device().str() +
          "); use ProcessGroup::reduce_scatter_runs, which falls back to an all-reduce");
    auto work =
        c10::make_intrusive<ShmWork>(rank_, c10d::OpType::REDUCE_SCATTER, ++submitted_, progress_);
    work->kind_ = detail::shm::Kind::reduce_scatter;
    work->op_ = op.op_;
    work->data_ = flat;
    work->runs_ = std::move(runs);
    enqueue(work);
    return work;
  }

  // ---- everything else is Gloo's -------------------------------------------------------------
  /// The inner Gloo group's allreduce_coalesced.
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors,
      const c10d::AllreduceCoalescedOptions& opts = c10d::AllreduceCoalescedOptions()) override {
    return inner_->allreduce_coalesced(tensors, opts);
  }
  /// The inner Gloo group's reduce.
  c10::intrusive_ptr<c10d::Work> reduce(
      std::vector<at::Tensor>& tensors,
      const c10d::ReduceOptions& opts = c10d::ReduceOptions()) override {
    return inner_->reduce(tensors, opts);
  }
  /// The inner Gloo group's allgather.
  c10::intrusive_ptr<c10d::Work> allgather(
      std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override {
    return inner_->allgather(outputs, inputs, opts);
  }
  /// The inner Gloo group's _allgather_base.
  c10::intrusive_ptr<c10d::Work> _allgather_base(
      at::Tensor& output, at::Tensor& input,
      const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override {
    return inner_->_allgather_base(output, input, opts);
  }
  /// The inner Gloo group's allgather_coalesced.
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override {
    return inner_->allgather_coalesced(outputs, inputs, opts);
  }
  /// The inner Gloo group's gather.
  c10::intrusive_ptr<c10d::Work> gather(
      std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::GatherOptions& opts = c10d::GatherOptions()) override {
    return inner_->gather(outputs, inputs, opts);
  }
  /// The inner Gloo group's scatter.
  c10::intrusive_ptr<c10d::Work> scatter(
      std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
      const c10d::ScatterOptions& opts = c10d::ScatterOptions()) override {
    return inner_->scatter(outputs, inputs, opts);
  }
  /// The inner Gloo group's reduce_scatter.
  c10::intrusive_ptr<c10d::Work> reduce_scatter(
      std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
      const c10d::ReduceScatterOptions& opts = c10d::ReduceScatterOptions()) override {
    return inner_->reduce_scatter(outputs, inputs, opts);
  }
  /// The inner Gloo group's _reduce_scatter_base.
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input,
      const c10d::ReduceScatterOptions& opts = c10d::ReduceScatterOptions()) override {
    return inner_->_reduce_scatter_base(output, input, opts);
  }
  /// The inner Gloo group's alltoall_base.
  c10::intrusive_ptr<c10d::Work> alltoall_base(
      at::Tensor& output, at::Tensor& input, std::vector<int64_t>& output_counts,
      std::vector<int64_t>& input_counts,
      const c10d::AllToAllOptions& opts = c10d::AllToAllOptions()) override {
    return inner_->alltoall_base(output, input, output_counts, input_counts, opts);
  }
  /// The inner Gloo group's alltoall.
  c10::intrusive_ptr<c10d::Work> alltoall(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllToAllOptions& opts = c10d::AllToAllOptions()) override {
    return inner_->alltoall(outputs, inputs, opts);
  }
  /// The inner Gloo group's monitoredBarrier.
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks = false) override {
    inner_->monitoredBarrier(opts, wait_all_ranks);
  }
  /// The inner Gloo group's setSequenceNumberForGroup.
  void setSequenceNumberForGroup() override { inner_->setSequenceNumberForGroup(); }
  /// The inner Gloo group's getSequenceNumberForGroup.
  uint64_t getSequenceNumberForGroup() override { return inner_->getSequenceNumberForGroup(); }

  // ---- point to point and broadcast through the rings ------------------------------------------
  /// Completes once the tensor's bytes are in the ring to `dst` (at once when they fit); the
  /// tensor is read in place until then. Matched by `dst`'s recv(src = this rank, tag), in order.
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override {
    const at::Tensor& t = single_cpu_tensor(tensors, "send");
    if (!mailbox_) return inner_->send(tensors, dst, tag);  // a group of one: refused by Gloo
    const at::Tensor wire = t.is_contiguous() ? t : t.contiguous();
    return mail_work(c10d::OpType::SEND,
                     {mailbox_->post_send(wire, dst, detail::shm::MessageKind::p2p, tag)});
  }
  /// Receives `src`'s send with the same `tag`, in order, through the ring; a non-contiguous tensor
  /// is filled when the wait returns. One dense CPU tensor (std::invalid_argument otherwise).
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override {
    const at::Tensor& t = single_cpu_tensor(tensors, "recv");
    if (!mailbox_) return inner_->recv(tensors, src, tag);
    const bool in_place = t.is_contiguous();
    const at::Tensor wire = in_place ? t : at::empty_like(t, at::MemoryFormat::Contiguous);
    return mail_work(c10d::OpType::RECV,
                     {mailbox_->post_recv(wire, src, detail::shm::MessageKind::p2p, tag)},
                     in_place ? at::Tensor() : t);
  }
  /// Not supported over Shm: throws std::invalid_argument.
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>&, int) override {
    throw InvalidArgument(
        "mpp: a receive from any source is not supported over Shm; name the sender (recv(tensor, "
        "src, tag))");
  }
  /// The root sends its tensor to every other rank through the rings.
  c10::intrusive_ptr<c10d::Work> broadcast(
      std::vector<at::Tensor>& tensors,
      const c10d::BroadcastOptions& opts = c10d::BroadcastOptions()) override {
    if (!mailbox_ || tensors.size() != 1 || !tensors.front().device().is_cpu() ||
        tensors.front().is_sparse())
      return inner_->broadcast(tensors, opts);
    const at::Tensor& t = tensors.front();
    const int tag = static_cast<int>(++broadcasts_ & 0x7fffffffU);
    const auto kind = detail::shm::MessageKind::broadcast;
    const bool in_place = t.is_contiguous();
    const at::Tensor wire = in_place ? t : t.contiguous();
    std::vector<std::shared_ptr<detail::shm::MailOp>> ops;
    if (opts.rootRank == rank_) {
      for (int q = 0; q < size_; ++q)
        if (q != rank_) ops.push_back(mailbox_->post_send(wire, q, kind, tag));
      return mail_work(c10d::OpType::BROADCAST, std::move(ops));
    }
    ops.push_back(mailbox_->post_recv(wire, opts.rootRank, kind, tag));
    return mail_work(c10d::OpType::BROADCAST, std::move(ops), in_place ? at::Tensor() : t);
  }

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

  c10::intrusive_ptr<c10d::Work> mail_work(c10d::OpType type,
                                           std::vector<std::shared_ptr<detail::shm::MailOp>> ops,
                                           at::Tensor target = {}) {
    return c10::make_intrusive<ShmMailWork>(rank_, type, mailbox_, std::move(ops), timeout_,
                                            std::move(target));
  }

  RankBlock& block(int q) const {
    return reinterpret_cast<RankBlock*>(segment_->base() + layout_.blocks)[q];
  }
  char* slot(std::uint32_t chunk, int q) const {
    const std::size_t buffer = chunk % layout_.buffers;
    return segment_->base() + layout_.data +
           (buffer * static_cast<std::size_t>(size_) + static_cast<std::size_t>(q)) *
               layout_.chunk_bytes;
  }

  void enqueue(const c10::intrusive_ptr<ShmWork>& work) {
    {
      std::lock_guard<std::mutex> lock(queue_mutex_);
      queue_.push_back(work);
    }
    queue_cv_.notify_one();
  }

  void run() {
    // The worker needs little CPU but needs it at once: a peer waits on every chunk it holds
    // back. A higher priority lets it preempt this rank's compute when woken (needs
    // CAP_SYS_NICE; without it the worker runs at the default priority).
    ::setpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid)), -10);
    for (;;) {
      c10::intrusive_ptr<ShmWork> work;
      {
        std::unique_lock<std::mutex> lock(queue_mutex_);
        queue_cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;
        work = queue_.front();
        queue_.pop_front();
      }
      std::exception_ptr error;
      try {
        if (work->barrier_) {
          inner_->barrier(work->barrier_options_)->wait();
        } else {
          {
            std::lock_guard<std::mutex> lock(progress_->mutex);
            progress_->running = work->number();
            progress_->running_kind = detail::shm::kind_name(work->kind_);
          }
          if (!failure_.empty())
            throw RuntimeError("mpp: " + name(*work) +
                               " over shared memory was not run: an earlier one failed (" +
                               failure_ + ")");
          if (work->kind_ == detail::shm::Kind::all_gather)
            all_gather(*work);
          else if (work->kind_ == detail::shm::Kind::reduce_scatter)
            reduce_scatter(*work);
          else
            all_reduce(*work);
          if (work->target_.defined()) work->target_.copy_(work->data_);
        }
      } catch (const std::exception& e) {
        // After a failure the ranks' counters disagree: the segment cannot be used again.
        if (!work->barrier_ && failure_.empty()) failure_ = e.what();
        error = std::current_exception();
      }
      work->data_ = at::Tensor();
      work->target_ = at::Tensor();
      work->complete(error);
    }
  }

  void publish(Counter& counter, std::uint32_t value) {
    counter.value.store(value, std::memory_order_release);
    detail::shm::futex_wake_all(counter.value);
  }

  /// Waits until every peer's `which` counter reaches `target`: spins briefly, then sleeps on
  /// the futex in slices, checking the deadline, the peers' processes and the group's end.
  void wait_all(Counter RankBlock::*which, std::uint32_t target, const char* verb,
                const ShmWork& work, std::size_t chunk, std::size_t chunks) {
    using namespace std::chrono;
    auto behind = [&](int q) {
      return !detail::shm::reached((block(q).*which).value.load(std::memory_order_acquire), target);
    };
    bool late = false;
    for (int q = 0; q < size_; ++q) {
      if (q == rank_) continue;
      for (int spin = 0; spin < 2000 && behind(q); ++spin) detail::shm::cpu_relax();
      late = late || behind(q);
    }
    if (!late) return;

    const auto start = detail::shm::Clock::now();
    const auto deadline = start + timeout_;
    auto next_check = start + milliseconds(100);
    const std::string where = "chunk " + std::to_string(chunk + 1) + " of " +
                              std::to_string(chunks) + " of " + describe(work);
    for (;;) {
      std::vector<int> missing;
      for (int q = 0; q < size_; ++q)
        if (q != rank_ && behind(q)) missing.push_back(q);
      if (missing.empty()) break;
      {
        std::lock_guard<std::mutex> lock(progress_->mutex);
        progress_->waiting =
            "waiting for rank(s) " + detail::shm::rank_list(missing) + " to " + verb + " " + where;
      }
      const auto now = detail::shm::Clock::now();
      if (stopping_)
        throw RuntimeError("mpp: " + name(work) +
                           " over shared memory was abandoned: the process group was "
                           "destroyed while waiting for rank(s) " +
                           detail::shm::rank_list(missing));
      if (now >= deadline)
        throw RuntimeError(
            "mpp: " + name(work) + " over shared memory timed out: rank(s) " +
            detail::shm::rank_list(missing) + " did not " + verb + " " + where + " within " +
            detail::shm::duration_text(timeout_) +
            "; they are stuck, dead, or calling collectives in another order (raise the deadline "
            "with MPP_TIMEOUT_S if they are just slow)");
      if (now >= next_check) {
        next_check = now + milliseconds(100);
        for (int q : missing)
          if (watchable_[static_cast<std::size_t>(q)] && detail::shm::process_gone(block(q).pid))
            throw RuntimeError("mpp: " + name(work) + " over shared memory: rank " +
                               std::to_string(q) + " (process " + std::to_string(block(q).pid) +
                               ") exited before it could " + verb + " " + where +
                               "; look at its log");
      }
      auto& word = (block(missing.front()).*which).value;
      const std::uint32_t seen = word.load(std::memory_order_acquire);
      if (detail::shm::reached(seen, target)) continue;
      const auto slice = std::min<detail::shm::Clock::duration>(milliseconds(20), deadline - now);
      detail::shm::futex_wait(word, seen,
                              std::max(duration_cast<microseconds>(slice), microseconds(1)));
    }
    std::lock_guard<std::mutex> lock(progress_->mutex);
    progress_->waiting.clear();
  }

  static std::string name(const ShmWork& work) {
    return std::string(detail::shm::kind_name(work.kind_)) + " #" + std::to_string(work.number());
  }

  std::string describe(const ShmWork& work) const {
    const std::string what = c10::toString(work.data_.scalar_type()) + std::string("[") +
                             std::to_string(work.data_.numel()) + "]";
    if (work.kind_ == detail::shm::Kind::all_gather) return name(work) + " (" + what + ")";
    return name(work) + " (" + what + " " + detail::shm::op_text(work.op_) + ")";
  }

  /// Moves `work.data_` through the segment chunk by chunk (Shm::chunk_bytes each, the same
  /// chunking on every rank): `fill(c, slot)` puts this rank's part of chunk c into its slot,
  /// `consume(c, k)` reads every rank's slot of chunk number k once all have arrived.
  template <class Fill, class Consume>
  void exchange(ShmWork& work, const detail::shm::ChunkTag& tag, Fill fill, Consume consume) {
    const std::size_t element = work.data_.element_size();
    const std::size_t numel = static_cast<std::size_t>(work.data_.numel());
    if (numel == 0) return;
    const std::size_t per_chunk = layout_.chunk_bytes / element;
    const std::size_t chunks = (numel + per_chunk - 1) / per_chunk;
    const std::uint32_t first = next_chunk_;
    next_chunk_ += static_cast<std::uint32_t>(chunks);
    RankBlock& mine = block(rank_);

    const auto depth = static_cast<std::uint32_t>(layout_.buffers);
    std::size_t copied = 0;  // chunks of this tensor already in this rank's slots
    // Copies the next chunk in once every rank has finished reading what its buffer held
    // `depth` chunks ago; without `wait`, only if that is already so.
    auto copy_in = [&](bool wait) {
      const std::uint32_t k = first + static_cast<std::uint32_t>(copied);
      if (wait)
        wait_all(&RankBlock::consumed, k - depth, "free a buffer for", work, copied, chunks);
      else if (!all_reached(&RankBlock::consumed, k - depth))
        return false;
      fill(copied, slot(k, rank_));
      mine.tag[k % depth] = tag;
      publish(mine.arrived, k);
      ++copied;
      return true;
    };

    for (std::size_t c = 0; c < chunks; ++c) {
      const std::uint32_t k = first + static_cast<std::uint32_t>(c);
      // Run ahead: fill the free buffers before waiting for the peers' copies of chunk c.
      if (copied == c) copy_in(true);
      while (copied < chunks && copied < c + depth && copy_in(false)) {
      }
      wait_all(&RankBlock::arrived, k, "arrive at", work, c, chunks);
      for (int q = 0; q < size_; ++q) {
        const auto& theirs = block(q).tag[k % depth];
        if (theirs.op != tag.op || theirs.numel != tag.numel || theirs.dtype != tag.dtype ||
            theirs.reduce != tag.reduce || theirs.runs != tag.runs || theirs.kind != tag.kind)
          throw RuntimeError(
              "mpp: " + std::string(detail::shm::kind_name(work.kind_)) +
              " over shared memory: rank " + std::to_string(q) + " called " +
              detail::shm::tag_text(theirs) + " while rank " + std::to_string(rank_) + " called " +
              detail::shm::tag_text(tag) +
              "; every rank must call the same collectives with tensors of the same size and "
              "dtype, in the same order");
      }
      consume(c, k);
      publish(mine.consumed, k);
    }
  }

  void all_reduce(ShmWork& work) {
    const at::Tensor& data = work.data_;
    const auto dtype = data.scalar_type();
    const std::size_t element = data.element_size();
    const std::size_t numel = static_cast<std::size_t>(data.numel());
    const std::size_t per_chunk = layout_.chunk_bytes / element;
    auto count_of = [&](std::size_t c) { return std::min(per_chunk, numel - c * per_chunk); };
    char* bytes = static_cast<char*>(data.data_ptr());
    const detail::shm::ChunkTag tag{work.number(),
                                    static_cast<std::int64_t>(numel),
                                    static_cast<std::int32_t>(dtype),
                                    static_cast<std::int32_t>(work.op_),
                                    0,
                                    static_cast<std::int32_t>(detail::shm::Kind::all_reduce)};
    std::vector<const char*> inputs(static_cast<std::size_t>(size_));
    exchange(
        work, tag,
        [&](std::size_t c, char* slot) {
          detail::shm::copy_to_slot(slot, bytes + c * per_chunk * element, count_of(c) * element);
        },
        [&](std::size_t c, std::uint32_t k) {
          for (int q = 0; q < size_; ++q) inputs[static_cast<std::size_t>(q)] = slot(k, q);
          // Every rank reduces the whole chunk, in rank order, with the same code: the same bits.
          detail::shm::reduce_chunk(dtype, work.op_, bytes + c * per_chunk * element, inputs,
                                    count_of(c), scratch_);
        });
  }

  /// What an all-gather or reduce-scatter of owned runs works with: the tensor's bytes, its
  /// chunks with every rank's run in each, and the tag its chunks carry.
  struct RunsWork {
    char* bytes;
    std::size_t element;
    detail::shm::RunsByChunk chunks;
    detail::shm::ChunkTag tag;
  };
  RunsWork runs_work(const ShmWork& work, detail::shm::Kind kind, std::int32_t reduce) const {
    const at::Tensor& data = work.data_;
    const std::size_t element = data.element_size();
    const auto numel = static_cast<std::int64_t>(data.numel());
    return {static_cast<char*>(data.data_ptr()),
            element,
            {work.runs_, numel, static_cast<std::int64_t>(layout_.chunk_bytes / element)},
            {work.number(), numel, static_cast<std::int32_t>(data.scalar_type()), reduce,
             detail::shm::runs_hash(work.runs_), static_cast<std::int32_t>(kind)}};
  }

  void all_gather(ShmWork& work) {
    const auto [bytes, element, chunks, tag] = runs_work(work, detail::shm::Kind::all_gather, -1);
    exchange(
        work, tag,
        [&](std::size_t c, char* slot) {
          const auto [begin, end] = chunks.part(rank_, c);
          detail::shm::copy_range_to_slot(slot, bytes, chunks.lo(c), begin, end, element);
        },
        [&](std::size_t c, std::uint32_t k) {
          for (int q = 0; q < size_; ++q) {
            if (q == rank_) continue;
            const auto [begin, end] = chunks.part(q, c);
            if (begin < end)
              std::memcpy(bytes + static_cast<std::size_t>(begin) * element,
                          slot(k, q) + static_cast<std::size_t>(begin - chunks.lo(c)) * element,
                          static_cast<std::size_t>(end - begin) * element);
          }
        });
  }

  void reduce_scatter(ShmWork& work) {
    const auto dtype = work.data_.scalar_type();
    const auto [bytes, element, chunks, tag] =
        runs_work(work, detail::shm::Kind::reduce_scatter, static_cast<std::int32_t>(work.op_));
    // The reduction runs in rank order into this rank's own tensor. Ranks 0 and 1 read their
    // own contribution from it directly (fold reads in[0] and in[1] before writing each element);
    // the others' own input would be overwritten by the partial sums, so they copy it in too.
    const bool own_in_place = rank_ < 2;
    std::vector<const char*> inputs(static_cast<std::size_t>(size_));
    exchange(
        work, tag,
        [&](std::size_t c, char* slot) {
          const std::int64_t lo = chunks.lo(c), hi = chunks.hi(c);
          const auto [begin, end] = chunks.part(rank_, c);
          if (!own_in_place || begin >= end) {
            detail::shm::copy_range_to_slot(slot, bytes, lo, lo, hi, element);
          } else {  // what the others need: the chunk outside this rank's run
            detail::shm::copy_range_to_slot(slot, bytes, lo, lo, begin, element);
            detail::shm::copy_range_to_slot(slot, bytes, lo, end, hi, element);
          }
        },
        [&](std::size_t c, std::uint32_t k) {
          const auto [begin, end] = chunks.part(rank_, c);
          if (begin >= end) return;
          char* own = bytes + static_cast<std::size_t>(begin) * element;
          const std::size_t at = static_cast<std::size_t>(begin - chunks.lo(c)) * element;
          for (int q = 0; q < size_; ++q)
            inputs[static_cast<std::size_t>(q)] =
                q == rank_ && own_in_place ? own : slot(k, q) + at;
          detail::shm::reduce_chunk(dtype, work.op_, own, inputs,
                                    static_cast<std::size_t>(end - begin), scratch_);
        });
  }

  /// Whether every peer's `which` counter has reached `target` (no waiting).
  bool all_reached(Counter RankBlock::*which, std::uint32_t target) const {
    for (int q = 0; q < size_; ++q)
      if (q != rank_ &&
          !detail::shm::reached((block(q).*which).value.load(std::memory_order_acquire), target))
        return false;
    return true;
  }

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
  static c10::intrusive_ptr<c10d::Work> all_gather_runs(
      c10d::ProcessGroup& pg, const at::Tensor& flat,
      const std::vector<std::pair<std::int64_t, std::int64_t>>& runs) {
    return static_cast<ShmProcessGroup&>(pg).all_gather_runs(flat, runs);
  }

  /// Each rank's own run of the reduction, through the segment; no work (the caller all-reduces)
  /// for a dtype or op the segment does not reduce. `pg` is a group this backend made.
  static c10::intrusive_ptr<c10d::Work> reduce_scatter_runs(
      c10d::ProcessGroup& pg, const at::Tensor& flat,
      const std::vector<std::pair<std::int64_t, std::int64_t>>& runs, c10d::ReduceOp op) {
    auto& shm = static_cast<ShmProcessGroup&>(pg);
    c10d::AllreduceOptions opts;
    opts.reduceOp = op;
    if (!shm.handles({flat}, opts)) return {};
    return shm.reduce_scatter_runs(flat, runs, op);
  }

  /// The inner Gloo group's device: loopback, since the ranks share this host.
  static std::shared_ptr<::gloo::transport::Device> device(const Environment& env,
                                                           const CommOptions& opts) {
    return backend_traits<Gloo>::device(env, opts);
  }

  /// Checks that every rank is on this host (CommError naming the ranks otherwise), then connects
  /// the inner Gloo group and maps the shared segment (a collective: every rank calls it).
  static c10::intrusive_ptr<c10d::ProcessGroup> make(
      const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
      const std::shared_ptr<::gloo::transport::Device>& device, std::chrono::milliseconds timeout) {
    if (size > 1) detail::shm::check_one_host(*store, rank, size, timeout);
    auto inner = backend_traits<Gloo>::make(store, rank, size, device, timeout);
    return c10::make_intrusive<ShmProcessGroup>(store, rank, size, std::move(inner), ShmOptions{},
                                                timeout);
  }
};

}  // namespace mpp
