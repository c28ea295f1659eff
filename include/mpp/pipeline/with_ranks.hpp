#pragma once
// One binary, several world sizes. A pipeline's number of ranks is a template argument, so that
// the compiler proves its schedule for exactly that many ranks. A program meant to run on 2, 4
// or 8 ranks instantiates its pipeline once per size, each instantiation proven when it is
// compiled, and picks the one that matches the world at run time:
//
//   mpp::with_ranks<2, 4, 8>(world.size(), [&](auto ranks) {
//     mpp::Pipeline<mpp::Uniform<ranks>, mpp::OneFOneB<8>, mpp::Async<mpp::Shm>> pipe(world,
//     model);
//     ...
//   });
//
// Any other world size is refused with the list. Standard library only.
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "mpp/error.hpp"

namespace mpp {

/// Thrown by with_ranks when the world size is not one the program was compiled for; the
/// message lists the sizes it supports and how to launch one of them.
class WorldSizeError : public InvalidArgument {
 public:
  using InvalidArgument::InvalidArgument;
};

namespace detail {

template <int... Sizes>
std::string supported_sizes() {
  std::string list;
  int index = 0;
  constexpr int count = sizeof...(Sizes);
  ((list += (index == 0           ? ""
             : index + 1 == count ? " or "
                                  : ", ") +
            std::to_string(Sizes),
    ++index),
   ...);
  return list;
}

template <int... Sizes>
constexpr bool all_distinct() {
  constexpr int sizes[] = {Sizes...};
  for (int i = 0; i < static_cast<int>(sizeof...(Sizes)); ++i)
    for (int j = 0; j < i; ++j)
      if (sizes[i] == sizes[j]) return false;
  return true;
}

template <int... All, int First, int... Rest, class F>
decltype(auto) with_ranks_from(std::integer_sequence<int, First, Rest...>, int world_size, F& f) {
  if (world_size == First) return f(std::integral_constant<int, First>{});
  if constexpr (sizeof...(Rest) > 0) {
    return with_ranks_from<All...>(std::integer_sequence<int, Rest...>{}, world_size, f);
  } else {
    constexpr int sizes[] = {All...};
    throw WorldSizeError("mpp: this program runs on " + supported_sizes<All...>() + " ranks, not " +
                         std::to_string(world_size) + "; launch " +
                         (sizeof...(All) == 1 ? "that many" : "one of those") +
                         ", e.g. mpprun --nproc-per-node " + std::to_string(sizes[0]) +
                         " <program>");
  }
}

}  // namespace detail

/// Calls `f(std::integral_constant<int, P>{})` for the P of `Sizes` equal to `world_size` and
/// returns what it returns. `f` is instantiated, and every pipeline type in it proven, for each
/// of `Sizes`, so a size the schedule cannot run stops the build. Throws WorldSizeError, naming
/// the supported sizes, when `world_size` is none of them.
template <int... Sizes, class F>
decltype(auto) with_ranks(int world_size, F&& f) {
  static_assert(sizeof...(Sizes) > 0, "mpp::with_ranks<Sizes...> needs at least one size");
  static_assert(((Sizes >= 1) && ...), "mpp::with_ranks<Sizes...>: every size must be >= 1");
  static_assert(detail::all_distinct<Sizes...>(),
                "mpp::with_ranks<Sizes...>: each size may appear only once");
  constexpr int sizes[] = {Sizes...};
  using Result = std::invoke_result_t<F&, std::integral_constant<int, sizes[0]>>;
  static_assert(
      (std::is_same_v<Result, std::invoke_result_t<F&, std::integral_constant<int, Sizes>>> && ...),
      "mpp::with_ranks: f must return the same type for every size");
  return detail::with_ranks_from<Sizes...>(std::integer_sequence<int, Sizes...>{}, world_size, f);
}

}  // namespace mpp
