// refit command-line entry point: dispatches to the registered subcommands.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <string>

#include "cli/command.h"
#include "core/error.h"
#include "kernels/cpu/cpu_isa.h"

namespace refit::cli {
std::vector<Command>& commands() {
  static std::vector<Command> all;
  return all;
}
}  // namespace refit::cli

int main(int argc, char** argv) {
  using namespace refit::cli;
  CLI::App app{"refit: an LLM inference engine built for reinforcement learning"};
  app.require_subcommand(1);
  auto& all = commands();
  std::sort(all.begin(), all.end(),
            [](const Command& a, const Command& b) { return a.name < b.name; });
  std::function<int()> action;
  std::vector<std::pair<CLI::App*, std::function<int()>>> actions;
  for (auto& command : all) {
    CLI::App* sub = app.add_subcommand(command.name, command.description);
    actions.emplace_back(sub, command.setup(*sub));
  }
  // llama-bench spells its prompt-plus-generation test "-pg", which CLI11 would read as
  // "-p g" (single-dash options are one letter there): `refit bench` takes it as "--pg".
  static char pg_long[] = "--pg";
  if (argc > 1 && std::string(argv[1]) == "bench")
    for (int i = 2; i < argc; ++i)
      if (std::string(argv[i]) == "-pg") argv[i] = pg_long;
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    refit::cpu::init_cpu_isa();  // a bad REFIT_CPU_ISA is refused before any command prints
    for (auto& [sub, run] : actions)
      if (sub->parsed()) return run();
  } catch (const std::exception& e) {
    std::fflush(stdout);
    fmt::print(stderr, "refit: error: {}\n", e.what());
    return 1;
  }
  return 0;
}
