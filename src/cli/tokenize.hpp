// Splits a launch command line into flag texts, the script and its arguments,
// by argparse's rules (see parse.hpp for the list). Values stay text here;
// parse.cpp converts them.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <vector>

#include "cli/flags.hpp"

namespace elasticrun::cli {

using FlagValues = std::array<std::optional<Raw>, static_cast<size_t>(Flag::kCount)>;

struct Tokens {
  FlagValues given;  // the last occurrence of each flag
  std::optional<std::string> script;
  std::vector<std::string> script_args;
};

// Throws HelpRequested for -h/--help and --print-completion (as soon as they
// are read, like argparse), ConfigError for unknown, ambiguous or incomplete flags.
Tokens tokenize(const std::vector<std::string>& args);

}  // namespace elasticrun::cli
