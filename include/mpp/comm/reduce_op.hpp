#pragma once
// Reduction operators of all_reduce. Torch-free so policy lists and docs can name them.
#include <string_view>

namespace mpp {

enum class ReduceOp { sum, product, min, max, band, bor, bxor };

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
