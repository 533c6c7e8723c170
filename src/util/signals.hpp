// Signal names: one table for the flags, the logs and the failure report.
//
// Two spellings exist for a few numbers. glibc's abbreviations
// (sigabbrev_np) call 29 SIGPOLL; Python's signal.Signals, which torchrun
// prints and whose names its flags accept, calls it SIGIO and also names
// SIGRTMIN and SIGRTMAX. Both come from the table in signals.cpp.
#pragma once

#include <optional>
#include <string_view>

namespace elasticrun::util {

// glibc's name for signo with "SIG" ("SIGTERM"; "SIGPOLL" for 29), as
// "SIG" + sigabbrev_np(signo); nullopt for real-time signals and numbers
// that are no signal.
std::optional<std::string_view> signal_name(int signo);

// The name Python's signal.Signals gives signo ("SIGIO" for 29; "SIGRTMIN",
// "SIGRTMAX"); nullopt for every other real-time signal and for numbers
// that are no signal.
std::optional<std::string_view> python_signal_name(int signo);

// The signal a name stands for, spelled as in Python's signal module, each
// alias included (SIGIOT, SIGCLD, SIGPOLL, SIGRTMIN, SIGRTMAX); nullopt for
// anything else, numbers included.
std::optional<int> parse_signal_name(std::string_view name);

}  // namespace elasticrun::util
