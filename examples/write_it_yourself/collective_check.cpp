// check_all_reduce (harness.hpp): the learner's all-reduce against the library's on the same
// buffers, and its traffic against a ring's.
#include <ATen/ops/arange.h>
#include <ATen/ops/sin.h>

#include "comparison.hpp"

namespace lab {

namespace {

/// Elements of every rank's buffer: a multiple of 2, 3 and 4 ranks.
constexpr std::int64_t buffer_elements = 1200;

/// "3 messages of 400 elements", or "2 messages of 1200, 600 elements".
std::string describe(const std::vector<std::int64_t>& sends) {
  std::string text = std::to_string(sends.size()) + (sends.size() == 1 ? " message" : " messages");
  if (sends.empty()) return text;
  const bool same = std::all_of(sends.begin(), sends.end(), [&](auto n) { return n == sends[0]; });
  text += " of ";
  for (std::size_t i = 0; i < (same ? 1 : sends.size()); ++i)
    text += (i == 0 ? "" : ", ") + std::to_string(sends[i]);
  return text + " elements";
}

}  // namespace

int check_all_reduce(int argc, char** argv, const char* lab, const AllReduce& all_reduce) {
  return guarded_main(lab, [&] {
    const auto o = check::parse(argc, argv, lab);
    at::set_num_threads(1);
    const auto group = mpp::init_process_group();
    const World world(group);
    const int ranks = world.size();
    if (ranks < 2 || buffer_elements % ranks != 0)
      throw std::invalid_argument("runs on 2, 3 or 4 ranks (a ring needs a neighbour, and the " +
                                  std::to_string(buffer_elements) + " elements must split evenly)");
    const std::int64_t chunk = buffer_elements / ranks;
    std::string problems;
    bool traffic_told = false;  // the traffic of the first step that is not a ring's only
    for (int s = 0; s < o.steps; ++s) {
      // Values that differ between ranks and steps, so that a missing or doubled term shows.
      const at::Tensor mine =
          at::sin(at::arange(buffer_elements, at::kFloat) * (world.rank() + 1) + s);
      const at::Tensor expected = mine.clone();
      group.all_reduce(expected);
      const auto sent_before = world.sends().size();
      all_reduce(world, mine);
      const auto all_sent = world.sends();
      const std::vector<std::int64_t> sent(all_sent.begin() + static_cast<long>(sent_before),
                                           all_sent.end());
      const double worst = (mine - expected).abs().max().item<double>();
      const double scale = std::max(1.0, expected.abs().max().item<double>());
      char line[300];
      if (!(worst <= check::tolerance * scale)) {
        std::snprintf(line, sizeof line,
                      "  step %d: the sum differs from the library's all_reduce by up to %.3e\n", s,
                      worst);
        problems += line;
      }
      const bool ring = sent.size() == static_cast<std::size_t>(2 * (ranks - 1)) &&
                        std::all_of(sent.begin(), sent.end(), [&](auto n) { return n == chunk; });
      if (!ring && !traffic_told) {
        traffic_told = true;
        std::snprintf(line, sizeof line,
                      "  step %d: rank %d sent %s; a ring all-reduce on %d ranks sends 2(P - 1) = "
                      "%d messages of n/P = %lld elements (P - 1 in the reduce-scatter, P - 1 in "
                      "the all-gather)\n",
                      s, world.rank(), describe(sent).c_str(), ranks, 2 * (ranks - 1),
                      static_cast<long long>(chunk));
        problems += line;
      }
    }
    return check::verdict(group, lab, problems,
                          std::string(lab) + " on " + std::to_string(ranks) + " ranks, " +
                              std::to_string(o.steps) +
                              " buffers: the sums equal the library's all_reduce, and each rank "
                              "sent 2(P - 1) messages of n/P elements");
  });
}

}  // namespace lab
