#pragma once
// The definitions of costs_json.hpp's functions that are not templates: included by the header
// (inline) unless MPP_SEPARATE_COMPILATION is defined, else compiled once by mpp/impl/src.hpp.
#include "mpp/trace/costs_json.hpp"

namespace mpp {

MPP_DECL std::string costs_to_json(const Costs& c, int stages, double unit_us, double step_end_us) {
  nlohmann::ordered_json j;
  j["forward"] = c.forward;
  j["backward"] = c.backward;
  j["input_grad"] = c.input_grad;
  j["weight_grad"] = c.weight_grad;
  j["comm"] = c.comm;
  j["send_overhead"] = c.send_overhead;
  j["recv_overhead"] = c.recv_overhead;
  j["stages"] = nlohmann::ordered_json::array();
  for (int s = 0; s < stages && s < static_cast<int>(c.stage.size()); ++s) {
    const StageCosts& st = c.stage[static_cast<std::size_t>(s)];
    j["stages"].push_back({{"forward", st.forward},
                           {"backward", st.backward},
                           {"input_grad", st.input_grad},
                           {"weight_grad", st.weight_grad}});
  }
  if (unit_us > 0.0) j["unit_us"] = unit_us;
  if (step_end_us > 0.0) j["step_end_us"] = step_end_us;
  if (c.cores > 0) j["cores"] = c.cores;
  return j.dump(2) + "\n";
}

MPP_DECL std::string measured_costs_json(const trace::StepFigures& f, int cores) {
  Costs costs = trace::measured_costs_with_latency(f);
  costs.cores = cores;
  if (f.input_grad_us <= 0.0) {
    costs.input_grad = costs.weight_grad = 0;
    for (auto& s : costs.stage) s.input_grad = s.weight_grad = 0;
  }
  return costs_to_json(costs, static_cast<int>(f.stage_us.size()), trace::measured_cost_unit_us(f),
                       f.step_end_us);
}

MPP_DECL Costs costs_from_json(const std::string& text) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    throw ScheduleError(std::string("mpp: the costs are not JSON (") + e.what() +
                        "); write them as mpp-schedule's --costs help shows");
  }
  const auto integer = [](const nlohmann::json& from, const char* key, const std::string& where,
                          bool required) {
    if (!from.contains(key)) {
      if (!required) return 0;
      throw ScheduleError("mpp: the costs have no \"" + std::string(key) + "\"" + where +
                          "; give it as an integer duration");
    }
    const auto& v = from.at(key);
    if (!v.is_number_integer() || v.get<long long>() < 0 || v.get<long long>() > 1000000000)
      throw ScheduleError("mpp: the costs' \"" + std::string(key) + "\"" + where + " is " +
                          v.dump() + "; give a non-negative integer duration");
    return v.get<int>();
  };
  if (!j.is_object()) throw ScheduleError("mpp: the costs must be a JSON object");
  Costs c;
  c.forward = integer(j, "forward", "", true);
  c.backward = integer(j, "backward", "", true);
  c.input_grad = integer(j, "input_grad", "", false);
  c.weight_grad = integer(j, "weight_grad", "", false);
  c.comm = integer(j, "comm", "", false);
  c.send_overhead = integer(j, "send_overhead", "", false);
  c.recv_overhead = integer(j, "recv_overhead", "", false);
  if (j.contains("cores")) {
    const auto& v = j.at("cores");
    if (!v.is_number_integer() || v.get<long long>() < 0 || v.get<long long>() > 1000000)
      throw ScheduleError("mpp: the costs' \"cores\" is " + v.dump() +
                          "; give the cores the ranks share as a whole number >= 0 (0: a core "
                          "per rank), or leave it out");
    c.cores = v.get<int>();
  }
  if (c.forward == 0 || c.backward == 0)
    throw ScheduleError("mpp: the costs' forward and backward must be at least 1");
  const auto halve = [](int backward, int& input_grad, int& weight_grad) {
    if (backward <= 0 || input_grad > 0 || weight_grad > 0) return;
    input_grad = (backward + 1) / 2;
    weight_grad = backward - input_grad > 0 ? backward - input_grad : 1;
  };
  halve(c.backward, c.input_grad, c.weight_grad);
  if (j.contains("stages")) {
    const auto& stages = j.at("stages");
    if (!stages.is_array() || stages.size() > c.stage.size())
      throw ScheduleError("mpp: the costs' \"stages\" must be an array of at most " +
                          std::to_string(c.stage.size()) + " objects");
    for (std::size_t s = 0; s < stages.size(); ++s) {
      const std::string where = " of stage " + std::to_string(s);
      c.stage[s] = {integer(stages[s], "forward", where, false),
                    integer(stages[s], "backward", where, false),
                    integer(stages[s], "input_grad", where, false),
                    integer(stages[s], "weight_grad", where, false)};
      halve(c.stage[s].backward, c.stage[s].input_grad, c.stage[s].weight_grad);
    }
  }
  return c;
}

MPP_DECL double costs_unit_us(const std::string& text) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_object() || !j.contains("unit_us")) return 0.0;
  const auto& v = j.at("unit_us");
  if (!v.is_number() || v.get<double>() <= 0.0)
    throw ScheduleError("mpp: the costs' \"unit_us\" is " + v.dump() +
                        "; give one cost unit in microseconds, a positive number, or leave it out");
  return v.get<double>();
}

MPP_DECL double costs_step_end_us(const std::string& text) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_object() || !j.contains("step_end_us")) return 0.0;
  const auto& v = j.at("step_end_us");
  if (!v.is_number() || v.get<double>() < 0.0)
    throw ScheduleError("mpp: the costs' \"step_end_us\" is " + v.dump() +
                        "; give the time from the last action to the step's end in microseconds, "
                        "a number >= 0, or leave it out");
  return v.get<double>();
}

MPP_DECL bool costs_split_assumed(const std::string& text) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_object()) return false;
  const auto zero = [&](const char* key) {
    return !j.contains(key) || (j.at(key).is_number_integer() && j.at(key).get<long long>() == 0);
  };
  return zero("input_grad") && zero("weight_grad");
}

MPP_DECL int costs_stage_count(const std::string& text) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_object() || !j.contains("stages") || !j.at("stages").is_array()) return 0;
  return static_cast<int>(j.at("stages").size());
}

}  // namespace mpp
