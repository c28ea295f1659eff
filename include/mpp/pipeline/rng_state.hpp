#pragma once
// The random-number state a forward starts from, kept so that recomputing the forward draws the
// same numbers (the same dropout masks) and leaves the generator where the run had left it, as
// torch.utils.checkpoint does with preserve_rng_state. CPU generator only (mpp runs on CPU
// tensors; a CUDA pipeline would also need the device's generator).
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

#include <mutex>

namespace mpp::detail {

/// The default CPU generator's state now (a small byte tensor, ~5 KB).
inline at::Tensor capture_rng_state() {
  at::Generator generator = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(generator.mutex());
  return generator.get_state();
}

/// While alive, the default CPU generator runs from `saved`; on destruction it continues from
/// where it was when the guard was made, as if the guarded code had drawn nothing.
class RngReplay {
 public:
  explicit RngReplay(const at::Tensor& saved) : resume_(capture_rng_state()) { set(saved); }
  ~RngReplay() { set(resume_); }
  RngReplay(const RngReplay&) = delete;
  RngReplay& operator=(const RngReplay&) = delete;

 private:
  static void set(const at::Tensor& state) {
    at::Generator generator = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(generator.mutex());
    generator.set_state(state);
  }
  at::Tensor resume_;
};

}  // namespace mpp::detail
