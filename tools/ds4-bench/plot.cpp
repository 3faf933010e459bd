// plot.cpp — see plot.h.
#include "plot.h"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <vector>

extern char** environ;

namespace ds4::bench {

static bool ends_with(const std::string& s, const char* suffix) {
  const std::string t = suffix;
  return s.size() >= t.size() && s.compare(s.size() - t.size(), t.size(), t) == 0;
}

Status run_plot(const PlotOptions& o) {
  if (!ends_with(o.out, ".png") && !ends_with(o.out, ".svg"))
    return invalid_argument("--plot: the output must end in .png or .svg, got '" + o.out + "'");
  if (access(o.script.c_str(), R_OK) != 0)
    return not_found("--plot: plot script '" + o.script + "' not found (use --plot-script PATH)");
  std::vector<std::string> args = {"bash", o.script};
  if (o.memory) args.push_back("--memory");
  if (!o.title.empty()) {
    args.push_back("--title");
    args.push_back(o.title);
  }
  args.push_back(o.csv);
  args.push_back(o.out);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, "bash", nullptr, nullptr, argv.data(), environ);
  if (rc != 0) return unavailable("--plot: cannot start bash to run " + o.script);
  int wstatus = 0;
  if (waitpid(pid, &wstatus, 0) < 0) return internal_error("--plot: waitpid failed");
  if (!WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0)
    return unavailable("--plot: " + o.script + " failed (see its message above)");
  return Status::Ok();
}

}  // namespace ds4::bench
