#pragma once
// The definitions of shm_group.hpp's functions that are not templates: included by the header
// (inline) unless MPP_SEPARATE_COMPILATION is defined, else compiled once by mpp/impl/src.hpp.
#include "mpp/comm/shm_group.hpp"

namespace mpp {

ShmProcessGroup::ShmProcessGroup(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
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
    throw InvalidArgument("mpp: Shm::chunk_bytes must be a multiple of 64 and at least 4096 (got " +
                          std::to_string(options.chunk_bytes) + ")");
  if (options.ring_bytes < 4096 || options.ring_bytes % 64 != 0)
    throw InvalidArgument("mpp: Shm::ring_bytes must be a multiple of 64 and at least 4096 (got " +
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

ShmProcessGroup::~ShmProcessGroup() {
  {
    std::lock_guard<std::mutex> lock(queue_mutex_);
    stopping_ = true;
  }
  queue_cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

bool ShmProcessGroup::handles(const std::vector<at::Tensor>& tensors,
                              const c10d::AllreduceOptions& opts) const {
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

c10::intrusive_ptr<c10d::Work> ShmProcessGroup::allreduce(std::vector<at::Tensor>& tensors,
                                                          const c10d::AllreduceOptions& opts) {
  if (!handles(tensors, opts)) return inner_->allreduce(tensors, opts);
  const at::Tensor& t = tensors.front();
  auto work = c10::make_intrusive<ShmWork>(rank_, c10d::OpType::ALLREDUCE, ++submitted_, progress_);
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

c10::intrusive_ptr<c10d::Work> ShmProcessGroup::barrier(const c10d::BarrierOptions& opts) {
  if (!worker_.joinable()) return inner_->barrier(opts);
  auto work = c10::make_intrusive<ShmWork>(rank_, c10d::OpType::BARRIER, submitted_, progress_);
  work->barrier_ = true;
  work->barrier_options_ = opts;
  enqueue(work);
  return work;
}

c10::intrusive_ptr<c10d::Work> ShmProcessGroup::all_gather_runs(
    const at::Tensor& flat, std::vector<std::pair<std::int64_t, std::int64_t>> runs) {
  detail::check_owned_runs(flat, runs, size_);
  if (!flat.device().is_cpu())
    throw InvalidArgument("mpp: all_gather_runs over shared memory needs a CPU tensor (got " +
                          flat.device().str() + ")");
  auto work = c10::make_intrusive<ShmWork>(rank_, c10d::OpType::ALLGATHER, ++submitted_, progress_);
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

c10::intrusive_ptr<c10d::Work> ShmProcessGroup::reduce_scatter_runs(
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

c10::intrusive_ptr<c10d::Work> ShmProcessGroup::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  return inner_->allreduce_coalesced(tensors, opts);
}

c10::intrusive_ptr<c10d::Work> ShmProcessGroup::reduce(std::vector<at::Tensor>& tensors,
                                                       const c10d::ReduceOptions& opts) {
  return inner_->reduce(tensors, opts);
}

c10::intrusive_ptr<c10d::Work> ShmProcessGroup::allgather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  return inner_->allgather(outputs, inputs, opts);
}

c10::intrusive_ptr<c10d::Work> ShmProcessGroup::_allgather_base(
    at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& opts) {
  return inner_->_allgather_base(output, input, opts);
}

c10::intrusive_ptr<c10d::Work> ShmProcessGroup::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  return inner_->allgather_coalesced(outputs, inputs, opts);
}

c10::intrusive_ptr<c10d::Work> ShmProcessGroup::gather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::GatherOptions& opts) {
  return inner_->gather(outputs, inputs, opts);
}

c10::intrusive_ptr<c10d::Work> ShmProcessGroup::scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ScatterOptions& opts) {
  return inner_->scatter(outputs, inputs, opts);
}

c10::intrusive_ptr<c10d::Work> ShmProcessGroup::reduce_scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  return inner_->reduce_scatter(outputs, inputs, opts);
}

c10::intrusive_ptr<c10d::Work> ShmProcessGroup::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  return inner_->_reduce_scatter_base(output, input, opts);
}

c10::intrusive_ptr<c10d::Work> ShmProcessGroup::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                              std::vector<int64_t>& output_counts,
                                                              std::vector<int64_t>& input_counts,
                                                              const c10d::AllToAllOptions& opts) {
  return inner_->alltoall_base(output, input, output_counts, input_counts, opts);
}

c10::intrusive_ptr<c10d::Work> ShmProcessGroup::alltoall(std::vector<at::Tensor>& outputs,
                                                         std::vector<at::Tensor>& inputs,
                                                         const c10d::AllToAllOptions& opts) {
  return inner_->alltoall(outputs, inputs, opts);
}

void ShmProcessGroup::monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) {
  inner_->monitoredBarrier(opts, wait_all_ranks);
}

c10::intrusive_ptr<c10d::Work> ShmProcessGroup::send(std::vector<at::Tensor>& tensors, int dst,
                                                     int tag) {
  const at::Tensor& t = single_cpu_tensor(tensors, "send");
  if (!mailbox_) return inner_->send(tensors, dst, tag);  // a group of one: refused by Gloo
  const at::Tensor wire = t.is_contiguous() ? t : t.contiguous();
  return mail_work(c10d::OpType::SEND,
                   {mailbox_->post_send(wire, dst, detail::shm::MessageKind::p2p, tag)});
}

c10::intrusive_ptr<c10d::Work> ShmProcessGroup::recv(std::vector<at::Tensor>& tensors, int src,
                                                     int tag) {
  const at::Tensor& t = single_cpu_tensor(tensors, "recv");
  if (!mailbox_) return inner_->recv(tensors, src, tag);
  const bool in_place = t.is_contiguous();
  const at::Tensor wire = in_place ? t : at::empty_like(t, at::MemoryFormat::Contiguous);
  return mail_work(c10d::OpType::RECV,
                   {mailbox_->post_recv(wire, src, detail::shm::MessageKind::p2p, tag)},
                   in_place ? at::Tensor() : t);
}

c10::intrusive_ptr<c10d::Work> ShmProcessGroup::recvAnysource(std::vector<at::Tensor>&, int) {
  throw InvalidArgument(
      "mpp: a receive from any source is not supported over Shm; name the sender (recv(tensor, "
      "src, tag))");
}

c10::intrusive_ptr<c10d::Work> ShmProcessGroup::broadcast(std::vector<at::Tensor>& tensors,
                                                          const c10d::BroadcastOptions& opts) {
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

c10::intrusive_ptr<c10d::Work> ShmProcessGroup::mail_work(
    c10d::OpType type, std::vector<std::shared_ptr<detail::shm::MailOp>> ops, at::Tensor target) {
  return c10::make_intrusive<ShmMailWork>(rank_, type, mailbox_, std::move(ops), timeout_,
                                          std::move(target));
}

void ShmProcessGroup::enqueue(const c10::intrusive_ptr<ShmWork>& work) {
  {
    std::lock_guard<std::mutex> lock(queue_mutex_);
    queue_.push_back(work);
  }
  queue_cv_.notify_one();
}

void ShmProcessGroup::run() {
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
                             " over shared memory was not run: an earlier one failed (" + failure_ +
                             ")");
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

void ShmProcessGroup::publish(Counter& counter, std::uint32_t value) {
  counter.value.store(value, std::memory_order_release);
  detail::shm::futex_wake_all(counter.value);
}

void ShmProcessGroup::wait_all(Counter RankBlock::*which, std::uint32_t target, const char* verb,
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
  const std::string where = "chunk " + std::to_string(chunk + 1) + " of " + std::to_string(chunks) +
                            " of " + describe(work);
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

std::string ShmProcessGroup::describe(const ShmWork& work) const {
  const std::string what = c10::toString(work.data_.scalar_type()) + std::string("[") +
                           std::to_string(work.data_.numel()) + "]";
  if (work.kind_ == detail::shm::Kind::all_gather) return name(work) + " (" + what + ")";
  return name(work) + " (" + what + " " + detail::shm::op_text(work.op_) + ")";
}

template <class Fill, class Consume>
void ShmProcessGroup::exchange(ShmWork& work, const detail::shm::ChunkTag& tag, Fill fill,
                               Consume consume) {
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

void ShmProcessGroup::all_reduce(ShmWork& work) {
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

ShmProcessGroup::RunsWork ShmProcessGroup::runs_work(const ShmWork& work, detail::shm::Kind kind,
                                                     std::int32_t reduce) const {
  const at::Tensor& data = work.data_;
  const std::size_t element = data.element_size();
  const auto numel = static_cast<std::int64_t>(data.numel());
  return {static_cast<char*>(data.data_ptr()),
          element,
          {work.runs_, numel, static_cast<std::int64_t>(layout_.chunk_bytes / element)},
          {work.number(), numel, static_cast<std::int32_t>(data.scalar_type()), reduce,
           detail::shm::runs_hash(work.runs_), static_cast<std::int32_t>(kind)}};
}

void ShmProcessGroup::all_gather(ShmWork& work) {
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

void ShmProcessGroup::reduce_scatter(ShmWork& work) {
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
          inputs[static_cast<std::size_t>(q)] = q == rank_ && own_in_place ? own : slot(k, q) + at;
        detail::shm::reduce_chunk(dtype, work.op_, own, inputs,
                                  static_cast<std::size_t>(end - begin), scratch_);
      });
}

bool ShmProcessGroup::all_reached(Counter RankBlock::*which, std::uint32_t target) const {
  for (int q = 0; q < size_; ++q)
    if (q != rank_ &&
        !detail::shm::reached((block(q).*which).value.load(std::memory_order_acquire), target))
      return false;
  return true;
}

c10::intrusive_ptr<c10d::Work> backend_traits<Shm>::all_gather_runs(
    c10d::ProcessGroup& pg, const at::Tensor& flat,
    const std::vector<std::pair<std::int64_t, std::int64_t>>& runs) {
  return static_cast<ShmProcessGroup&>(pg).all_gather_runs(flat, runs);
}

c10::intrusive_ptr<c10d::Work> backend_traits<Shm>::reduce_scatter_runs(
    c10d::ProcessGroup& pg, const at::Tensor& flat,
    const std::vector<std::pair<std::int64_t, std::int64_t>>& runs, c10d::ReduceOp op) {
  auto& shm = static_cast<ShmProcessGroup&>(pg);
  c10d::AllreduceOptions opts;
  opts.reduceOp = op;
  if (!shm.handles({flat}, opts)) return {};
  return shm.reduce_scatter_runs(flat, runs, op);
}

c10::intrusive_ptr<c10d::ProcessGroup> backend_traits<Shm>::make(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
    const std::shared_ptr<::gloo::transport::Device>& device, std::chrono::milliseconds timeout) {
  if (size > 1) detail::shm::check_one_host(*store, rank, size, timeout);
  auto inner = backend_traits<Gloo>::make(store, rank, size, device, timeout);
  return c10::make_intrusive<ShmProcessGroup>(store, rank, size, std::move(inner), ShmOptions{},
                                              timeout);
}

}  // namespace mpp
