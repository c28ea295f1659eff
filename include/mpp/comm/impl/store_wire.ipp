#pragma once
// The definitions of store_wire.hpp's functions that are not templates: included by the header
// (inline) unless MPP_SEPARATE_COMPILATION is defined, else compiled once by mpp/impl/src.hpp.
#include "mpp/comm/store_wire.hpp"

namespace mpp::detail::store_wire {

MPP_DECL void put_u32(std::string& out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

MPP_DECL void put_i64(std::string& out, std::int64_t value) {
  const auto v = static_cast<std::uint64_t>(value);
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

MPP_DECL void put_bytes(std::string& out, const void* data, std::size_t n) {
  put_u32(out, static_cast<std::uint32_t>(n));
  out.append(static_cast<const char*>(data), n);
}

MPP_DECL std::uint32_t get_u32(const char* p) {
  std::uint32_t v = 0;
  for (int i = 0; i < 4; ++i)
    v |= static_cast<std::uint32_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

std::string_view Reader::take(std::size_t n) {
  if (data.size() < n) throw Malformed{};
  auto s = data.substr(0, n);
  data.remove_prefix(n);
  return s;
}

std::int64_t Reader::i64() {
  auto s = take(8);
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i)
    v |= static_cast<std::uint64_t>(static_cast<unsigned char>(s[i])) << (8 * i);
  return static_cast<std::int64_t>(v);
}

MPP_DECL std::string frame(const std::string& body) {
  std::string out;
  out.reserve(body.size() + 4);
  put_u32(out, static_cast<std::uint32_t>(body.size()));
  out += body;
  return out;
}

MPP_DECL void set_nodelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

MPP_DECL int ms_until(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return static_cast<int>(std::clamp<long long>(left.count(), 0, 60'000));
}

}  // namespace mpp::detail::store_wire
