// The one signal-name table (util/signals) against the three sources it
// replaced: glibc's sigabbrev_np for the logs, Python's signal.Signals for
// torchrun's failure report, and every name Python's signal module accepts
// for the flags.
#include "util/signals.hpp"

#include <signal.h>
#include <string.h>

#include <catch2/catch.hpp>
#include <map>
#include <string>

namespace util = elasticrun::util;

namespace {

// signal.Signals on Linux (CPython 3.11): each number's canonical name.
const std::map<int, std::string> kPythonNames = {
    {1, "SIGHUP"},     {2, "SIGINT"},    {3, "SIGQUIT"},   {4, "SIGILL"},   {5, "SIGTRAP"},
    {6, "SIGABRT"},    {7, "SIGBUS"},    {8, "SIGFPE"},    {9, "SIGKILL"},  {10, "SIGUSR1"},
    {11, "SIGSEGV"},   {12, "SIGUSR2"},  {13, "SIGPIPE"},  {14, "SIGALRM"}, {15, "SIGTERM"},
    {16, "SIGSTKFLT"}, {17, "SIGCHLD"},  {18, "SIGCONT"},  {19, "SIGSTOP"}, {20, "SIGTSTP"},
    {21, "SIGTTIN"},   {22, "SIGTTOU"},  {23, "SIGURG"},   {24, "SIGXCPU"}, {25, "SIGXFSZ"},
    {26, "SIGVTALRM"}, {27, "SIGPROF"},  {28, "SIGWINCH"}, {29, "SIGIO"},   {30, "SIGPWR"},
    {31, "SIGSYS"},    {34, "SIGRTMIN"}, {64, "SIGRTMAX"},
};

// Every SIG* name of Python's signal module, aliases included.
const std::map<std::string, int> kPythonSpellings = {
    {"SIGABRT", 6},  {"SIGALRM", 14},   {"SIGBUS", 7},     {"SIGCHLD", 17},  {"SIGCLD", 17},
    {"SIGCONT", 18}, {"SIGFPE", 8},     {"SIGHUP", 1},     {"SIGILL", 4},    {"SIGINT", 2},
    {"SIGIO", 29},   {"SIGIOT", 6},     {"SIGKILL", 9},    {"SIGPIPE", 13},  {"SIGPOLL", 29},
    {"SIGPROF", 27}, {"SIGPWR", 30},    {"SIGQUIT", 3},    {"SIGRTMAX", 64}, {"SIGRTMIN", 34},
    {"SIGSEGV", 11}, {"SIGSTKFLT", 16}, {"SIGSTOP", 19},   {"SIGSYS", 31},   {"SIGTERM", 15},
    {"SIGTRAP", 5},  {"SIGTSTP", 20},   {"SIGTTIN", 21},   {"SIGTTOU", 22},  {"SIGURG", 23},
    {"SIGUSR1", 10}, {"SIGUSR2", 12},   {"SIGVTALRM", 26}, {"SIGWINCH", 28}, {"SIGXCPU", 24},
    {"SIGXFSZ", 25},
};

}  // namespace

TEST_CASE("every number has glibc's signal name, and real-time signals and non-signals none",
          "[signals]") {
  for (int sig = -1; sig <= NSIG + 1; ++sig) {
    INFO("signal " << sig);
    const char* abbrev = (sig >= 0 && sig < NSIG) ? ::sigabbrev_np(sig) : nullptr;
    auto name = util::signal_name(sig);
    if (abbrev == nullptr) {
      CHECK_FALSE(name.has_value());
    } else {
      REQUIRE(name.has_value());
      CHECK(*name == std::string("SIG") + abbrev);
    }
  }
}

TEST_CASE("every number has Python's signal name, SIGRTMIN and SIGRTMAX included", "[signals]") {
  // glibc's SIGRTMIN is 34 wherever its threads reserve 32 and 33, as here.
  REQUIRE(SIGRTMIN == 34);
  REQUIRE(SIGRTMAX == 64);
  for (int sig = -1; sig <= NSIG + 1; ++sig) {
    INFO("signal " << sig);
    auto name = util::python_signal_name(sig);
    auto expected = kPythonNames.find(sig);
    if (expected == kPythonNames.end()) {
      CHECK_FALSE(name.has_value());
    } else {
      REQUIRE(name.has_value());
      CHECK(*name == expected->second);
    }
  }
}

TEST_CASE("every name Python's signal module has parses to its number, and nothing else parses",
          "[signals]") {
  for (const auto& [name, sig] : kPythonSpellings) {
    INFO(name);
    CHECK(util::parse_signal_name(name) == sig);
  }
  for (const char* other : {"", "SIG", "TERM", "sigterm", "SIGRTMIN+1", "15", "SIGTERM "}) {
    INFO(other);
    CHECK_FALSE(util::parse_signal_name(other).has_value());
  }
}
