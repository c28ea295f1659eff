#pragma once
// Point-to-point messages between the ranks of a Shm group, through one ring of bytes per ordered
// pair of ranks in the group's segment (shm_segment.hpp).
//
// A message is a 64-byte header (tag, kind, dtype, size) followed by its bytes, padded to 64. The
// sender writes as much as the ring has room for and returns: a send completes once its last byte
// is in the ring, whether or not the receiver has posted its receive (eager, like MPI's buffered
// send); only a message larger than the free room waits for the receiver to drain the ring.
// The receiver reads each ring in order: a message whose (peer, kind, tag) matches a posted
// receive goes straight into that receive's tensor; any other is copied aside until a receive
// for it is posted. So messages of one (peer, tag) are received in the order they were sent, as
// over Gloo, and a message nobody waits for yet never blocks the ones behind it.
//
// Nothing runs in the background: a rank moves its messages when it posts, tests or waits on an
// operation (MPI's progress rule). A waiting rank spins for Shm::spin (or MPP_SHM_SPIN_US) making
// progress, then sleeps on its bell, a futex that a peer bumps after writing into a ring towards
// it or freeing room in a ring from it. Peers only make the futex call when the rank sleeps.
// While asleep it wakes every 20 ms to check the deadline and, every 100 ms, whether the peer it
// waits for still runs: a dead peer is named within ~0.1 s, a silent one at the deadline.
#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "mpp/comm/error.hpp"
#include "mpp/comm/shm_segment.hpp"
#include "mpp/error.hpp"

namespace mpp::detail::shm {

/// Why a message travels: a user's send/recv, or a broadcast made of them.
enum class MessageKind : std::int32_t { p2p = 0, broadcast = 1 };

inline const char* message_kind_name(MessageKind kind) {
  return kind == MessageKind::broadcast ? "broadcast" : "send";
}

/// What precedes a message's bytes in the ring.
struct alignas(64) MessageHeader {
  std::uint64_t check;  // message_check ^ the message's number on its ring
  std::int64_t bytes;
  std::int64_t numel;
  std::int32_t tag;
  std::int32_t kind;
  std::int32_t dtype;
};
static_assert(sizeof(MessageHeader) == 64);

constexpr std::uint64_t message_check = 0x6d70702d6d736731ULL;

constexpr std::int64_t padded(std::int64_t bytes) { return (bytes + 63) / 64 * 64; }

/// The spin before a waiting rank sleeps: MPP_SHM_SPIN_US if set, else `fallback`.
inline std::chrono::microseconds spin_from_env(std::chrono::microseconds fallback) {
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

/// One posted send or receive.
struct MailOp {
  bool is_send = false;
  int peer = -1;
  MessageKind kind = MessageKind::p2p;
  int tag = 0;
  at::Tensor tensor;  // contiguous: what is sent, or where the message lands
  std::int64_t bytes = 0;
  // progress
  bool header_done = false;  // send: its header is in the ring
  std::int64_t done = 0;     // bytes of the (padded) payload written or read
  bool complete = false;
  std::string error;  // set with complete when it failed

  std::string describe() const {
    std::string s = std::string(is_send ? message_kind_name(kind) : "recv") +
                    (is_send ? " to rank " : " from rank ") + std::to_string(peer);
    if (kind == MessageKind::p2p) s += " with tag " + std::to_string(tag);
    return s + " (" + c10::toString(tensor.scalar_type()) + ", " + std::to_string(bytes) +
           " bytes)";
  }
};

/// A message that arrived before its receive was posted, kept until one is.
struct Unexpected {
  MessageHeader header{};
  std::unique_ptr<char[]> data;
  bool complete = false;
  std::shared_ptr<MailOp> claimed;  // a receive posted while it was still arriving
};

class Mailbox {
 public:
  using Clock = std::chrono::steady_clock;

  /// `segment` holds the rings laid out by `layout`; `watchable[q]`: rank q's process can be
  /// checked for life from here.
  Mailbox(std::shared_ptr<Segment> segment, const Layout& layout, int rank, int size,
          std::vector<bool> watchable, std::chrono::microseconds spin)
      : segment_(std::move(segment)),
        layout_(layout),
        rank_(rank),
        size_(size),
        watchable_(std::move(watchable)),
        spin_(spin),
        outgoing_(static_cast<std::size_t>(size)),
        incoming_(static_cast<std::size_t>(size)) {}

  std::chrono::microseconds spin() const { return spin_; }

  /// Queues `tensor` (contiguous) for `peer` and writes as much of it as fits now.
  std::shared_ptr<MailOp> post_send(const at::Tensor& tensor, int peer, MessageKind kind, int tag) {
    auto op = make_op(true, tensor, peer, kind, tag);
    std::lock_guard<std::mutex> lock(mutex_);
    fail_if_broken(*op);
    outgoing_[static_cast<std::size_t>(peer)].push_back(op);
    progress();
    return op;
  }

  /// Posts a receive into `tensor` (contiguous); takes a message already here if there is one.
  std::shared_ptr<MailOp> post_recv(const at::Tensor& tensor, int peer, MessageKind kind, int tag) {
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

  /// Moves what can be moved now; true if every op is complete (failed ones included).
  bool test(const std::vector<std::shared_ptr<MailOp>>& ops) {
    std::lock_guard<std::mutex> lock(mutex_);
    progress();
    return all_complete(ops);
  }

  /// Waits until every op is complete, making progress; throws std::runtime_error naming the
  /// first op that failed, the peer that died, or what was still missing at the deadline.
  void wait(const std::vector<std::shared_ptr<MailOp>>& ops, std::chrono::milliseconds timeout) {
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

 private:
  using Key = std::tuple<int, int, int>;  // peer, kind, tag

  /// The message a ring from one peer is in the middle of.
  struct Reading {
    bool active = false;
    MessageHeader header{};
    char* destination = nullptr;  // null: drop the bytes (the receive failed)
    std::shared_ptr<MailOp> op;   // the posted receive it goes to, or
    std::shared_ptr<Unexpected> aside;
    std::int64_t done = 0;
    std::uint64_t number = 0;  // messages read from this ring so far
  };

  struct Outgoing : std::deque<std::shared_ptr<MailOp>> {
    std::uint64_t number = 0;  // messages written to this ring so far
  };

  std::shared_ptr<MailOp> make_op(bool is_send, const at::Tensor& tensor, int peer,
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
    op->bytes = static_cast<std::int64_t>(tensor.numel()) *
                static_cast<std::int64_t>(tensor.element_size());
    return op;
  }

  void fail_if_broken(const MailOp& op) const {
    if (!broken_.empty())
      throw RuntimeError("mpp: " + op.describe() +
                         " over shared memory was not started: an earlier point-to-point "
                         "operation of this group failed (" +
                         broken_ + ")");
  }

  RankBlock& block(int q) const {
    return reinterpret_cast<RankBlock*>(segment_->base() + layout_.blocks)[q];
  }
  RingCursors& cursors(int from, int to) const {
    return *reinterpret_cast<RingCursors*>(segment_->base() + layout_.ring(from, to));
  }
  char* ring_data(int from, int to) const {
    return segment_->base() + layout_.ring(from, to) + sizeof(RingCursors);
  }

  /// Tells rank q that one of its rings moved; wakes it only if it sleeps.
  void ring_bell(int q) const {
    RankBlock& b = block(q);
    b.bell.fetch_add(1, std::memory_order_seq_cst);
    if (b.sleepers.load(std::memory_order_seq_cst) != 0) futex_wake_all(b.bell);
  }

  static bool all_complete(const std::vector<std::shared_ptr<MailOp>>& ops) {
    return std::all_of(ops.begin(), ops.end(), [](const auto& op) { return op->complete; });
  }

  static void rethrow(const std::vector<std::shared_ptr<MailOp>>& ops) {
    for (const auto& op : ops)
      if (!op->error.empty()) throw RuntimeError(op->error);
  }

  /// Publishes this rank's CPU; true if a peer that an incomplete op waits for last ran on it.
  bool peer_shares_cpu(const std::vector<std::shared_ptr<MailOp>>& ops) const {
    const int cpu = ::sched_getcpu();
    block(rank_).cpu.store(cpu, std::memory_order_relaxed);
    for (const auto& op : ops)
      if (!op->complete && block(op->peer).cpu.load(std::memory_order_relaxed) == cpu) return true;
    return false;
  }

  /// One pass over every ring of this rank: write pending sends, read arriving messages.
  void progress() {
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

  /// Writes the queued sends to rank q, in order, as far as the ring has room.
  void write_to(int q) {
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

  void publish_written(RingCursors& ring, int q, std::uint64_t written) {
    if (ring.written.load(std::memory_order_relaxed) == written) return;
    ring.written.store(written, std::memory_order_release);
    ring_bell(q);
  }

  /// Reads what rank q has written: whole messages and parts of the current one.
  void read_from(int q) {
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

  /// A header was read: decide where the bytes go.
  void begin_message(int q, Reading& in, const MessageHeader& h) {
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

  void end_message(Reading& in) {
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

  /// Completes `op` with a message that waited aside.
  static void deliver(const Unexpected& message, MailOp& op) {
    const std::string mismatch = mismatch_text(message.header, op);
    if (mismatch.empty() && op.bytes > 0)
      std::memcpy(op.tensor.data_ptr(), message.data.get(), static_cast<std::size_t>(op.bytes));
    op.error = mismatch;
    op.complete = true;
  }

  static std::string mismatch_text(const MessageHeader& h, const MailOp& op) {
    const auto sent = static_cast<at::ScalarType>(h.dtype);
    if (h.bytes == op.bytes && sent == op.tensor.scalar_type()) return "";
    return "mpp: " + op.describe() + " got a message of " + c10::toString(sent) + " with " +
           std::to_string(h.numel) + " elements (" + std::to_string(h.bytes) +
           " bytes); the sender and the receiver must use tensors of the same dtype and size";
  }

  void fail_everything(const std::string& why) {
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

  static void fail(MailOp& op, const std::string& why) {
    if (op.complete) return;
    op.error = why;
    op.complete = true;
  }

  /// Whether the message a receive waits for is partly here.
  bool arriving(const MailOp& op) const {
    const Reading& in = incoming_[static_cast<std::size_t>(op.peer)];
    return in.active && (in.op.get() == &op || (in.aside && in.aside->claimed.get() == &op));
  }

  /// Throws if a peer that an incomplete op needs has exited.
  void check_peers_alive(const std::vector<std::shared_ptr<MailOp>>& ops) {
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

  std::string timeout_text(const std::vector<std::shared_ptr<MailOp>>& ops,
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

  /// Copies into the ring; large copies with streaming stores (see copy_to_slot).
  static void copy_in(char* dst, const char* src, std::size_t n) {
    if (n >= streaming_threshold)
      copy_to_slot(dst, src, n);
    else
      std::memcpy(dst, src, n);
  }

  static constexpr std::uint64_t max_fragment = 256 * 1024;  // published as it is written
  /// How often a spinning rank yields its CPU when no peer it waits for shares it.
  static constexpr std::chrono::microseconds yield_every{500};
  static constexpr std::size_t streaming_threshold = 64 * 1024;

  std::shared_ptr<Segment> segment_;
  Layout layout_;
  int rank_;
  int size_;
  std::vector<bool> watchable_;
  std::chrono::microseconds spin_;

  std::mutex mutex_;
  std::vector<Outgoing> outgoing_;
  std::vector<Reading> incoming_;
  std::map<Key, std::deque<std::shared_ptr<MailOp>>> posted_;
  std::map<Key, std::deque<std::shared_ptr<Unexpected>>> unexpected_;
  std::string broken_;  // after a failure the rings cannot be trusted
};

}  // namespace mpp::detail::shm
