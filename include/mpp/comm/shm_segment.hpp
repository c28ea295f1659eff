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

inline std::string rank_list(const std::vector<int>& ranks) {
  std::string s = "[";
  for (std::size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s + "]";
}

inline std::string duration_text(std::chrono::milliseconds d) {
  if (d.count() % 1000 == 0) return std::to_string(d.count() / 1000) + " s";
  return std::to_string(d.count()) + " ms";
}

/// A process that no longer runs (or is a zombie waiting to be reaped).
inline bool process_gone(std::int32_t pid) {
  if (::kill(pid, 0) != 0 && errno == ESRCH) return true;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  std::getline(stat, text);
  const auto close = text.rfind(')');
  if (close == std::string::npos || close + 2 >= text.size()) return false;
  return text[close + 2] == 'Z' || text[close + 2] == 'X';
}

/// Which host this process runs on: the host name and the kernel's boot id (two machines can
/// share a name). MPP_SHM_HOST_ID overrides it, for containers of one host that share /dev/shm
/// but not their host names.
inline std::string host_identity() {
  if (const char* id = std::getenv("MPP_SHM_HOST_ID"); id != nullptr && *id) return id;
  char name[256] = {};
  ::gethostname(name, sizeof(name) - 1);
  std::ifstream boot("/proc/sys/kernel/random/boot_id");
  std::string boot_id;
  std::getline(boot, boot_id);
  return std::string(name) + " (boot " + boot_id + ")";
}

inline std::vector<uint8_t> bytes_of(const std::string& text) { return {text.begin(), text.end()}; }

inline std::string text_of(const std::vector<uint8_t>& bytes) {
  return {bytes.begin(), bytes.end()};
}

/// Waits until `<base><r>` exists for every rank r; past the deadline throws naming the missing.
inline void wait_for_ranks(c10d::Store& store, const std::string& base, int size,
                           Clock::time_point deadline, std::chrono::milliseconds timeout,
                           const std::string& what) {
  std::vector<int> missing;
  for (int r = 0; r < size; ++r) missing.push_back(r);
  auto pause = std::chrono::milliseconds(1);
  for (;;) {
    std::vector<int> still;
    for (int r : missing)
      if (!store.check({base + std::to_string(r)})) still.push_back(r);
    missing = std::move(still);
    if (missing.empty()) return;
    if (Clock::now() >= deadline)
      throw CommTimeout("init", missing.front(), timeout,
                        "mpp: creating the Shm group timed out: rank(s) " + rank_list(missing) +
                            " did not " + what + " within " + duration_text(timeout) +
                            "; they exited, crashed or are stuck during start-up (look at their "
                            "logs)");
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
  }
}

/// Refuses a group whose ranks are not all on this host: they could not share the segment.
inline void check_one_host(c10d::Store& store, int rank, int size,
                           std::chrono::milliseconds timeout) {
  const std::string mine = host_identity();
  store.set("shm/host/" + std::to_string(rank), bytes_of(mine));
  wait_for_ranks(store, "shm/host/", size, Clock::now() + timeout, timeout, "report their host");
  std::vector<std::string> hosts;
  for (int q = 0; q < size; ++q)
    hosts.push_back(text_of(store.get("shm/host/" + std::to_string(q))));
  for (int q = 0; q < size; ++q) {
    if (hosts[static_cast<std::size_t>(q)] == mine) continue;
    // Every rank fails alike; the one serving the store must not leave (and close it) before
    // the others have read the hosts, so all say who is where before throwing.
    try {
      store.set("shm/host-seen/" + std::to_string(rank), bytes_of("1"));
      wait_for_ranks(
          store, "shm/host-seen/", size,
          Clock::now() + std::min<std::chrono::milliseconds>(timeout, std::chrono::seconds(5)),
          timeout, "compare hosts");
    } catch (const std::exception&) {
      // a peer already left: what this rank reports is known
    }
    throw CommError("init", q,
                    "mpp: the Shm backend needs every rank of the group on one host, but rank " +
                        std::to_string(q) + " runs on '" + hosts[static_cast<std::size_t>(q)] +
                        "' and rank " + std::to_string(rank) + " on '" + mine +
                        "'; use Gloo across hosts (init_process_group<Gloo>(), "
                        "DDP<Async<Gloo>>), or Shm only for a sub-group of ranks that share a "
                        "host");
  }
}

/// A mapped shared-memory segment; unlinks its name at the latest when destroyed.
class Segment {
 public:
  Segment(std::string name, void* base, std::size_t size)
      : name_(std::move(name)), base_(static_cast<char*>(base)), size_(size) {}
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;
  ~Segment() {
    unlink();
    if (base_ != nullptr) ::munmap(base_, size_);
  }

  /// Removes the name (the mapping stays valid); idempotent, and a peer may have done it first.
  void unlink() {
    if (unlinked_) return;
    unlinked_ = true;
    ::shm_unlink(name_.c_str());
  }

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
inline std::unique_ptr<Segment> map_fd(int fd, const std::string& name, std::size_t size) {
  void* base = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  const int error = errno;
  ::close(fd);
  if (base == MAP_FAILED) {
    ::shm_unlink(name.c_str());
    throw CommError("init", -1,
                    "mpp: cannot map the shared-memory segment " + name + " (" +
                        std::to_string(size >> 20) + " MiB): " + errno_text(error) +
                        "; use Gloo, or lower Shm::chunk_bytes or Shm::ring_bytes");
  }
  return std::make_unique<Segment>(name, base, size);
}

/// Removes the segments (/dev/shm/mpp-shm-<pid>-*) that a job killed during its start-up left
/// behind: those of this user whose creating process <pid> no longer exists. A live job's segment
/// is never touched (its rank 0 runs). Returns how many were removed.
inline int remove_stale_segments() {
  DIR* dir = ::opendir("/dev/shm");
  if (dir == nullptr) return 0;
  int removed = 0;
  const std::string prefix = "mpp-shm-";
  while (const dirent* entry = ::readdir(dir)) {
    const std::string file = entry->d_name;
    if (file.rfind(prefix, 0) != 0) continue;
    char* end = nullptr;
    const long pid = std::strtol(file.c_str() + prefix.size(), &end, 10);
    if (pid <= 0 || end == nullptr || *end != '-') continue;
    struct stat info {};
    if (::fstatat(::dirfd(dir), file.c_str(), &info, AT_SYMLINK_NOFOLLOW) != 0 ||
        info.st_uid != ::geteuid())
      continue;
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;  // still running
    if (::shm_unlink(("/" + file).c_str()) == 0) ++removed;
  }
  ::closedir(dir);
  return removed;
}

/// Rank 0 creates the segment and publishes its name; every rank maps it and says so; the name
/// is unlinked once all have, so a crash later leaves nothing in /dev/shm.
inline std::unique_ptr<Segment> open_segment(c10d::Store& store, int rank, int size,
                                             const Layout& layout,
                                             std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  std::unique_ptr<Segment> segment;
  if (rank == 0) {
    remove_stale_segments();
    std::random_device random;
    char suffix[32];
    std::snprintf(suffix, sizeof(suffix), "%08x%08x", random(), random());
    const std::string name = "/mpp-shm-" + std::to_string(::getpid()) + "-" + std::string(suffix);
    const int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0)
      throw CommError("init", -1,
                      "mpp: cannot create the shared-memory segment /dev/shm" + name + ": " +
                          errno_text(errno) +
                          "; check that /dev/shm is mounted and writable, or "
                          "use Gloo");
    // Reserve the pages now: on a full /dev/shm a later first touch would be a SIGBUS.
    if (const int error = ::posix_fallocate(fd, 0, static_cast<off_t>(layout.total)); error != 0) {
      ::close(fd);
      ::shm_unlink(name.c_str());
      throw CommError("init", -1,
                      "mpp: cannot reserve " + std::to_string(layout.total >> 20) +
                          " MiB in /dev/shm for the Shm backend: " + errno_text(error) +
                          "; enlarge /dev/shm (e.g. docker --shm-size), lower Shm::chunk_bytes or "
                          "Shm::ring_bytes "
                          "or use Gloo");
    }
    segment = map_fd(fd, name, layout.total);
    auto* header = reinterpret_cast<Header*>(segment->base());
    header->magic = segment_magic;
    header->chunk_bytes = layout.chunk_bytes;
    header->buffers = layout.buffers;
    header->ring_bytes = layout.ring_bytes;
    header->world = static_cast<std::uint32_t>(size);
    store.set("shm/name", bytes_of(name));
  } else {
    auto pause = std::chrono::milliseconds(1);
    while (!store.check({"shm/name"})) {
      if (Clock::now() >= deadline)
        throw CommTimeout("init", 0, timeout,
                          "mpp: creating the Shm group timed out: rank 0 did not publish the "
                          "shared-memory segment within " +
                              duration_text(timeout) + "; it exited, crashed or is stuck");
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::milliseconds(50));
    }
    const std::string name = text_of(store.get("shm/name"));
    const int fd = ::shm_open(name.c_str(), O_RDWR, 0600);
    if (fd < 0)
      throw CommError("init", 0,
                      "mpp: rank " + std::to_string(rank) +
                          " cannot open the shared-memory segment /dev/shm" + name +
                          " created by rank 0: " + errno_text(errno) +
                          "; the ranks do not share /dev/shm (separate containers?): use Gloo");
    struct stat info {};
    if (::fstat(fd, &info) != 0 || static_cast<std::size_t>(info.st_size) != layout.total) {
      ::close(fd);
      throw CommError(
          "init", 0,
          "mpp: the shared-memory segment " + name + " has " + std::to_string(info.st_size) +
              " bytes, this rank expects " + std::to_string(layout.total) +
              "; every rank must be built with the same Shm::chunk_bytes and Shm::ring_bytes");
    }
    segment = map_fd(fd, name, layout.total);
    const auto* header = reinterpret_cast<const Header*>(segment->base());
    if (header->magic != segment_magic || header->chunk_bytes != layout.chunk_bytes ||
        header->buffers != layout.buffers || header->ring_bytes != layout.ring_bytes ||
        header->world != static_cast<std::uint32_t>(size))
      throw CommError(
          "init", 0,
          "mpp: the shared-memory segment " + name +
              " was laid out for another group (chunk, ring or world size differ); every "
              "rank must run the same build");
  }
  auto* block = reinterpret_cast<RankBlock*>(segment->base() + layout.blocks) + rank;
  block->pid = static_cast<std::int32_t>(::getpid());
  store.set("shm/mapped/" + std::to_string(rank), bytes_of("1"));
  wait_for_ranks(store, "shm/mapped/", size, deadline, timeout, "map the shared-memory segment");
  segment->unlink();
  return segment;
}

/// Copies `n` bytes into this rank's slot with non-temporal stores, which write whole cache lines
/// to memory without first reading them in. The peers read the slot from another core, so a
/// plain memcpy's stores must first take every line back from the core that read it last: on the
/// 2-core EPYC VMs the docs were measured on that made a 64 MiB all-reduce take 9.5 ms in some
/// runs and 33 ms in others (the memcpy then took five times the reduction); streaming stores
/// took 12 ms in every run. The fence orders them before the release that publishes the chunk.
inline void copy_to_slot(char* dst, const char* src, std::size_t n) {
#if defined(__x86_64__)
  std::size_t i = 0;
  const std::size_t head = (16 - reinterpret_cast<std::uintptr_t>(dst) % 16) % 16;
  if (n >= head + 64) {
    std::memcpy(dst, src, head);
    for (i = head; i + 64 <= n; i += 64) {
      const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
      const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 16));
      const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 32));
      const __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 48));
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i), a);
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 16), b);
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 32), c);
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 48), d);
    }
  }
  std::memcpy(dst + i, src + i, n - i);
  _mm_sfence();
#else
  std::memcpy(dst, src, n);
#endif
}

/// Copies elements [from, to) of `bytes` into `slot`, which holds the chunk starting at element
/// `lo`; nothing when the range is empty.
inline void copy_range_to_slot(char* slot, const char* bytes, std::int64_t lo, std::int64_t from,
                               std::int64_t to, std::size_t element) {
  if (from < to)
    copy_to_slot(slot + static_cast<std::size_t>(from - lo) * element,
                 bytes + static_cast<std::size_t>(from) * element,
                 static_cast<std::size_t>(to - from) * element);
}

}  // namespace mpp::detail::shm
