#pragma once
// Reduction operators of all_reduce. Torch-free so policy lists and docs can name them.
#include <string_view>

namespace mpp {

/// Reduction operators of all_reduce.
enum class ReduceOp {
  sum,      ///< sum over the ranks
  product,  ///< product over the ranks
  min,      ///< element-wise minimum
  max,      ///< element-wise maximum
  band,     ///< bitwise and (integer and bool tensors)
  bor,      ///< bitwise or (integer and bool tensors)
  bxor      ///< bitwise exclusive or (integer and bool tensors)
};

/// The operator's name in messages ("sum", "max", ...).
constexpr std::string_view reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return "sum";
    case ReduceOp::product:
      return "product";
    case ReduceOp::min:
      return "min";
    case ReduceOp::max:
      return "max";
    case ReduceOp::band:
      return "band";
    case ReduceOp::bor:
      return "bor";
    case ReduceOp::bxor:
      return "bxor";
  }
  return "?";
}

}  // namespace mpp
