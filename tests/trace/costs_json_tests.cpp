// Costs as JSON: what a measured run writes is what the search reads back, and a bad file is
// refused naming the key.
#include <doctest/doctest.h>

#include <string>

#include "mpp/trace/costs_json.hpp"

TEST_CASE("costs written as JSON read back the same, stage by stage") {
  mpp::Costs c{.forward = 34, .backward = 70, .input_grad = 36, .weight_grad = 34, .comm = 3};
  c.stage[3] = {51, 100, 52, 48};
  const mpp::Costs back = mpp::costs_from_json(mpp::costs_to_json(c, 4));
  CHECK(back.forward == 34);
  CHECK(back.backward == 70);
  CHECK(back.comm == 3);
  CHECK(back.stage[3].backward == 100);
  CHECK(back.stage[2].forward == 0);  // the common cost
  CHECK(back.of(mpp::Op::F, 3) == 51);
}

TEST_CASE("costs as JSON: what is missing or wrong is named") {
  const auto message = [](const std::string& text) {
    try {
      mpp::costs_from_json(text);
    } catch (const mpp::ScheduleError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK(message("{\"backward\": 2}").find("no \"forward\"") != std::string::npos);
  CHECK(message("{\"forward\": 1, \"backward\": -2}").find("\"backward\" is -2") !=
        std::string::npos);
  CHECK(message("{\"forward\": 1, \"backward\": 2, \"stages\": [{\"forward\": 1.5}]}")
            .find("\"forward\" of stage 0 is 1.5") != std::string::npos);
  CHECK(message("not json").find("not JSON") != std::string::npos);
  // Without I and W the backward splits in halves, for every stage too, and the reader says so.
  const std::string unsplit =
      "{\"forward\": 1, \"backward\": 4, \"stages\": [{}, {\"forward\": 2, \"backward\": 7}]}";
  const mpp::Costs halves = mpp::costs_from_json(unsplit);
  CHECK(halves.input_grad == 2);
  CHECK(halves.weight_grad == 2);
  CHECK(halves.stage[1].input_grad == 4);
  CHECK(halves.stage[1].weight_grad == 3);
  CHECK(mpp::costs_split_assumed(unsplit));
  CHECK_FALSE(mpp::costs_split_assumed("{\"forward\": 1, \"backward\": 4, \"input_grad\": 2}"));
}
