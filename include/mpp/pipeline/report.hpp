#pragma once
// What the last step did on every rank, gathered on one rank: the measured bubble next to the
// verifier's prediction, activation memory next to the predicted in-flight count, the ASCII
// timeline and the Chrome trace. Every rank calls report_last_step(); rank `root` gets the report.
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "mpp/pipeline/gather.hpp"
#include "mpp/schedule/verify.hpp"
#include "mpp/trace/timeline.hpp"

namespace mpp {

/// The last step of every rank, gathered on one rank, next to the verifier's predictions.
struct StepReport {
  std::string pipeline;                  ///< the Pipeline type's name
  std::vector<trace::RankTrace> traces;  ///< one per rank, in rank order
  trace::StepFigures figures;            ///< measured
  VerifyResult predicted_unit;           ///< the verifier with unit costs (T_F=1, T_B=2)
  VerifyResult predicted_measured;       ///< the verifier with this step's measured F/B/I/W costs
  VerifyResult predicted_latency;        ///< ... and the measured message latency as T_comm

  /// Measured against predicted, a few lines: the bubble, then per rank its bubble, peak activation
  /// memory and micro-batches in flight.
  std::string summary() const {
    return trace::describe(figures, predicted_unit, predicted_measured, &predicted_latency);
  }
  /// Every rank's step as an ASCII timeline, at most `max_columns` time cells wide.
  std::string timeline(int max_columns = 40) const {
    AsciiOptions options;
    options.max_columns = max_columns;
    return trace::ascii_timeline(traces, options);
  }
  /// Every rank's events as Chrome trace JSON.
  std::string chrome_trace() const { return trace::chrome_trace(traces); }
  /// Writes the Chrome trace JSON (open it in https://ui.perfetto.dev); false if it cannot.
  bool write_chrome_trace(const std::string& path) const {
    std::ofstream out(path);
    out << chrome_trace();
    return static_cast<bool>(out);
  }
};

/// Collective over the pipeline's ranks (every rank must call it after the same train_step).
template <class Pipe>
std::optional<StepReport> report_last_step(const Pipe& pipe, int root = 0) {
  auto traces = gather_traces(pipe.comm().group(), pipe.last_trace(), root);
  if (!traces) return std::nullopt;
  StepReport report;
  report.pipeline = Pipe::name();
  report.traces = std::move(*traces);
  report.figures = trace::step_figures(report.traces);
  report.predicted_unit = pipe.predicted();
  const auto plan = pipe.plan();  // the lowered tables, for predictions from measured costs
  report.predicted_measured =
      verify(plan->table, plan->semantics(), trace::measured_costs(report.figures));
  report.predicted_latency =
      verify(plan->table, plan->semantics(), trace::measured_costs_with_latency(report.figures));
  return report;
}

}  // namespace mpp
