#pragma once
// The shared-memory segment of a Shm group and what its ranks synchronise with: the layout (rank
// blocks with their progress counters, the collectives' chunk buffers, one ring per ordered pair
// of ranks for point-to-point messages), futex waits, the check that every rank shares this host,
// and the creation of the segment by rank 0.
//
// The segment (/dev/shm/mpp-shm-<pid>-<random>, <pid> being rank 0's) is unlinked as soon as every
// rank has mapped it, so nothing is left behind however the job ends afterwards. Only a job killed
// during those few milliseconds of its start-up can leave one; the next Shm group created on the
// host removes every mpp-shm segment of this user whose creating process is gone
// (remove_stale_segments).
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <dirent.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include "mpp/comm/error.hpp"
#include "mpp/config.hpp"

namespace mpp::detail::shm {

using Clock = std::chrono::steady_clock;

static_assert(std::atomic<std::uint32_t>::is_always_lock_free &&
                  sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t),
              "mpp: the Shm backend waits on its counters with futexes: it needs lock-free "
              "32-bit atomics");

constexpr std::uint64_t segment_magic = 0x326d68732d70706dULL;  // "mpp-shm2"

constexpr std::size_t max_buffers = 16;

/// One counter per cache line, so ranks publishing progress do not invalidate each other's.
struct alignas(64) Counter {
  std::atomic<std::uint32_t> value;
};

/// What a rank put into a chunk; compared across ranks to catch collectives called differently.
struct ChunkTag {
  std::uint64_t op;  // number of the collective on this group (1, 2, ...)
  std::int64_t numel;
  std::int32_t dtype;
  std::int32_t reduce;  // the reduce op; -1 for an all-gather
  std::uint64_t runs;   // all-gather, reduce-scatter: a hash of who owns which run (else 0)
  std::int32_t kind;    // Kind
};

struct alignas(64) RankBlock {
  Counter arrived;            // chunks this rank has copied in
  Counter consumed;           // chunks this rank has finished reading
  ChunkTag tag[max_buffers];  // per buffer; written before `arrived` is released
  std::int32_t pid;
  /// Point-to-point: a peer that writes into a ring towards this rank, or frees space in a ring
  /// from it, bumps the bell; `sleepers` says whether it must also wake this rank's futex.
  alignas(64) std::atomic<std::uint32_t> bell;
  alignas(64) std::atomic<std::uint32_t> sleepers;
  /// The CPU this rank last ran point-to-point code on: a rank spinning for a peer that is
  /// queued on its own CPU yields it.
  alignas(64) std::atomic<std::int32_t> cpu;
};

/// Point-to-point: one ring of bytes per ordered pair of ranks. The sender alone advances
/// `written`, the receiver alone `read`; both only grow (bytes since the group began).
struct alignas(64) RingCursors {
  alignas(64) std::atomic<std::uint64_t> written;
  alignas(64) std::atomic<std::uint64_t> read;
};
static_assert(std::atomic<std::uint64_t>::is_always_lock_free,
              "mpp: the Shm backend's rings need lock-free 64-bit atomics");

struct alignas(64) Header {
  std::uint64_t magic;
  std::uint64_t chunk_bytes;
  std::uint64_t buffers;
  std::uint64_t ring_bytes;
  std::uint32_t world;
};

/// Where everything lives in the segment: the header, one RankBlock per rank, the collectives'
/// buffers (buffers x ranks slots of chunk_bytes) and the point-to-point rings (ranks x ranks, the
/// diagonal unused, each RingCursors then ring_bytes of data).
struct Layout {
  std::size_t chunk_bytes = 0;
  std::size_t buffers = 0;
  std::size_t ring_bytes = 0;
  int world = 0;
  std::size_t blocks = 0;  // offset of the rank blocks
  std::size_t data = 0;    // offset of the buffers
  std::size_t rings = 0;   // offset of the rings
  std::size_t total = 0;
  Layout() = default;
  Layout(std::size_t chunk, std::size_t depth, std::size_t ring, int ranks)
      : chunk_bytes(chunk), buffers(depth), ring_bytes(ring), world(ranks) {
    const auto n = static_cast<std::size_t>(ranks);
    blocks = sizeof(Header);
    data = (blocks + sizeof(RankBlock) * n + 4095) / 4096 * 4096;
    rings = data + depth * n * chunk;
    total = rings + n * n * ring_stride();
  }
  std::size_t ring_stride() const { return sizeof(RingCursors) + ring_bytes; }
  /// Offset of the cursors of the ring from rank `from` to rank `to`; its data follows them.
  std::size_t ring(int from, int to) const {
    return rings + (static_cast<std::size_t>(from) * static_cast<std::size_t>(world) +
                    static_cast<std::size_t>(to)) *
                       ring_stride();
  }
};

/// Counters wrap around at 2^32 chunks; compare them as distances.
inline bool reached(std::uint32_t value, std::uint32_t target) {
  return static_cast<std::int32_t>(value - target) >= 0;
}

inline void futex_wake_all(std::atomic<std::uint32_t>& word) {
  ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAKE, INT_MAX, nullptr,
            nullptr, 0);
}

/// Sleeps while `word` still holds `seen`, at most `limit` (spurious returns are fine).
inline void futex_wait(std::atomic<std::uint32_t>& word, std::uint32_t seen,
                       std::chrono::microseconds limit) {
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(limit.count() / 1'000'000);
  ts.tv_nsec = static_cast<long>(limit.count() % 1'000'000) * 1000;
  ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAIT, seen, &ts, nullptr, 0);
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

MPP_DECL std::string rank_list(const std::vector<int>& ranks);

MPP_DECL std::string duration_text(std::chrono::milliseconds d);

/// A process that no longer runs (or is a zombie waiting to be reaped).
MPP_DECL bool process_gone(std::int32_t pid);

/// Which host this process runs on: the host name and the kernel's boot id (two machines can
/// share a name). MPP_SHM_HOST_ID overrides it, for containers of one host that share /dev/shm
/// but not their host names.
MPP_DECL std::string host_identity();

inline std::vector<uint8_t> bytes_of(const std::string& text) { return {text.begin(), text.end()}; }

inline std::string text_of(const std::vector<uint8_t>& bytes) {
  return {bytes.begin(), bytes.end()};
}

/// Waits until `<base><r>` exists for every rank r; past the deadline throws naming the missing.
MPP_DECL void wait_for_ranks(c10d::Store& store, const std::string& base, int size,
                             Clock::time_point deadline, std::chrono::milliseconds timeout,
                             const std::string& what);

/// Refuses a group whose ranks are not all on this host: they could not share the segment.
MPP_DECL void check_one_host(c10d::Store& store, int rank, int size,
                             std::chrono::milliseconds timeout);

/// A mapped shared-memory segment; unlinks its name at the latest when destroyed.
class Segment {
 public:
  Segment(std::string name, void* base, std::size_t size)
      : name_(std::move(name)), base_(static_cast<char*>(base)), size_(size) {}
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;
  MPP_DECL ~Segment();

  /// Removes the name (the mapping stays valid); idempotent, and a peer may have done it first.
  MPP_DECL void unlink();

  char* base() const { return base_; }
  std::size_t size() const { return size_; }
  const std::string& name() const { return name_; }

 private:
  std::string name_;
  char* base_;
  std::size_t size_;
  bool unlinked_ = false;
};

inline std::string errno_text(int error) { return std::strerror(error); }

/// Maps the segment with its pages already in this process's page table (MAP_POPULATE): a first
/// touch is a page fault, and under a virtual machine's paging each cost ~30 us, which a ring of
/// small messages would otherwise pay every other message until it has wrapped around once.
MPP_DECL std::unique_ptr<Segment> map_fd(int fd, const std::string& name, std::size_t size);

/// Removes the segments (/dev/shm/mpp-shm-<pid>-*) that a job killed during its start-up left
/// behind: those of this user whose creating process <pid> no longer exists. A live job's segment
/// is never touched (its rank 0 runs). Returns how many were removed.
MPP_DECL int remove_stale_segments();

/// Rank 0 creates the segment and publishes its name; every rank maps it and says so; the name
/// is unlinked once all have, so a crash later leaves nothing in /dev/shm.
MPP_DECL std::unique_ptr<Segment> open_segment(c10d::Store& store, int rank, int size,
                                               const Layout& layout,
                                               std::chrono::milliseconds timeout);

/// Copies `n` bytes into this rank's slot with non-temporal stores, which write whole cache lines
/// to memory without first reading them in. The peers read the slot from another core, so a
/// plain memcpy's stores must first take every line back from the core that read it last: on the
/// 2-core EPYC VMs the docs were measured on that made a 64 MiB all-reduce take 9.5 ms in some
/// runs and 33 ms in others (the memcpy then took five times the reduction); streaming stores
/// took 12 ms in every run. The fence orders them before the release that publishes the chunk.
MPP_DECL void copy_to_slot(char* dst, const char* src, std::size_t n);

/// Copies elements [from, to) of `bytes` into `slot`, which holds the chunk starting at element
/// `lo`; nothing when the range is empty.
MPP_DECL void copy_range_to_slot(char* slot, const char* bytes, std::int64_t lo, std::int64_t from,
                                 std::int64_t to, std::size_t element);

}  // namespace mpp::detail::shm

#ifndef MPP_SEPARATE_COMPILATION
#include "mpp/comm/impl/shm_segment.ipp"
#endif
