// Costs as JSON: what a measured run writes is what the search reads back, and a bad file is
// refused naming the key.
#include <doctest/doctest.h>

#include <string>

#include "mpp/trace/costs_json.hpp"

TEST_CASE("costs written as JSON read back the same, stage by stage") {
  mpp::Costs c{.forward = 34, .backward = 70, .input_grad = 36, .weight_grad = 34, .comm = 3};
  c.stage[3] = {51, 100, 52, 48};
  const std::string text = mpp::costs_to_json(c, 4, 12.5);
  const mpp::Costs back = mpp::costs_from_json(text);
  CHECK(mpp::costs_unit_us(text) == doctest::Approx(12.5));
  CHECK(mpp::costs_unit_us(mpp::costs_to_json(c, 4)) == 0.0);  // a file that does not say
  CHECK(mpp::costs_step_end_us(text) == 0.0);
  CHECK(mpp::costs_step_end_us(mpp::costs_to_json(c, 4, 12.5, 24.5)) == doctest::Approx(24.5));
  CHECK(back.forward == 34);
  CHECK(back.backward == 70);
  CHECK(back.comm == 3);
  CHECK(back.stage[3].backward == 100);
  CHECK(back.stage[2].forward == 0);  // the common cost
  CHECK(back.of(mpp::Op::F, 3) == 51);
  CHECK(back.cores == 0);  // not written: a core per rank
  CHECK(text.find("cores") == std::string::npos);
  c.cores = 2;
  CHECK(mpp::costs_from_json(mpp::costs_to_json(c, 4)).cores == 2);
}

TEST_CASE("costs as JSON: what is missing or wrong is named") {
  // What reading `text` throws (both readers: the costs, then the unit), or "".
  const auto message = [](const std::string& text) {
    try {
      mpp::costs_from_json(text);
      mpp::costs_unit_us(text);
      mpp::costs_step_end_us(text);
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
  CHECK(message("{\"forward\": 1, \"backward\": 2, \"cores\": -1}")
            .find("\"cores\" is -1; give the cores the ranks share as a whole number >= 0") !=
        std::string::npos);
  CHECK(message("{\"forward\": 1, \"backward\": 2, \"cores\": 1.5}").find("\"cores\" is 1.5") !=
        std::string::npos);
  CHECK(message("{\"forward\": 1, \"backward\": 2, \"cores\": \"two\"}")
            .find("\"cores\" is \"two\"") != std::string::npos);
  CHECK(message("{\"forward\": 1, \"backward\": 2, \"unit_us\": -3}").find("\"unit_us\" is -3") !=
        std::string::npos);
  CHECK(message("{\"forward\": 1, \"backward\": 2, \"step_end_us\": \"x\"}")
            .find("\"step_end_us\" is \"x\"; give the time from the last action") !=
        std::string::npos);
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

TEST_CASE("a measured step as costs JSON: units of the slowest action, I and W only if measured") {
  mpp::trace::StepFigures f;
  f.forward_us = 42;
  f.backward_us = 80;
  f.message_latency_us = 8;
  f.stage_us = {{40, 80, 0, 0}, {44, 80, 0, 0}};
  const std::string unsplit = mpp::measured_costs_json(f);
  CHECK(mpp::costs_unit_us(unsplit) == doctest::Approx(0.8));
  CHECK(mpp::costs_split_assumed(unsplit));       // no I and W ran: the reader halves B
  CHECK(mpp::costs_step_end_us(unsplit) == 0.0);  // none measured: not written
  const mpp::Costs c = mpp::costs_from_json(unsplit);
  CHECK(c.forward == 53);
  CHECK(c.comm == 10);
  CHECK(c.of(mpp::Op::F, 1) == 55);
  CHECK(c.of(mpp::Op::I, 1) == 50);
  f.input_grad_us = 50;
  f.weight_grad_us = 30;
  f.step_end_us = 21.5;
  CHECK(mpp::costs_step_end_us(mpp::measured_costs_json(f)) == doctest::Approx(21.5));
  const mpp::Costs split = mpp::costs_from_json(mpp::measured_costs_json(f));
  CHECK_FALSE(mpp::costs_split_assumed(mpp::measured_costs_json(f)));
  CHECK(split.input_grad == 63);
  CHECK(split.weight_grad == 38);
  // A split schedule ran no whole backward: B is what its I and W took together.
  f.backward_us = 0;
  f.stage_us = {{40, 0, 50, 30}, {44, 0, 60, 30}};
  const mpp::Costs halves = mpp::costs_from_json(mpp::measured_costs_json(f));
  CHECK(halves.backward == 133);           // 80 us in units of 0.6 us (the slowest action: 60 us)
  CHECK(halves.of(mpp::Op::B, 1) == 150);  // 90 us
}
