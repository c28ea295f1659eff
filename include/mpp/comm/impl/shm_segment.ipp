#pragma once
// The definitions of shm_segment.hpp's functions that are not templates: included by the header
// (inline) unless MPP_SEPARATE_COMPILATION is defined, else compiled once by mpp/impl/src.hpp.
#include "mpp/comm/shm_segment.hpp"

namespace mpp::detail::shm {

MPP_DECL std::string rank_list(const std::vector<int>& ranks) {
  std::string s = "[";
  for (std::size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s + "]";
}

MPP_DECL std::string duration_text(std::chrono::milliseconds d) {
  if (d.count() % 1000 == 0) return std::to_string(d.count() / 1000) + " s";
  return std::to_string(d.count()) + " ms";
}

MPP_DECL bool process_gone(std::int32_t pid) {
  if (::kill(pid, 0) != 0 && errno == ESRCH) return true;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  std::getline(stat, text);
  const auto close = text.rfind(')');
  if (close == std::string::npos || close + 2 >= text.size()) return false;
  return text[close + 2] == 'Z' || text[close + 2] == 'X';
}

MPP_DECL std::string host_identity() {
  if (const char* id = std::getenv("MPP_SHM_HOST_ID"); id != nullptr && *id) return id;
  char name[256] = {};
  ::gethostname(name, sizeof(name) - 1);
  std::ifstream boot("/proc/sys/kernel/random/boot_id");
  std::string boot_id;
  std::getline(boot, boot_id);
  return std::string(name) + " (boot " + boot_id + ")";
}

MPP_DECL void wait_for_ranks(c10d::Store& store, const std::string& base, int size,
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

MPP_DECL void check_one_host(c10d::Store& store, int rank, int size,
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

Segment::~Segment() {
  unlink();
  if (base_ != nullptr) ::munmap(base_, size_);
}

void Segment::unlink() {
  if (unlinked_) return;
  unlinked_ = true;
  ::shm_unlink(name_.c_str());
}

MPP_DECL std::unique_ptr<Segment> map_fd(int fd, const std::string& name, std::size_t size) {
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

MPP_DECL int remove_stale_segments() {
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

MPP_DECL std::unique_ptr<Segment> open_segment(c10d::Store& store, int rank, int size,
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

MPP_DECL void copy_to_slot(char* dst, const char* src, std::size_t n) {
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

MPP_DECL void copy_range_to_slot(char* slot, const char* bytes, std::int64_t lo, std::int64_t from,
                                 std::int64_t to, std::size_t element) {
  if (from < to)
    copy_to_slot(slot + static_cast<std::size_t>(from - lo) * element,
                 bytes + static_cast<std::size_t>(from) * element,
                 static_cast<std::size_t>(to - from) * element);
}

}  // namespace mpp::detail::shm
