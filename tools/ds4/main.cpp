// main.cpp — `ds4` dispatcher: `ds4 <subcommand> [args]`; with no subcommand name (first argument
// is an option, e.g. `ds4 -m MODEL -p TEXT`) it runs `generate`, like antirez's ds4 CLI.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "commands.h"

namespace {
void usage(FILE* out) {
  std::fprintf(out, "usage: ds4 <command> [options]   (ds4 <command> --help for details)\n\ncommands:\n");
  for (const Ds4Command* c = kDs4Commands; c->name; ++c)
    std::fprintf(out, "  %-12s %s\n", c->name, c->help());
}
const Ds4Command* find(const char* name) {
  for (const Ds4Command* c = kDs4Commands; c->name; ++c)
    if (std::strcmp(c->name, name) == 0) return c;
  return nullptr;
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  if (std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0 ||
      std::strcmp(argv[1], "help") == 0) {
    usage(stdout);
    return 0;
  }
  if (argv[1][0] == '-') {  // no subcommand: default to generate
    const Ds4Command* gen = find("generate");
    if (!gen) {
      std::fprintf(stderr, "ds4: no command given\n");
      usage(stderr);
      return 2;
    }
    std::string name = "ds4 generate";
    std::vector<char*> args(argv, argv + argc);
    args[0] = name.data();
    return gen->run(argc, args.data());
  }
  const Ds4Command* cmd = find(argv[1]);
  if (!cmd) {
    std::fprintf(stderr, "ds4: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
  }
  std::string name = std::string("ds4 ") + argv[1];
  std::vector<char*> args(argv + 1, argv + argc);
  args[0] = name.data();
  return cmd->run(argc - 1, args.data());
}
