#pragma once
// Costs as JSON, both ways: what a measured run writes (`--costs-out` of the pipeline labs) and
// what `mpp-schedule search --costs` reads, so that a schedule is searched from the costs of the
// machine it will run on. Needs nlohmann-json, not LibTorch.
//
//   {"forward": 34, "backward": 70, "input_grad": 0, "weight_grad": 0, "comm": 3,
//    "send_overhead": 1, "recv_overhead": 0,
//    "stages": [{"forward": 30, "backward": 61, "input_grad": 0, "weight_grad": 0}, ...],
//    "unit_us": 12.5, "step_end_us": 24, "cores": 2}
//
// Durations are integers in one unit of the file's choosing (measured runs: 1/100 of the slowest
// action); 0 in a stage keeps the common cost, as mpp::StageCosts says. "unit_us", optional, is
// one unit in microseconds: with it a predicted makespan reads as a step time. A run without a
// split backward measures B but not I and W: it writes them as 0, and the reader takes each as half
// of that B (costs_split_assumed() says so), for the common costs and for every stage.
// "step_end_us", optional, is the time from the last action to the end of the step (its last
// sends' wait and the loss shared, StepFigures::step_end_us): a predicted step time adds it.
// "cores", optional, is the cores the ranks shared (mpp::Costs::cores; 0 or absent: a core per
// rank).
#include <nlohmann/json.hpp>

#include <string>

#include "mpp/config.hpp"
#include "mpp/schedule/cost_model.hpp"
#include "mpp/schedule/table.hpp"
#include "mpp/trace/timeline.hpp"

namespace mpp {

/// The costs of `stages` stages as the JSON text above; `unit_us` > 0 is written as "unit_us",
/// `step_end_us` > 0 as "step_end_us".
MPP_DECL std::string costs_to_json(const Costs& c, int stages, double unit_us = 0.0,
                                   double step_end_us = 0.0);

/// What a measured step says as the JSON text above: each stage's F, B, I and W and the message
/// latency in 1/100 of the slowest action, with "unit_us", "step_end_us", and `cores` > 0 as
/// "cores" (the cores the ranks ran on). A step without a split backward measured no I and W: they
/// are written as 0, which the reader takes as halves of B.
MPP_DECL std::string measured_costs_json(const trace::StepFigures& f, int cores = 0);

/// Reads the JSON text above into `out`. Throws ScheduleError naming the key and the fix when a
/// value is missing, not a non-negative integer, or there are more stages than mpp can hold.
MPP_DECL Costs costs_from_json(const std::string& text);

/// One cost unit in microseconds ("unit_us" of the JSON text above), or 0 when the file does not
/// say. Throws ScheduleError when it is there and not a positive number.
MPP_DECL double costs_unit_us(const std::string& text);

/// The time from the last action to the step's end in microseconds ("step_end_us" of the JSON
/// text above), or 0 when the file does not say. Throws ScheduleError when it is there and not a
/// non-negative number.
MPP_DECL double costs_step_end_us(const std::string& text);

/// True when the JSON text gives no I and W (a run without a split backward): the reader then
/// took each as half of B, an assumption a caller should state.
MPP_DECL bool costs_split_assumed(const std::string& text);

/// The stages the JSON text gives costs of (the length of "stages"), or 0 when it gives only the
/// common costs: measured costs give every stage, so P * V for V chunks on each of P ranks.
MPP_DECL int costs_stage_count(const std::string& text);

}  // namespace mpp

#ifndef MPP_SEPARATE_COMPILATION
#include "mpp/trace/impl/costs_json.ipp"
#endif
