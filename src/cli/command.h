// Subcommands register themselves here (one file per command: cmd_<name>.cpp), so the
// entry point never needs editing. Object files of the executable are linked directly,
// so static registration is safe here (it is not used inside the library).
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

namespace refit::cli {

struct Command {
  std::string name;
  std::string description;
  // Adds options to `sub`; returns the action to run when the subcommand is chosen
  // (returns the process exit code).
  std::function<std::function<int()>(CLI::App& sub)> setup;
};

std::vector<Command>& commands();

struct CommandRegistrar {
  explicit CommandRegistrar(Command command) { commands().push_back(std::move(command)); }
};

}  // namespace refit::cli
