#pragma once
// How a reduction travels through Gloo: the c10d operation for mpp's ReduceOp, and the dtype a
// tensor is reduced in when Gloo has no kernel for its own.
#include <c10/core/ScalarType.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <string>

#include "mpp/comm/reduce_op.hpp"
#include "mpp/error.hpp"

namespace mpp {

namespace detail {

inline c10d::ReduceOp to_c10d(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return c10d::ReduceOp::SUM;
    case ReduceOp::product:
      return c10d::ReduceOp::PRODUCT;
    case ReduceOp::min:
      return c10d::ReduceOp::MIN;
    case ReduceOp::max:
      return c10d::ReduceOp::MAX;
    case ReduceOp::band:
      return c10d::ReduceOp::BAND;
    case ReduceOp::bor:
      return c10d::ReduceOp::BOR;
    case ReduceOp::bxor:
      return c10d::ReduceOp::BXOR;
  }
  return c10d::ReduceOp::SUM;
}

/// How a reduction of `dtype` travels through Gloo, whose kernels cover float16/32/64 and
/// 8/32/64-bit integers: other dtypes are reduced in a wider or reinterpreted one.
struct WirePlan {
  at::ScalarType dtype;
  ReduceOp op;
  bool complex_as_real = false;
};

inline WirePlan reduce_wire_plan(at::ScalarType dtype, ReduceOp op) {
  const bool bitwise = op == ReduceOp::band || op == ReduceOp::bor || op == ReduceOp::bxor;
  const bool integral = at::isIntegralType(dtype, /*includeBool=*/true);
  if (bitwise && !integral)
    throw InvalidArgument("mpp: all_reduce(" + std::string(reduce_op_name(op)) +
                          ") needs an integer or bool tensor (got " + c10::toString(dtype) +
                          "); use sum/product/min/max");
  switch (dtype) {
    case at::kFloat:
    case at::kDouble:
    case at::kHalf:
    case at::kChar:
    case at::kByte:
    case at::kInt:
    case at::kLong:
      return {dtype, op};
    case at::kBFloat16:
      return {at::kFloat, op};  // reduce in float32, round once when copying back
    case at::kShort:
      return {at::kInt, op};
    case at::kBool:  // as bytes: sum = logical or, product = logical and
      return {at::kByte, op == ReduceOp::sum       ? ReduceOp::max
                         : op == ReduceOp::product ? ReduceOp::min
                                                   : op};
    case at::kComplexFloat:
    case at::kComplexDouble:
      if (op != ReduceOp::sum)
        throw InvalidArgument("mpp: all_reduce(" + std::string(reduce_op_name(op)) + ") of " +
                              c10::toString(dtype) +
                              " has no meaning elementwise on (re, im); only sum is supported");
      return {dtype == at::kComplexFloat ? at::kFloat : at::kDouble, op, true};
    default:
      throw InvalidArgument(std::string("mpp: all_reduce of ") + c10::toString(dtype) +
                            " is not supported; convert the tensor to a numeric dtype first");
  }
}

}  // namespace detail

}  // namespace mpp
