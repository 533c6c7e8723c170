#include "util/signals.hpp"

#include <csignal>

namespace elasticrun::util {
namespace {

struct SignalName {
  std::string_view name;
  int signo;
  bool glibc;   // the name sigabbrev_np gives the number
  bool python;  // the name signal.Signals gives the number
};

// Every name Python's signal module has on Linux, in its order, except
// SIGRTMIN and SIGRTMAX: glibc computes those at run time.
constexpr SignalName kSignals[] = {
    {"SIGHUP", SIGHUP, true, true},       {"SIGINT", SIGINT, true, true},
    {"SIGQUIT", SIGQUIT, true, true},     {"SIGILL", SIGILL, true, true},
    {"SIGTRAP", SIGTRAP, true, true},     {"SIGABRT", SIGABRT, true, true},
    {"SIGIOT", SIGIOT, false, false},     {"SIGBUS", SIGBUS, true, true},
    {"SIGFPE", SIGFPE, true, true},       {"SIGKILL", SIGKILL, true, true},
    {"SIGUSR1", SIGUSR1, true, true},     {"SIGSEGV", SIGSEGV, true, true},
    {"SIGUSR2", SIGUSR2, true, true},     {"SIGPIPE", SIGPIPE, true, true},
    {"SIGALRM", SIGALRM, true, true},     {"SIGTERM", SIGTERM, true, true},
    {"SIGSTKFLT", SIGSTKFLT, true, true}, {"SIGCHLD", SIGCHLD, true, true},
    {"SIGCLD", SIGCHLD, false, false},    {"SIGCONT", SIGCONT, true, true},
    {"SIGSTOP", SIGSTOP, true, true},     {"SIGTSTP", SIGTSTP, true, true},
    {"SIGTTIN", SIGTTIN, true, true},     {"SIGTTOU", SIGTTOU, true, true},
    {"SIGURG", SIGURG, true, true},       {"SIGXCPU", SIGXCPU, true, true},
    {"SIGXFSZ", SIGXFSZ, true, true},     {"SIGVTALRM", SIGVTALRM, true, true},
    {"SIGPROF", SIGPROF, true, true},     {"SIGWINCH", SIGWINCH, true, true},
    {"SIGIO", SIGIO, false, true},        {"SIGPOLL", SIGPOLL, true, false},
    {"SIGPWR", SIGPWR, true, true},       {"SIGSYS", SIGSYS, true, true},
};

}  // namespace

std::optional<std::string_view> signal_name(int signo) {
  for (const auto& s : kSignals) {
    if (s.signo == signo && s.glibc) return s.name;
  }
  return std::nullopt;
}

std::optional<std::string_view> python_signal_name(int signo) {
  for (const auto& s : kSignals) {
    if (s.signo == signo && s.python) return s.name;
  }
  if (signo == SIGRTMIN) return "SIGRTMIN";
  if (signo == SIGRTMAX) return "SIGRTMAX";
  return std::nullopt;
}

std::optional<int> parse_signal_name(std::string_view name) {
  for (const auto& s : kSignals) {
    if (s.name == name) return s.signo;
  }
  if (name == "SIGRTMIN") return SIGRTMIN;
  if (name == "SIGRTMAX") return SIGRTMAX;
  return std::nullopt;
}

}  // namespace elasticrun::util
