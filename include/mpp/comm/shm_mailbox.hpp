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
#include "mpp/config.hpp"
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
MPP_DECL std::chrono::microseconds spin_from_env(std::chrono::microseconds fallback);

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

  MPP_DECL std::string describe() const;
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
  MPP_DECL std::shared_ptr<MailOp> post_send(const at::Tensor& tensor, int peer, MessageKind kind,
                                             int tag);

  /// Posts a receive into `tensor` (contiguous); takes a message already here if there is one.
  MPP_DECL std::shared_ptr<MailOp> post_recv(const at::Tensor& tensor, int peer, MessageKind kind,
                                             int tag);

  /// Moves what can be moved now; true if every op is complete (failed ones included).
  MPP_DECL bool test(const std::vector<std::shared_ptr<MailOp>>& ops);

  /// Waits until every op is complete, making progress; throws std::runtime_error naming the
  /// first op that failed, the peer that died, or what was still missing at the deadline.
  MPP_DECL void wait(const std::vector<std::shared_ptr<MailOp>>& ops,
                     std::chrono::milliseconds timeout);

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

  MPP_DECL std::shared_ptr<MailOp> make_op(bool is_send, const at::Tensor& tensor, int peer,
                                           MessageKind kind, int tag) const;

  MPP_DECL void fail_if_broken(const MailOp& op) const;

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
  MPP_DECL void ring_bell(int q) const;

  MPP_DECL static bool all_complete(const std::vector<std::shared_ptr<MailOp>>& ops);

  MPP_DECL static void rethrow(const std::vector<std::shared_ptr<MailOp>>& ops);

  /// Publishes this rank's CPU; true if a peer that an incomplete op waits for last ran on it.
  MPP_DECL bool peer_shares_cpu(const std::vector<std::shared_ptr<MailOp>>& ops) const;

  /// One pass over every ring of this rank: write pending sends, read arriving messages.
  MPP_DECL void progress();

  /// Writes the queued sends to rank q, in order, as far as the ring has room.
  MPP_DECL void write_to(int q);

  MPP_DECL void publish_written(RingCursors& ring, int q, std::uint64_t written);

  /// Reads what rank q has written: whole messages and parts of the current one.
  MPP_DECL void read_from(int q);

  /// A header was read: decide where the bytes go.
  MPP_DECL void begin_message(int q, Reading& in, const MessageHeader& h);

  MPP_DECL void end_message(Reading& in);

  /// Completes `op` with a message that waited aside.
  MPP_DECL static void deliver(const Unexpected& message, MailOp& op);

  MPP_DECL static std::string mismatch_text(const MessageHeader& h, const MailOp& op);

  MPP_DECL void fail_everything(const std::string& why);

  MPP_DECL static void fail(MailOp& op, const std::string& why);

  /// Whether the message a receive waits for is partly here.
  MPP_DECL bool arriving(const MailOp& op) const;

  /// Throws if a peer that an incomplete op needs has exited.
  MPP_DECL void check_peers_alive(const std::vector<std::shared_ptr<MailOp>>& ops);

  MPP_DECL std::string timeout_text(const std::vector<std::shared_ptr<MailOp>>& ops,
                                    std::chrono::milliseconds timeout) const;

  /// Copies into the ring; large copies with streaming stores (see copy_to_slot).
  MPP_DECL static void copy_in(char* dst, const char* src, std::size_t n);

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

#ifndef MPP_SEPARATE_COMPILATION
#include "mpp/comm/impl/shm_mailbox.ipp"
#endif
