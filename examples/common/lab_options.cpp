// The pipeline labs' command line (lab_options.hpp), compiled once for all of them.
#include "lab_options.hpp"

#include <CLI/CLI.hpp>

namespace lab {

int parse_options(int argc, char** argv, const char* description, Options& o,
                  const std::vector<ExtraOption>& extra) {
  CLI::App app{description};
  app.add_option("--transport", o.transport,
                 "shm: shared memory between the ranks of this host (microseconds a message); "
                 "gloo: TCP, what also runs across hosts")
      ->capture_default_str()
      ->check(CLI::IsMember({"shm", "gloo"}));
  app.add_option("--hidden", o.model.hidden, "width of the Linear layers");
  app.add_option("--layers", o.model.layers, "number of Linear layers");
  app.add_option("--batch", o.batch, "samples per step");
  app.add_option("--steps", o.steps, "timed steps");
  app.add_flag("--timeline", o.timeline, "print the last step's measured timeline");
  app.add_option("--trace", o.trace, "write the last step's Chrome trace JSON here");
  app.add_option("--svg", o.svg, "draw the last step's measured timeline here (SVG)");
  app.add_option("--costs-out", o.costs_out,
                 "write the measured per-stage costs and message latency here (JSON, what "
                 "mpp-schedule search --costs reads; a lab that trains two pipelines writes the "
                 "second's)");
  for (const ExtraOption& e : extra) {
    CLI::Option* option = app.add_option(e.name, *e.value, e.help);
    if (!e.value->empty()) option->capture_default_str();
    if (!e.choices.empty()) option->check(CLI::IsMember(e.choices));
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    return app.exit(error);
  }
  return -1;
}

}  // namespace lab
