#pragma once
// The shape header: the first message of a step on each forward link between two stages says
// what the activations on that link are (dtype, per-sample shape, batch size and micro-batch
// count). The receiver checks it against what its first layer expects, so a mismatch fails with
// both shapes and both stages instead of a hang or a silent reinterpretation of bytes, and a
// stage that never sees the inputs learns the batch size (and so every micro-batch's size).
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "mpp/error.hpp"

namespace mpp {

/// A pipeline rule broken at run time (shapes, batch sizes, world size ...).
struct PipelineError : RuntimeError {
  /// Takes the message, as std::runtime_error does.
  using RuntimeError::RuntimeError;
};

/// dtype + per-sample shape, e.g. "Float[*, 128]".
struct ActivationSpec {
  /// Element type.
  c10::ScalarType dtype = c10::kFloat;
  /// Shape of one sample (without the batch dimension).
  std::vector<std::int64_t> per_sample;

  /// Same dtype and per-sample shape.
  bool operator==(const ActivationSpec&) const = default;
};

/// The spec as messages show it: "Float[*, 128]" (c10's dtype name, then the shape).
inline std::string to_string(const ActivationSpec& spec) {
  std::string s = std::string(c10::toString(spec.dtype)) + "[*";
  for (auto d : spec.per_sample) s += ", " + std::to_string(d);
  return s + "]";
}

namespace detail {

/// What `t` is as an activation: its dtype and its shape without the batch dimension.
inline ActivationSpec spec_of(const at::Tensor& t) {
  const auto sizes = t.sizes();
  return ActivationSpec{t.scalar_type(), {sizes.begin() + 1, sizes.end()}};
}

struct ShapeHeader {
  static constexpr int slots = 16;
  static constexpr int max_dims = slots - 6;
  static constexpr std::int64_t magic = 0x6D70702D73686170;  // "mpp-shap"

  int sender_stage = -1;
  std::int64_t batch = 0;
  int micro_batches = 0;
  ActivationSpec spec;

  at::Tensor encode() const {
    if (static_cast<int>(spec.per_sample.size()) > max_dims)
      throw PipelineError("mpp: stage " + std::to_string(sender_stage) + " sends activations of " +
                          std::to_string(spec.per_sample.size() + 1) + " dimensions; at most " +
                          std::to_string(max_dims + 1) +
                          " are supported between stages (flatten them)");
    at::Tensor t = at::empty({slots}, at::kLong);
    auto* p = t.data_ptr<std::int64_t>();
    for (int i = 0; i < slots; ++i) p[i] = 0;
    p[0] = magic;
    p[1] = sender_stage;
    p[2] = static_cast<std::int64_t>(spec.dtype);
    p[3] = batch;
    p[4] = micro_batches;
    p[5] = static_cast<std::int64_t>(spec.per_sample.size());
    for (std::size_t i = 0; i < spec.per_sample.size(); ++i) p[6 + i] = spec.per_sample[i];
    return t;
  }

  static at::Tensor buffer() { return at::empty({slots}, at::kLong); }

  static ShapeHeader decode(const at::Tensor& t, int expected_sender, int receiver_stage) {
    const auto* p = t.data_ptr<std::int64_t>();
    if (p[0] != magic || p[5] < 0 || p[5] > max_dims)
      throw PipelineError(
          "mpp: stage " + std::to_string(receiver_stage) + " expected a shape header from stage " +
          std::to_string(expected_sender) +
          " but received something else; every rank must run the same Pipeline type");
    ShapeHeader h;
    h.sender_stage = static_cast<int>(p[1]);
    h.spec.dtype = static_cast<c10::ScalarType>(p[2]);
    h.batch = p[3];
    h.micro_batches = static_cast<int>(p[4]);
    for (std::int64_t i = 0; i < p[5]; ++i) h.spec.per_sample.push_back(p[6 + i]);
    return h;
  }
};

}  // namespace detail
}  // namespace mpp
