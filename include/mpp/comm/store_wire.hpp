#pragma once
// The rendezvous store's wire format (store.hpp says what the store is for).
//
// Protocol, every integer little-endian:
//   frame    = u32 length, then `length` bytes: u8 opcode, then the fields of the opcode
//   string   = u32 length, then the bytes            int64 = 8 bytes
//   requests : hello(magic, session) set(key, value) get(key) add(key, int64)
//              compare_set(key, old, new)
//              check(n, keys...) wait(n, keys...) delete(key) num_keys()
//   replies  : the same framing; hello echoes the magic, get/compare_set return a value,
//              add/num_keys an int64, check/delete one byte, set/wait an empty frame.
// The first frame of a connection must be `hello` with the magic and the session the client
// belongs to (e.g. the attempt of a restarted job); a server of another session answers with its
// own session and no more, so that a rank never meets the still-running store of an earlier
// attempt (the client retries until that one is gone and the new one serves). get and wait are
// answered only once their keys exist (the client bounds its own wait and drops the connection on
// expiry, so a late answer can never be mistaken for the reply to a later request).
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include "mpp/config.hpp"

namespace mpp {

namespace detail::store_wire {

enum StoreOp : std::uint8_t {
  hello = 1,
  set = 2,
  get = 3,
  add = 4,
  compare_set = 5,
  check = 6,
  wait = 7,
  erase = 8,
  num_keys = 9
};

inline constexpr std::string_view magic = "mpp-store/1";
/// Largest frame accepted (values are addresses and small records; this bounds what one
/// connection can make the server buffer).
inline constexpr std::uint32_t max_frame = 64u << 20;

using Clock = std::chrono::steady_clock;

MPP_DECL void put_u32(std::string& out, std::uint32_t v);
MPP_DECL void put_i64(std::string& out, std::int64_t value);
MPP_DECL void put_bytes(std::string& out, const void* data, std::size_t n);
inline void put_str(std::string& out, std::string_view s) { put_bytes(out, s.data(), s.size()); }
MPP_DECL std::uint32_t get_u32(const char* p);

/// Reads the fields of one frame; any overrun means the peer sent garbage.
struct Reader {
  std::string_view data;
  struct Malformed {};

  MPP_DECL std::string_view take(std::size_t n);
  std::uint8_t u8() { return static_cast<std::uint8_t>(take(1)[0]); }
  std::uint32_t u32() { return get_u32(take(4).data()); }
  MPP_DECL std::int64_t i64();
  std::string_view str() { return take(u32()); }
};

/// Wraps a frame body with its length prefix.
MPP_DECL std::string frame(const std::string& body);

inline std::string errno_text(int err) { return std::strerror(err); }

inline void set_nonblocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL, 0) | O_NONBLOCK); }
MPP_DECL void set_nodelay(int fd);

MPP_DECL int ms_until(Clock::time_point deadline);

}  // namespace detail::store_wire

}  // namespace mpp

#ifndef MPP_SEPARATE_COMPILATION
#include "mpp/comm/impl/store_wire.ipp"
#endif
