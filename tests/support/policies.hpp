#pragma once
// The one list of policies (schedules: the library's own list, mpp::builtin_schedules): doctest's
// TEST_CASE_TEMPLATE_APPLY takes the std::tuple forms and the benchmarks' hana::for_each /
// hana::cartesian_product take hana_types<...> of the same lists, so a new schedule, comm policy or
// partition is tested and benchmarked by adding one line here.
#include <tuple>

#include <boost/hana/tuple.hpp>
#include <boost/hana/type.hpp>

#include "mpp/comm/policy.hpp"
#include "mpp/partition/by_params.hpp"
#include "mpp/partition/explicit.hpp"
#include "mpp/partition/recompute.hpp"
#include "mpp/partition/uniform.hpp"
#include "mpp/schedule/policies.hpp"

namespace mpp::test {

namespace detail {
template <int M, class Families>
struct with_knobs;
template <int M, class... Families>
struct with_knobs<M, std::tuple<Families...>> {
  using type = std::tuple<typename Families::template with<M, 2>...>;
};
}  // namespace detail

/// Every built-in schedule (mpp::builtin_schedules) with M micro-batches, V = 2 chunks per rank
/// where V is a knob.
template <int M>
using schedules = typename detail::with_knobs<M, builtin_schedules>::type;

/// Every comm policy this build can run (Shm: ranks of one host, as the tests and benchmarks run).
using comm_policies = std::tuple<Blocking<Gloo>, Async<Gloo>, Blocking<Shm>, Async<Shm>>;

namespace detail {
// Uneven explicit cuts of the 16-layer course model into P x V pieces, so that Explicit is not
// Uniform.
template <int Pieces>
struct explicit_cut;
template <>
struct explicit_cut<2> {
  using type = Explicit<9, 7>;
};
template <>
struct explicit_cut<4> {
  using type = Explicit<5, 4, 4, 3>;
};
template <>
struct explicit_cut<8> {
  using type = Explicit<3, 2, 2, 2, 2, 2, 2, 1>;
};
}  // namespace detail

/// The layer count the partition lists below are written for.
inline constexpr int partition_layers = 16;

/// Every partition policy for P pipeline ranks with V chunks per rank.
template <int P, int V>
using partitions = std::tuple<Uniform<P>, ByParams<P>, typename detail::explicit_cut<P * V>::type>;

/// Each partition with and without the Recompute stage policy.
template <int P, int V>
using stage_policies = decltype(std::tuple_cat(
    std::declval<partitions<P, V>>(),
    std::declval<std::tuple<Recompute<Uniform<P>>, Recompute<ByParams<P>>,
                            Recompute<typename detail::explicit_cut<P * V>::type>>>()));

namespace detail {
template <class Tuple>
struct to_hana;
template <class... Ts>
struct to_hana<std::tuple<Ts...>> {
  static constexpr auto value = boost::hana::tuple_t<Ts...>;
};
}  // namespace detail

/// The same list as hana types: hana::for_each(hana_types<schedules<8>>, [](auto t) { ... }).
template <class Tuple>
inline constexpr auto hana_types = detail::to_hana<Tuple>::value;

/// Calls f.template operator()<T>() for each T of a std::tuple list (for plain C++ loops).
template <class Tuple, class F>
constexpr void for_each_type(F&& f) {
  [&]<class... Ts>(std::tuple<Ts...>*) {
    (f.template operator()<Ts>(), ...);
  }(static_cast<Tuple*>(nullptr));
}

}  // namespace mpp::test
