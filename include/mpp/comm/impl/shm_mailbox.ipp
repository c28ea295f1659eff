#pragma once
// The definitions of shm_mailbox.hpp's functions that are not templates: included by the header
// (inline) unless MPP_SEPARATE_COMPILATION is defined, else compiled once by mpp/impl/src.hpp.
#include "mpp/comm/shm_mailbox.hpp"

namespace mpp::detail::shm {

MPP_DECL std::chrono::microseconds spin_from_env(std::chrono::microseconds fallback) {
  const char* text = std::getenv("MPP_SHM_SPIN_US");
  if (text == nullptr || *text == '\0') return fallback;
  char* end = nullptr;
  const long long value = std::strtoll(text, &end, 10);
  if (end == text || *end != '\0' || value < 0 || value > 10'000'000)
    throw EnvironmentError("MPP_SHM_SPIN_US",
                           "mpp: MPP_SHM_SPIN_US='" + std::string(text) +
                               "' is not a number of microseconds between 0 and 10000000 (how long "
                               "a rank waiting on shared memory spins before it sleeps)");
  return std::chrono::microseconds(value);
}

std::string MailOp::describe() const {
  std::string s = std::string(is_send ? message_kind_name(kind) : "recv") +
                  (is_send ? " to rank " : " from rank ") + std::to_string(peer);
  if (kind == MessageKind::p2p) s += " with tag " + std::to_string(tag);
  return s + " (" + c10::toString(tensor.scalar_type()) + ", " + std::to_string(bytes) + " bytes)";
}

std::shared_ptr<MailOp> Mailbox::post_send(const at::Tensor& tensor, int peer, MessageKind kind,
                                           int tag) {
  auto op = make_op(true, tensor, peer, kind, tag);
  std::lock_guard<std::mutex> lock(mutex_);
  fail_if_broken(*op);
  outgoing_[static_cast<std::size_t>(peer)].push_back(op);
  progress();
  return op;
}

std::shared_ptr<MailOp> Mailbox::post_recv(const at::Tensor& tensor, int peer, MessageKind kind,
                                           int tag) {
  auto op = make_op(false, tensor, peer, kind, tag);
  std::lock_guard<std::mutex> lock(mutex_);
  fail_if_broken(*op);
  const Key key{peer, static_cast<int>(kind), tag};
  auto found = unexpected_.find(key);
  if (found != unexpected_.end() && !found->second.empty()) {
    std::shared_ptr<Unexpected> message = std::move(found->second.front());
    found->second.pop_front();
    if (found->second.empty()) unexpected_.erase(found);
    if (message->complete)
      deliver(*message, *op);
    else
      message->claimed = op;
  } else {
    posted_[key].push_back(op);
  }
  progress();
  return op;
}

bool Mailbox::test(const std::vector<std::shared_ptr<MailOp>>& ops) {
  std::lock_guard<std::mutex> lock(mutex_);
  progress();
  return all_complete(ops);
}

void Mailbox::wait(const std::vector<std::shared_ptr<MailOp>>& ops,
                   std::chrono::milliseconds timeout) {
  using namespace std::chrono;
  const auto start = Clock::now();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    progress();
    if (all_complete(ops)) return rethrow(ops);
  }
  // Spin: the peer is probably running on another core and about to write. Every peer bumps
  // this rank's bell when it writes to it or makes room for it, so the spin watches the bell
  // and makes progress only when it moves. Plain loads, no PAUSE: under a hypervisor a loop of
  // PAUSE instructions exits to the host, which then takes the CPU for tens of microseconds.
  RankBlock& me = block(rank_);
  const auto spin_until = start + spin_;
  auto next_yield = Clock::now() + yield_every;
  std::uint32_t seen = me.bell.load(std::memory_order_acquire);
  for (;;) {
    for (int i = 0; i < 256 && me.bell.load(std::memory_order_acquire) == seen; ++i) {
    }
    const std::uint32_t now_bell = me.bell.load(std::memory_order_acquire);
    if (now_bell != seen) {
      seen = now_bell;
      std::lock_guard<std::mutex> lock(mutex_);
      progress();
      if (all_complete(ops)) return rethrow(ops);
    }
    const auto now = Clock::now();
    if (now >= spin_until) break;
    // The scheduler sometimes queues two ranks on one CPU (a woken thread lands beside its
    // waker): then the peer runs only when this rank yields, so yield at once; otherwise
    // only now and then, for other processes sharing the CPU.
    if (peer_shares_cpu(ops) || now >= next_yield) {
      ::sched_yield();
      next_yield = now + yield_every;
    }
  }
  // Sleep on the bell, waking to check the deadline and the peers.
  const auto deadline = start + timeout;
  auto next_check = Clock::now() + milliseconds(100);
  for (;;) {
    const std::uint32_t seen = me.bell.load(std::memory_order_seq_cst);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      progress();
      if (all_complete(ops)) return rethrow(ops);
      const auto now = Clock::now();
      if (now >= next_check) {
        next_check = now + milliseconds(100);
        check_peers_alive(ops);
      }
      if (now >= deadline) throw RuntimeError(timeout_text(ops, timeout));
    }
    me.sleepers.fetch_add(1, std::memory_order_seq_cst);
    const auto left = deadline - Clock::now();
    const auto slice = std::clamp<Clock::duration>(left, microseconds(1), milliseconds(20));
    futex_wait(me.bell, seen, duration_cast<microseconds>(slice));
    me.sleepers.fetch_sub(1, std::memory_order_seq_cst);
  }
}

std::shared_ptr<MailOp> Mailbox::make_op(bool is_send, const at::Tensor& tensor, int peer,
                                         MessageKind kind, int tag) const {
  if (peer < 0 || peer >= size_ || peer == rank_)
    throw InvalidArgument("mpp: Shm point-to-point peer " + std::to_string(peer) +
                          " must be another rank of this group of " + std::to_string(size_));
  if (!tensor.is_contiguous())
    throw LogicError("mpp: Shm point-to-point needs a contiguous tensor");
  auto op = std::make_shared<MailOp>();
  op->is_send = is_send;
  op->peer = peer;
  op->kind = kind;
  op->tag = tag;
  op->tensor = tensor;
  op->bytes =
      static_cast<std::int64_t>(tensor.numel()) * static_cast<std::int64_t>(tensor.element_size());
  return op;
}

void Mailbox::fail_if_broken(const MailOp& op) const {
  if (!broken_.empty())
    throw RuntimeError("mpp: " + op.describe() +
                       " over shared memory was not started: an earlier point-to-point "
                       "operation of this group failed (" +
                       broken_ + ")");
}

void Mailbox::ring_bell(int q) const {
  RankBlock& b = block(q);
  b.bell.fetch_add(1, std::memory_order_seq_cst);
  if (b.sleepers.load(std::memory_order_seq_cst) != 0) futex_wake_all(b.bell);
}

bool Mailbox::all_complete(const std::vector<std::shared_ptr<MailOp>>& ops) {
  return std::all_of(ops.begin(), ops.end(), [](const auto& op) { return op->complete; });
}

void Mailbox::rethrow(const std::vector<std::shared_ptr<MailOp>>& ops) {
  for (const auto& op : ops)
    if (!op->error.empty()) throw RuntimeError(op->error);
}

bool Mailbox::peer_shares_cpu(const std::vector<std::shared_ptr<MailOp>>& ops) const {
  const int cpu = ::sched_getcpu();
  block(rank_).cpu.store(cpu, std::memory_order_relaxed);
  for (const auto& op : ops)
    if (!op->complete && block(op->peer).cpu.load(std::memory_order_relaxed) == cpu) return true;
  return false;
}

void Mailbox::progress() {
  if (!broken_.empty()) return;
  block(rank_).cpu.store(::sched_getcpu(), std::memory_order_relaxed);
  try {
    for (int q = 0; q < size_; ++q) {
      if (q == rank_) continue;
      if (!outgoing_[static_cast<std::size_t>(q)].empty()) write_to(q);
      read_from(q);
    }
  } catch (const std::exception& e) {
    broken_ = e.what();
    fail_everything(broken_);
  }
}

void Mailbox::write_to(int q) {
  Outgoing& queue = outgoing_[static_cast<std::size_t>(q)];
  RingCursors& ring = cursors(rank_, q);
  char* data = ring_data(rank_, q);
  const auto capacity = static_cast<std::uint64_t>(layout_.ring_bytes);
  std::uint64_t written = ring.written.load(std::memory_order_relaxed);
  std::uint64_t read = ring.read.load(std::memory_order_acquire);
  while (!queue.empty()) {
    MailOp& op = *queue.front();
    if (!op.header_done) {
      if (capacity - (written - read) < sizeof(MessageHeader)) break;
      MessageHeader h{};
      h.check = message_check ^ queue.number;
      h.bytes = op.bytes;
      h.numel = op.tensor.numel();
      h.tag = op.tag;
      h.kind = static_cast<std::int32_t>(op.kind);
      h.dtype = static_cast<std::int32_t>(op.tensor.scalar_type());
      std::memcpy(data + written % capacity, &h, sizeof(h));
      written += sizeof(h);
      op.header_done = true;
    }
    const std::int64_t total = padded(op.bytes);
    const char* source = static_cast<const char*>(op.tensor.data_ptr());
    while (op.done < total) {
      const std::uint64_t room = capacity - (written - read);
      if (room == 0) {
        // Publish what is there, then look again whether the receiver made room meanwhile.
        publish_written(ring, q, written);
        read = ring.read.load(std::memory_order_acquire);
        if (capacity - (written - read) == 0) break;
        continue;
      }
      const std::uint64_t offset = written % capacity;
      const auto n = static_cast<std::int64_t>(std::min<std::uint64_t>(
          {room, static_cast<std::uint64_t>(total - op.done), capacity - offset, max_fragment}));
      const std::int64_t real = std::clamp<std::int64_t>(op.bytes - op.done, 0, n);
      if (real > 0) copy_in(data + offset, source + op.done, static_cast<std::size_t>(real));
      op.done += n;
      written += static_cast<std::uint64_t>(n);
      if (op.done < total) publish_written(ring, q, written);  // let the reader start
    }
    if (op.done < total) break;
    op.complete = true;
    ++queue.number;
    queue.pop_front();
  }
  publish_written(ring, q, written);
}

void Mailbox::publish_written(RingCursors& ring, int q, std::uint64_t written) {
  if (ring.written.load(std::memory_order_relaxed) == written) return;
  ring.written.store(written, std::memory_order_release);
  ring_bell(q);
}

void Mailbox::read_from(int q) {
  Reading& in = incoming_[static_cast<std::size_t>(q)];
  RingCursors& ring = cursors(q, rank_);
  const char* data = ring_data(q, rank_);
  const auto capacity = static_cast<std::uint64_t>(layout_.ring_bytes);
  std::uint64_t read = ring.read.load(std::memory_order_relaxed);
  const std::uint64_t start = read;
  const std::uint64_t written = ring.written.load(std::memory_order_acquire);
  while (read != written) {
    if (!in.active) {
      MessageHeader h;
      std::memcpy(&h, data + read % capacity, sizeof(h));
      if (h.check != (message_check ^ in.number) || h.bytes < 0)
        throw RuntimeError("mpp: the shared-memory ring from rank " + std::to_string(q) +
                           " is corrupt (message " + std::to_string(in.number + 1) +
                           " has no valid header); the ranks do not run the same "
                           "build, or memory was overwritten");
      read += sizeof(h);
      begin_message(q, in, h);
    }
    const std::int64_t total = padded(in.header.bytes);
    while (in.done < total && read != written) {
      const std::uint64_t offset = read % capacity;
      const auto n = static_cast<std::int64_t>(std::min<std::uint64_t>(
          {written - read, static_cast<std::uint64_t>(total - in.done), capacity - offset}));
      const std::int64_t real = std::clamp<std::int64_t>(in.header.bytes - in.done, 0, n);
      if (real > 0 && in.destination != nullptr)
        std::memcpy(in.destination + in.done, data + offset, static_cast<std::size_t>(real));
      in.done += n;
      read += static_cast<std::uint64_t>(n);
    }
    if (in.done < total) break;
    end_message(in);
  }
  if (read != start) {
    ring.read.store(read, std::memory_order_release);
    ring_bell(q);  // a sender may wait for room
  }
}

void Mailbox::begin_message(int q, Reading& in, const MessageHeader& h) {
  in.active = true;
  in.header = h;
  in.done = 0;
  in.op.reset();
  in.aside.reset();
  const Key key{q, h.kind, h.tag};
  auto found = posted_.find(key);
  if (found != posted_.end() && !found->second.empty()) {
    in.op = std::move(found->second.front());
    found->second.pop_front();
    if (found->second.empty()) posted_.erase(found);
    const std::string mismatch = mismatch_text(h, *in.op);
    if (mismatch.empty()) {
      in.destination = static_cast<char*>(in.op->tensor.data_ptr());
    } else {
      in.destination = nullptr;
      in.op->error = mismatch;
      in.op->complete = true;
      in.op.reset();
    }
    return;
  }
  auto message = std::make_shared<Unexpected>();
  message->header = h;
  message->data = std::make_unique_for_overwrite<char[]>(static_cast<std::size_t>(h.bytes));
  in.destination = message->data.get();
  in.aside = message;
  unexpected_[key].push_back(std::move(message));
}

void Mailbox::end_message(Reading& in) {
  if (in.op) in.op->complete = true;
  if (in.aside) {
    in.aside->complete = true;
    if (in.aside->claimed) {
      auto claimed = std::move(in.aside->claimed);
      deliver(*in.aside, *claimed);
    }
  }
  in.active = false;
  in.op.reset();
  in.aside.reset();
  in.destination = nullptr;
  ++in.number;
}

void Mailbox::deliver(const Unexpected& message, MailOp& op) {
  const std::string mismatch = mismatch_text(message.header, op);
  if (mismatch.empty() && op.bytes > 0)
    std::memcpy(op.tensor.data_ptr(), message.data.get(), static_cast<std::size_t>(op.bytes));
  op.error = mismatch;
  op.complete = true;
}

std::string Mailbox::mismatch_text(const MessageHeader& h, const MailOp& op) {
  const auto sent = static_cast<at::ScalarType>(h.dtype);
  if (h.bytes == op.bytes && sent == op.tensor.scalar_type()) return "";
  return "mpp: " + op.describe() + " got a message of " + c10::toString(sent) + " with " +
         std::to_string(h.numel) + " elements (" + std::to_string(h.bytes) +
         " bytes); the sender and the receiver must use tensors of the same dtype and size";
}

void Mailbox::fail_everything(const std::string& why) {
  for (auto& queue : outgoing_)
    for (auto& op : queue) fail(*op, why);
  for (auto& [key, ops] : posted_)
    for (auto& op : ops) fail(*op, why);
  for (auto& in : incoming_)
    if (in.op) fail(*in.op, why);
  for (auto& [key, messages] : unexpected_)
    for (auto& m : messages)
      if (m->claimed) fail(*m->claimed, why);
}

void Mailbox::fail(MailOp& op, const std::string& why) {
  if (op.complete) return;
  op.error = why;
  op.complete = true;
}

bool Mailbox::arriving(const MailOp& op) const {
  const Reading& in = incoming_[static_cast<std::size_t>(op.peer)];
  return in.active && (in.op.get() == &op || (in.aside && in.aside->claimed.get() == &op));
}

void Mailbox::check_peers_alive(const std::vector<std::shared_ptr<MailOp>>& ops) {
  for (const auto& op : ops) {
    if (op->complete || !watchable_[static_cast<std::size_t>(op->peer)]) continue;
    const std::int32_t pid = block(op->peer).pid;
    if (!process_gone(pid)) continue;
    progress();  // what it wrote before it exited is still in the ring
    if (op->complete) continue;
    const std::string why =
        "mpp: " + op->describe() + " over shared memory: rank " + std::to_string(op->peer) +
        " (process " + std::to_string(pid) + ") exited before it " +
        (op->is_send ? "received it" : (arriving(*op) ? "finished sending it" : "sent it")) +
        "; look at its log";
    broken_ = why;
    fail_everything(why);
    throw RuntimeError(why);
  }
}

std::string Mailbox::timeout_text(const std::vector<std::shared_ptr<MailOp>>& ops,
                                  std::chrono::milliseconds timeout) const {
  const MailOp* stuck = nullptr;
  for (const auto& op : ops)
    if (!op->complete) {
      stuck = op.get();
      break;
    }
  std::string s = "mpp: " + stuck->describe() + " over shared memory timed out after " +
                  duration_text(timeout) + ": rank " + std::to_string(stuck->peer);
  if (stuck->is_send) {
    s += " did not make room for it in the ring (" + std::to_string(stuck->done) + " of " +
         std::to_string(stuck->bytes) +
         " bytes written); it is stuck, dead, or not receiving from this rank";
    return s;
  }
  s += arriving(*stuck) ? " started the message but did not finish it"
                        : " sent nothing that matches it";
  std::string waiting;
  for (const auto& [key, messages] : unexpected_) {
    if (std::get<0>(key) != stuck->peer) continue;
    for (const auto& m : messages)
      waiting += (waiting.empty() ? "" : ", ") + std::string("tag ") +
                 std::to_string(m->header.tag) + " (" +
                 c10::toString(static_cast<at::ScalarType>(m->header.dtype)) + ", " +
                 std::to_string(m->header.bytes) + " bytes)";
  }
  if (!waiting.empty()) s += "; messages from it that no receive has claimed: " + waiting;
  return s;
}

void Mailbox::copy_in(char* dst, const char* src, std::size_t n) {
  if (n >= streaming_threshold)
    copy_to_slot(dst, src, n);
  else
    std::memcpy(dst, src, n);
}

}  // namespace mpp::detail::shm
