// Reading rank, world size and rendezvous address from torchrun, Open MPI and SLURM variables,
// and the errors for missing or contradictory ones (no processes needed).
#include <doctest/doctest.h>

#include <map>
#include <optional>
#include <string>

#include "mpp/comm/env.hpp"
#include "mpp/comm/topology.hpp"

namespace {

using Vars = std::map<std::string, std::string>;

mpp::Environment parse(const Vars& vars) {
  return mpp::parse_environment([&](std::string_view name) -> std::optional<std::string> {
    auto it = vars.find(std::string(name));
    if (it == vars.end()) return std::nullopt;
    return it->second;
  });
}

/// The error a bad environment raises: which variable, and the message.
struct Failure {
  std::string variable;
  std::string message;
};

// Move-assigns: GCC 12 warns (-Wrestrict, a known false positive) on assigning a literal.
void set(Vars& vars, const std::string& name, std::string value) { vars[name] = std::move(value); }

Failure failure_of(const Vars& vars) {
  try {
    parse(vars);
  } catch (const mpp::EnvironmentError& e) {
    return {e.variable(), e.what()};
  }
  FAIL("expected an EnvironmentError");
  return {};
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

const Vars torchrun_rank3_of_4_two_nodes{{"RANK", "3"},           {"WORLD_SIZE", "4"},
                                         {"LOCAL_RANK", "1"},     {"LOCAL_WORLD_SIZE", "2"},
                                         {"GROUP_RANK", "1"},     {"MASTER_ADDR", "node0"},
                                         {"MASTER_PORT", "29511"}};

}  // namespace

TEST_CASE("env: torchrun variables") {
  auto env = parse(torchrun_rank3_of_4_two_nodes);
  CHECK(env.launcher == mpp::Launcher::torchrun);
  CHECK(env.rank == 3);
  CHECK(env.world_size == 4);
  CHECK(env.local_rank == 1);
  CHECK(env.local_world_size == 2);
  CHECK(env.node_rank == 1);
  CHECK(env.master_addr == "node0");
  CHECK(env.master_port == 29511);
  CHECK_FALSE(env.single_host());

  Vars node_rank = torchrun_rank3_of_4_two_nodes;
  node_rank.erase("GROUP_RANK");
  set(node_rank, "NODE_RANK", "1");
  CHECK(parse(node_rank).node_rank == 1);
}

TEST_CASE("env: torchrun on one host, local variables defaulted") {
  auto env = parse(
      {{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "29500"}});
  CHECK(env.local_rank == 1);
  CHECK(env.local_world_size == 2);
  CHECK(env.node_rank == 0);
  CHECK(env.single_host());
}

TEST_CASE("env: a world of one needs no rendezvous address") {
  auto env = parse({{"RANK", "0"}, {"WORLD_SIZE", "1"}});
  CHECK(env.world_size == 1);
  CHECK(env.master_addr == "127.0.0.1");
}

TEST_CASE("env: Open MPI variables") {
  auto env = parse({{"OMPI_COMM_WORLD_RANK", "5"},
                    {"OMPI_COMM_WORLD_SIZE", "8"},
                    {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                    {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"},
                    {"MASTER_ADDR", "10.0.0.1"},
                    {"MASTER_PORT", "1234"}});
  CHECK(env.launcher == mpp::Launcher::open_mpi);
  CHECK(env.rank == 5);
  CHECK(env.world_size == 8);
  CHECK(env.local_rank == 1);
  CHECK(env.local_world_size == 4);
  CHECK(env.node_rank == 1);
}

TEST_CASE("env: SLURM variables, including the compressed tasks-per-node list") {
  auto env = parse({{"SLURM_PROCID", "6"},
                    {"SLURM_NTASKS", "7"},
                    {"SLURM_LOCALID", "0"},
                    {"SLURM_NODEID", "3"},
                    {"SLURM_TASKS_PER_NODE", "2(x3),1"},
                    {"MASTER_ADDR", "n0"},
                    {"MASTER_PORT", "29500"}});
  CHECK(env.launcher == mpp::Launcher::slurm);
  CHECK(env.rank == 6);
  CHECK(env.world_size == 7);
  CHECK(env.node_rank == 3);
  CHECK(env.local_world_size == 1);
  CHECK(mpp::detail::slurm_tasks_on_node("2(x3),1", 2) == 2);
  CHECK(mpp::detail::slurm_tasks_on_node("4", 0) == 4);
  CHECK_FALSE(mpp::detail::slurm_tasks_on_node("2(x3)", 3).has_value());
}

TEST_CASE("env: torchrun's variables win over the SLURM step that started torchrun") {
  Vars vars = torchrun_rank3_of_4_two_nodes;
  set(vars, "SLURM_PROCID", "1");
  set(vars, "SLURM_NTASKS", "2");
  auto env = parse(vars);
  CHECK(env.launcher == mpp::Launcher::torchrun);
  CHECK(env.rank == 3);
  CHECK(env.world_size == 4);
}

TEST_CASE("env: nothing set names RANK and says how to launch") {
  auto f = failure_of({});
  CHECK(f.variable == "RANK");
  CHECK(contains(f.message, "mpprun --nproc-per-node"));
  CHECK(contains(f.message, "SLURM_PROCID"));
}

TEST_CASE("env: missing variables are named") {
  auto f = failure_of({{"RANK", "0"}});
  CHECK(f.variable == "WORLD_SIZE");
  CHECK(contains(f.message, "WORLD_SIZE is not set"));

  f = failure_of({{"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}});
  CHECK(f.variable == "RANK");

  f = failure_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "29500"}});
  CHECK(f.variable == "MASTER_ADDR");
  CHECK(contains(f.message, "scontrol show hostnames"));

  f = failure_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}});
  CHECK(f.variable == "MASTER_PORT");

  f = failure_of({{"SLURM_PROCID", "0"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}});
  CHECK(f.variable == "SLURM_NTASKS");

  f = failure_of({{"RANK", "3"},
                  {"WORLD_SIZE", "4"},
                  {"LOCAL_RANK", "1"},
                  {"MASTER_ADDR", "h"},
                  {"MASTER_PORT", "1"}});
  CHECK(f.variable == "LOCAL_WORLD_SIZE");
}

TEST_CASE("env: malformed and contradictory values are refused") {
  auto f = failure_of({{"RANK", "one"}, {"WORLD_SIZE", "2"}});
  CHECK(f.variable == "RANK");
  CHECK(contains(f.message, "RANK='one' is not an integer"));

  f = failure_of({{"RANK", "2"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}});
  CHECK(f.variable == "RANK");
  CHECK(contains(f.message, "outside [0, WORLD_SIZE=2)"));

  f = failure_of({{"RANK", "0"}, {"WORLD_SIZE", "0"}});
  CHECK(f.variable == "WORLD_SIZE");

  f = failure_of({{"RANK", "0"},
                  {"WORLD_SIZE", "2"},
                  {"LOCAL_WORLD_SIZE", "4"},
                  {"MASTER_ADDR", "h"},
                  {"MASTER_PORT", "1"}});
  CHECK(f.variable == "LOCAL_WORLD_SIZE");

  f = failure_of({{"RANK", "1"},
                  {"WORLD_SIZE", "4"},
                  {"LOCAL_RANK", "2"},
                  {"LOCAL_WORLD_SIZE", "2"},
                  {"MASTER_ADDR", "h"},
                  {"MASTER_PORT", "1"}});
  CHECK(f.variable == "LOCAL_RANK");

  Vars two_names = torchrun_rank3_of_4_two_nodes;
  set(two_names, "NODE_RANK", "0");
  f = failure_of(two_names);
  CHECK(f.variable == "NODE_RANK");
  CHECK(contains(f.message, "disagree"));

  // Variables written by hand that disagree: rank 3 cannot be local rank 1 of node 0.
  Vars hand_written = torchrun_rank3_of_4_two_nodes;
  set(hand_written, "GROUP_RANK", "0");
  f = failure_of(hand_written);
  CHECK(f.variable == "RANK");
  CHECK(contains(f.message,
                 "RANK=3 contradicts GROUP_RANK=0 x LOCAL_WORLD_SIZE=2 + LOCAL_RANK=1, which give "
                 "RANK=1; set the variables so that they agree, or start every rank through a "
                 "launcher"));

  Vars bad_port = torchrun_rank3_of_4_two_nodes;
  set(bad_port, "MASTER_PORT", "70000");
  CHECK(failure_of(bad_port).variable == "MASTER_PORT");
}

TEST_CASE("topology: neighbours in a chain and on a ring") {
  constexpr mpp::Topology first{0, 4}, middle{2, 4}, last{3, 4};
  static_assert(first.is_first() && !first.is_last() && first.prev_rank() == -1);
  static_assert(middle.next_rank() == 3 && middle.prev_rank() == 1);
  static_assert(last.is_last() && last.next_rank() == -1 && last.ring_next() == 0);
  static_assert(first.ring_prev() == 3);
  constexpr mpp::Topology alone{0, 1};
  static_assert(alone.is_first() && alone.is_last() && alone.ring_next() == 0);
  CHECK(middle.ring_next() == 3);
}
