// mpp-schedule: a built-in schedule's (or an action CSV's) timeline and figures, as predicted by
// the same constexpr verifier that static_asserts schedules.
//
//   mpp-schedule 1f1b --ranks 4 --micro 8
//   mpp-schedule interleaved -p 4 -m 8 -v 2 --comm blocking --svg il.svg --json il.json
//   mpp-schedule zb-h1 -p 4 -m 8 --forward 1 --input-grad 1 --weight-grad 1
//   mpp-schedule --import-csv torch_schedule.csv --comm async --emit-cpp torch_schedule.hpp
//   mpp-schedule zb-v -p 4 -m 8 --csv zbv.csv --csv-format compute_only
//   mpp-schedule search -p 4 -m 8 --max-in-flight 4 --emit-cpp searched.hpp
#include <CLI/CLI.hpp>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "../common/cli_checks.hpp"
#include "mpp/schedule.hpp"
#include "mpp/schedule/chunk_count_search.hpp"
#include "mpp/schedule/search.hpp"
#include "mpp/trace/costs_json.hpp"
#include "mpp/trace/plot.hpp"  // render_timeline: the measured timelines' renderer

namespace {

void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  if (!out) throw std::runtime_error("mpp-schedule: cannot write '" + path + "'");
  out << text;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("mpp-schedule: cannot read '" + path + "'");
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "Prints a pipeline schedule's timeline, bubble and memory as predicted by mpp's verifier."};
  std::string schedule_name = "1f1b";
  int ranks = 4, micro_batches = 8, chunks = 2;
  std::string comm = "async";
  mpp::Costs costs{};
  std::string svg_path, json_path, csv_path, import_path, title, cpp_path;
  std::string csv_format = "compute_comms", type_name = "ImportedSchedule",
              cpp_namespace = "schedules";
  bool show_table = false, quiet = false, list = false, full_backward = false;
  int max_in_flight = 0;
  std::string placement = "looped";
  app.add_option("schedule", schedule_name,
                 "one of: " + std::string(mpp::builtin_schedule_names().view()) +
                     "; or search: the shortest proven table the costs and the cap allow")
      ->capture_default_str();
  app.add_option("--max-in-flight", max_in_flight,
                 "search: the cap on chunk activations a rank holds (0: none; 1F1B holds P, "
                 "ZB-V 2P)")
      ->capture_default_str()
      ->check(mpp::tools::at_least(0, "0: no cap"));
  app.add_option("--placement", placement,
                 "search: looped (stage = chunk * P + rank), v (rank r holds r and 2P - 1 - r), "
                 "or free (the search chooses which rank holds which stage, -v of them each)")
      ->capture_default_str()
      ->check(CLI::IsMember({"looped", "v", "free"}));
  std::vector<std::string> costs_paths;
  app.add_option("--costs", costs_paths,
                 "read T_F, T_B, T_I, T_W per stage and T_comm from this JSON (as the pipeline "
                 "labs' --costs-out writes it) instead of the cost flags; search: once per chunk "
                 "count (its stages tell which) to let the search choose the chunk count too, "
                 "at the same memory");
  app.add_flag("--full-backward", full_backward,
               "search: full backwards (B) only, no split into I and W");
  app.add_flag("--list", list,
               "print each built-in schedule's name and the mpp-schedule arguments that draw it "
               "(one line each) and exit");
  app.add_option("-p,--ranks", ranks, "pipeline ranks P")
      ->capture_default_str()
      ->check(mpp::tools::within(1, std::optional<int>(mpp::max_ranks),
                                 "the library proves schedules of 1 to mpp::max_ranks ranks"));
  app.add_option("-m,--micro", micro_batches, "micro-batches M")
      ->capture_default_str()
      ->check(mpp::tools::at_least(1, "a step needs at least one micro-batch"));
  app.add_option("-v,--chunks", chunks, "chunks per rank V (schedules whose V is a knob)")
      ->capture_default_str();
  app.add_option("--comm", comm, "async (buffered isend/irecv) or blocking (rendezvous send/recv)")
      ->capture_default_str()
      ->check(CLI::IsMember({"async", "blocking"}));
  const auto cost_check = mpp::tools::at_least(0, "a duration in cost units; 0 makes it free");
  app.add_option("--forward", costs.forward, "T_F")->capture_default_str()->check(cost_check);
  app.add_option("--backward", costs.backward, "T_B (full backward)")
      ->capture_default_str()
      ->check(cost_check);
  app.add_option("--input-grad", costs.input_grad, "T_I (zero-bubble split)")
      ->capture_default_str()
      ->check(cost_check);
  app.add_option("--weight-grad", costs.weight_grad, "T_W (zero-bubble split)")
      ->capture_default_str()
      ->check(cost_check);
  app.add_option("--comm-cost", costs.comm, "T_comm per transfer")
      ->capture_default_str()
      ->check(cost_check);
  int cores = 0;
  app.add_option("--cores", cores,
                 "the cores the ranks share (0: a core per rank); fewer than the ranks: ranks "
                 "that compute at once share them, and the costs are core time (overrides the "
                 "\"cores\" of --costs)")
      ->capture_default_str()
      ->check(mpp::tools::at_least(0, "a whole number of cores; 0 gives every rank its own"));
  app.add_option("--svg", svg_path, "write the timeline as SVG");
  app.add_option("--json", json_path, "write the simulated run as Chrome trace JSON");
  app.add_option("--csv", csv_path,
                 "write the lowered tables in torch.distributed.pipelining's action CSV format");
  app.add_option("--csv-format", csv_format,
                 "what --csv writes: compute_comms (the lowered tables, with SEND/RECV) or "
                 "compute_only (F, B, I, W), as torch.distributed.pipelining names them")
      ->capture_default_str()
      ->check(CLI::IsMember({"compute_comms", "compute_only"}));
  app.add_option("--import-csv", import_path,
                 "verify tables read from an action CSV (one line per rank) instead; the stages "
                 "each line names are that rank's");
  app.add_option("--emit-cpp", cpp_path,
                 "write a C++ header defining the table as constexpr rows and a schedule type "
                 "(mpp::Custom), proven by static_assert");
  app.add_option("--type-name", type_name, "the schedule type's name in the --emit-cpp header")
      ->capture_default_str();
  app.add_option("--namespace", cpp_namespace, "the --emit-cpp header's namespace")
      ->capture_default_str();
  app.add_option("--title", title, "SVG title (default: the schedule and its knobs)");
  app.add_flag("--table", show_table, "print each rank's lowered actions");
  app.add_flag("-q,--quiet", quiet, "do not print the ASCII timeline");
  CLI11_PARSE(app, argc, argv);
  if (list) {
    // "<spelling> <arguments>": what the docs' figure script draws, one schedule per line.
    mpp::for_each_builtin_schedule([]<class F>() {
      std::cout << F::spellings[0] << (F::takes_micro_batches ? " -m 8" : "")
                << (F::fixed_chunks == 0 ? " -v 2" : "") << '\n';
    });
    return 0;
  }

  try {
    if (costs_paths.size() > 1 && schedule_name != "search")
      throw std::invalid_argument(
          "mpp-schedule: --costs is given " + std::to_string(costs_paths.size()) +
          " times; give it once, or more than once (a file per chunk count) only to search");
    // Each file's costs with its unit and, when there are several, its chunk count.
    std::vector<mpp::ChunkCountCosts> options;
    for (const std::string& path : costs_paths) {
      const std::string text = read_file(path);
      mpp::ChunkCountCosts option{.costs = mpp::costs_from_json(text),
                                  .unit_us = mpp::costs_unit_us(text),
                                  .step_end_us = mpp::costs_step_end_us(text)};
      if (mpp::costs_split_assumed(text))
        std::cerr << "mpp-schedule: " << path
                  << " gives no I and W (measured without a split backward); each is taken as "
                     "half of B\n";
      if (costs_paths.size() > 1) {
        const int stages = mpp::costs_stage_count(text);
        if (stages == 0 || stages % ranks != 0)
          throw std::invalid_argument(
              "mpp-schedule: " + path + " gives the costs of " + std::to_string(stages) +
              " stages; with --costs given once per chunk count each file needs the costs of " +
              "every stage, V * " + std::to_string(ranks) + " for V chunks on each of the " +
              std::to_string(ranks) + " ranks (as --costs-out writes them)");
        option.chunks_per_rank = stages / ranks;
      }
      if (app.count("--cores") > 0) option.costs.cores = cores;
      options.push_back(option);
    }
    std::string costs_path = costs_paths.empty() ? std::string() : costs_paths.front();
    double unit_us = 0.0;  // one cost unit in microseconds, when the costs file says
    double step_end_us = 0.0;
    if (!options.empty()) {
      costs = options.front().costs;
      unit_us = options.front().unit_us;
      step_end_us = options.front().step_end_us;
    }
    if (app.count("--cores") > 0) costs.cores = cores;
    const mpp::CommSemantics semantics =
        comm == "blocking" ? mpp::CommSemantics::rendezvous : mpp::CommSemantics::buffered;
    auto compute = std::make_unique<mpp::ScheduleTable>();
    std::string label, bound;
    if (schedule_name == "search") {
      // Looped: one chunk per rank unless -v says otherwise; free: two unless -v says otherwise.
      const int v = placement == "v"            ? 2
                    : app.count("--chunks") > 0 ? chunks
                    : placement == "free"       ? 2
                                                : 1;
      mpp::SearchSpec spec{.ranks = ranks,
                           .micro_batches = micro_batches,
                           .placement = placement == "v" ? mpp::v_shape_placement(ranks, 2)
                                                         : mpp::interleaved_placement(ranks, v),
                           .free_placement = placement == "free",
                           .max_in_flight = max_in_flight,
                           .split_backward = !full_backward,
                           .costs = costs,
                           .semantics = semantics};
      auto found = std::make_unique<mpp::SearchResult>();
      int cap = max_in_flight;
      if (options.size() > 1) {
        // The chunk count is searched too: each file's costs for its own, at the same memory.
        auto over = std::make_unique<mpp::ChunkCountResult>();
        mpp::search_chunk_counts_into(*over, spec, options);
        if (!over->ok()) {
          std::cerr << over->error.view() << '\n';
          return 1;
        }
        *found = over->best;
        costs = options[static_cast<std::size_t>(over->option)].costs;
        unit_us = options[static_cast<std::size_t>(over->option)].unit_us;
        step_end_us = options[static_cast<std::size_t>(over->option)].step_end_us;
        costs_path = costs_paths[static_cast<std::size_t>(over->option)];
        cap = over->max_in_flight;
        std::cout << "chunk count: " << over->chunks_per_rank << " per rank, from " << costs_path
                  << " (" << options.size() << " chunk counts searched, ";
        if (max_in_flight > 0)
          std::cout << "each at the memory of " << max_in_flight
                    << " chunk activations at V = " << v << ")\n";
        else
          std::cout << "no cap)\n";
      } else {
        mpp::search_into(*found, spec);
      }
      *compute = found->table;
      // The placement as asked, or the map found (free), or the chunk count chosen.
      const int found_v = found->table.chunks_per_rank;
      const std::string where =
          placement == "free" && found_v > 1
              ? "free: " + std::string(mpp::describe(found->table.placement).view())
          : found_v != v ? (found_v == 1 ? std::string("looped") : "V = " + std::to_string(found_v))
                         : placement;
      label = "Searched<" + std::to_string(micro_batches) + "> (" + where + ", cap " +
              (cap > 0 ? std::to_string(cap) : std::string("none")) + ") on " +
              std::to_string(ranks) + " ranks";
      char text[200];
      std::snprintf(text, sizeof text,
                    "lower bound %d, gap %.1f%% (%d candidates in %d placement%s; the best: %s)",
                    found->lower_bound, 100.0 * found->gap(), found->candidates, found->placements,
                    found->placements == 1 ? "" : "s", std::string(found->origin.view()).c_str());
      bound = text;
    } else if (!import_path.empty()) {
      const int ignored = mpp::table_from_action_csv(*compute, read_file(import_path), semantics);
      if (ignored > 0)
        std::cerr << "mpp-schedule: skipped " << ignored << " action(s) of " << import_path << ": "
                  << mpp::ignored_action_reason << '\n';
      label = import_path;
    } else {
      // The knobs a schedule does not take are not asked of it (M = 1 for Naive, its own V).
      const bool found = mpp::with_builtin_schedule(schedule_name, [&]<class F>() {
        const int m = F::takes_micro_batches ? micro_batches : 1;
        const int v = F::fixed_chunks == 0 ? chunks : F::fixed_chunks;
        F::generate(*compute, ranks, m, v);
        label = std::string(F::name);
        if (F::takes_micro_batches)
          label += "<" + std::to_string(m) +
                   (F::fixed_chunks == 0 ? ", " + std::to_string(v) : "") + ">";
      });
      if (!found) {
        std::cerr << "mpp-schedule: unknown schedule '" << schedule_name << "'; use one of "
                  << mpp::builtin_schedule_names().view() << '\n';
        return 2;
      }
      label += " on " + std::to_string(ranks) + " ranks";
    }
    label += comm == "blocking" ? ", Blocking" : ", Async";
    // [quote:render]
    auto plan = std::make_unique<mpp::Plan>();
    mpp::plan_into(*plan, *compute, semantics, costs);
    if (!plan->figures.ok) {
      std::cerr << plan->figures.message.view() << '\n';
      return 1;
    }
    const auto events = mpp::simulate_events(plan->table, semantics, costs);
    // [/quote:render]
    const std::string figures = mpp::describe_figures(plan->figures);
    std::cout << label << "  (T_F=" << costs.forward << " T_B=" << costs.backward
              << " T_I=" << costs.input_grad << " T_W=" << costs.weight_grad
              << " T_comm=" << costs.comm;
    if (costs.cores > 0) std::cout << ", " << costs.cores << " cores";
    std::cout << ")\n";
    if (!quiet) std::cout << mpp::render_ascii(events);
    std::cout << figures << '\n';
    // With V chunks per rank a count in flight is of chunk activations, each 1/V of its rank's
    // layers: say so, and give the same peaks in micro-batches of a whole rank's layers.
    if (const int v = plan->table.chunks_per_rank; v > 1) {
      std::cout << "  (counted in chunk activations, each 1/" << v
                << " of a rank's layers; in whole micro-batches per rank";
      for (int r = 0; r < plan->ranks(); ++r) {
        char whole[32];
        std::snprintf(whole, sizeof whole, " %g", plan->figures.peak_in_flight[r] / double(v));
        std::cout << whole;
      }
      std::cout << ")\n";
    }
    if (unit_us > 0.0 && step_end_us > 0.0)
      std::printf(
          "predicted step %.2f ms (%s gives one cost unit as %.2f us, and %.0f us from "
          "the last action to the step's end)\n",
          (plan->figures.makespan * unit_us + step_end_us) / 1e3, costs_path.c_str(), unit_us,
          step_end_us);
    else if (unit_us > 0.0)
      std::printf("predicted step %.2f ms (%s gives one cost unit as %.2f us)\n",
                  plan->figures.makespan * unit_us / 1e3, costs_path.c_str(), unit_us);
    if (!bound.empty()) std::cout << bound << '\n';
    if (show_table)
      for (int r = 0; r < plan->ranks(); ++r) {
        std::cout << "rank " << r << ':';
        for (const mpp::Action& a : plan->actions(r)) std::cout << ' ' << mpp::to_action_string(a);
        std::cout << '\n';
      }
    if (!svg_path.empty())
      write_file(svg_path,
                 mpp::trace::render_timeline(events, {.title = title.empty() ? label : title,
                                                      .subtitle = figures,
                                                      .unit = "cost units"}));
    if (!json_path.empty()) write_file(json_path, mpp::render_chrome_trace(events));
    // compute_only: the table as generated or imported (an imported lowered table stays lowered).
    if (!csv_path.empty())
      write_file(csv_path, mpp::to_action_csv(csv_format == "compute_only" && !compute->lowered
                                                  ? *compute
                                                  : plan->table));
    if (!cpp_path.empty())
      write_file(cpp_path,
                 mpp::to_cpp_header(*compute, type_name, cpp_namespace,
                                    import_path.empty() ? label : "imported from " + import_path));
  } catch (const std::exception& e) {
    std::cerr << e.what() << '\n';
    return 1;
  }
  return 0;
}
