#pragma once
// The definitions of shm_reduce.hpp's functions that are not templates: included by the header
// (inline) unless MPP_SEPARATE_COMPILATION is defined, else compiled once by mpp/impl/src.hpp.
#include "mpp/comm/shm_reduce.hpp"

namespace mpp::detail::shm {

MPP_DECL std::string op_text(RedOp op) {
  switch (op) {
    case RedOp::SUM:
      return "sum";
    case RedOp::AVG:
      return "avg";
    case RedOp::PRODUCT:
      return "product";
    case RedOp::MIN:
      return "min";
    case RedOp::MAX:
      return "max";
    default:
      return "op " + std::to_string(static_cast<int>(op));
  }
}

MPP_DECL std::string tag_text(const ChunkTag& t) {
  std::string text =
      std::string(kind_name(static_cast<Kind>(t.kind))) + " #" + std::to_string(t.op) + " of " +
      c10::toString(static_cast<at::ScalarType>(t.dtype)) + "[" + std::to_string(t.numel) + "]";
  if (t.reduce >= 0) text += " " + op_text(static_cast<RedOp>(t.reduce));
  if (static_cast<Kind>(t.kind) != Kind::all_reduce)
    text += " (owned runs " + std::to_string(t.runs) + ")";
  return text;
}

MPP_DECL std::uint64_t runs_hash(const std::vector<std::pair<std::int64_t, std::int64_t>>& runs) {
  std::uint64_t h = 1469598103934665603ULL;
  auto mix = [&](std::int64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= static_cast<std::uint64_t>(v >> (8 * i)) & 0xff;
      h *= 1099511628211ULL;
    }
  };
  for (const auto& [offset, numel] : runs) {
    mix(offset);
    mix(numel);
  }
  return h;
}

MPP_DECL void reduce_chunk(at::ScalarType dtype, RedOp op, void* out,
                           const std::vector<const char*>& in, std::size_t n,
                           std::vector<float>& scratch) {
  if (n == 0) return;
  switch (dtype) {
    case at::kFloat: {
      std::vector<const float*> p;
      for (auto* s : in) p.push_back(reinterpret_cast<const float*>(s));
      fold(static_cast<float*>(out), p, n, op);
      return;
    }
    case at::kDouble: {
      std::vector<const double*> p;
      for (auto* s : in) p.push_back(reinterpret_cast<const double*>(s));
      fold(static_cast<double*>(out), p, n, op);
      return;
    }
    case at::kBFloat16: {
      scratch.resize(n * in.size());
      std::vector<const float*> p;
      for (std::size_t q = 0; q < in.size(); ++q) {
        const auto* src = reinterpret_cast<const c10::BFloat16*>(in[q]);
        float* wide = scratch.data() + q * n;
        for (std::size_t i = 0; i < n; ++i) wide[i] = static_cast<float>(src[i]);
        p.push_back(wide);
      }
      float* acc = scratch.data();  // overwrites rank 0's widened copy, element by element
      fold(acc, p, n, op);
      auto* dst = static_cast<c10::BFloat16*>(out);
      for (std::size_t i = 0; i < n; ++i) dst[i] = c10::BFloat16(acc[i]);
      return;
    }
    default:
      throw LogicError("mpp: Shm reduction of an unsupported dtype");
  }
}

std::string Progress::describe(std::uint64_t number) {
  std::lock_guard<std::mutex> lock(mutex);
  std::string s;
  if (running != 0 && running < number)
    s = "it has not started: " + std::string(running_kind) + " #" + std::to_string(running) +
        " before it is still running";
  else
    s = "it is running";
  if (!waiting.empty()) s += " (" + waiting + ")";
  return s;
}

}  // namespace mpp::detail::shm
