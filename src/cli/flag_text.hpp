// Converting one flag's text, as found on the command line, in PET_<NAME> or
// in the job config (a Raw: the text and where it came from). The flag
// table's converters (flags.cpp) and the derivations (parse.cpp) share
// these. Each throws ConfigError "<origin> '<text>': <why>".
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string_view>

#include "cli/flags.hpp"

namespace elasticrun::cli {

[[noreturn]] void fail_flag(const Raw& raw, std::string_view why);

// A switch: the command line's "1", or a PET_ integer, non-zero meaning on.
bool parse_switch(const Raw& raw);
// An integer that is not negative.
int parse_count(const Raw& raw);
// A port, 0 to 65535.
int parse_port(const Raw& raw);
// Seconds, as Python's float() reads them, not negative.
double parse_seconds(const Raw& raw);
// A size in bytes: digits with an optional K, M, G or T (powers of 1024);
// "auto" is nullopt.
std::optional<uint64_t> parse_bytes(const Raw& raw);
// The text itself, when it is one of `choices`.
void check_choice(const Raw& raw, std::initializer_list<std::string_view> choices);
// A dotted Python module name: identifiers (ASCII here) separated by dots.
bool valid_module_name(std::string_view name);

}  // namespace elasticrun::cli
