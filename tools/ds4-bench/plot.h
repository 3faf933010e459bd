// plot.h — runs scripts/plot_bench.sh (gnuplot) on a ds4-bench CSV. A separate process, started
// with an argument vector (no shell), so paths need no quoting.
#pragma once

#include <string>

#include "ds4/status.h"

namespace ds4::bench {

struct PlotOptions {
  std::string script;    // path of plot_bench.sh
  std::string csv;       // input CSV
  std::string out;       // OUT.png or OUT.svg
  bool memory = false;   // the memory plot (plot_bench.sh --memory)
  std::string title;     // empty = the script's default
};

Status run_plot(const PlotOptions& o);

}  // namespace ds4::bench
