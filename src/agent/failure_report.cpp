#include "agent/failure_report.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "agent/attempt.hpp"
#include "util/host_name.hpp"
#include "util/signals.hpp"

namespace elasticrun::agent {
namespace {

constexpr const char* kNotAvailable = "<N/A>";

// The name Python's signal.Signals gives a number, as torchrun prints it,
// and "<N/A>" where Python has none (most real-time signals).
std::string python_signal_name(int sig) {
  auto name = util::python_signal_name(sig);
  return name ? std::string(*name) : kNotAvailable;
}

// Message and timestamp of one failure, read from its error file when the
// worker wrote one (@record), as torchrun's ProcessFailure does.
struct Detail {
  std::string message;
  std::string error_file = kNotAvailable;
  std::time_t timestamp = 0;
};

// A JSON timestamp as Python's int() takes it: a number or decimal text.
std::time_t json_time(const nlohmann::json& v) {
  if (v.is_number()) return static_cast<std::time_t>(v.get<double>());
  return static_cast<std::time_t>(std::stoll(v.get<std::string>()));
}

std::string indent_continuations(const std::string& text) {
  std::string out;
  for (char c : text) {
    out += c;
    if (c == '\n') out += "  ";
  }
  return out;
}

Detail detail_of(const supervisor::WorkerExit& e, const std::string& error_file) {
  Detail d;
  d.timestamp = std::chrono::system_clock::to_time_t(e.when);
  std::ifstream in(error_file);
  if (in) {
    try {
      auto j = nlohmann::json::parse(in);
      const auto& m = j.at("message");
      if (m.is_string()) {
        // torchrun shows a plain message as written, and a missing
        // timestamp counts as 0 (which makes it the root cause).
        d.message = m.get<std::string>();
        d.timestamp = j.contains("timestamp") ? json_time(j["timestamp"]) : 0;
      } else {
        const auto& extra = m.value("extraInfo", nlohmann::json::object());
        d.message = indent_continuations(extra.contains("py_callstack")
                                             ? extra["py_callstack"].get<std::string>()
                                             : m.value("message", std::string(kNotAvailable)));
        if (extra.contains("timestamp")) d.timestamp = json_time(extra["timestamp"]);
      }
      d.error_file = error_file;
    } catch (const std::exception&) {
      // A torn or foreign file: report the failure without it.
      d.error_file = kNotAvailable;
      d.message.clear();
      d.timestamp = std::chrono::system_clock::to_time_t(e.when);
    }
  }
  if (d.message.empty()) {
    d.message =
        e.term_signal != 0
            ? "Signal " + std::to_string(e.term_signal) + " (" + python_signal_name(e.term_signal) +
                  ") received by PID " + std::to_string(e.pid)
            : "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html";
  }
  return d;
}

const std::string& error_file_of(const std::vector<std::string>& files, int local_rank) {
  static const std::string kNone;
  return static_cast<size_t>(local_rank) < files.size() ? files[static_cast<size_t>(local_rank)]
                                                        : kNone;
}

// The root cause: the earliest timestamp, ties to the first observed.
// " (SIGKILL)" after the pid, or nothing where Python has no name.
std::string signal_suffix(int sig) {
  if (sig == 0) return "";
  std::string name = python_signal_name(sig);
  return name == kNotAvailable ? "" : " (" + name + ")";
}

size_t root_cause(const std::vector<Detail>& details) {
  size_t root = 0;
  for (size_t i = 1; i < details.size(); ++i) {
    if (details[i].timestamp < details[root].timestamp) root = i;
  }
  return root;
}

std::string iso_time(std::time_t t) {
  std::tm tm{};
  ::localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d_%H:%M:%S", &tm);
  return buf;
}

// The failures the report lists, what it says of each, and its root cause.
struct Selection {
  std::vector<supervisor::WorkerExit> failures;
  std::vector<Detail> details;
  size_t root = 0;
};

// The first lines of a rank's recorded stacks, indented as a traceback.
std::string stack_excerpt(const std::string& file) {
  constexpr int kLines = 40;
  std::ifstream in(file);
  std::string out, line;
  int n = 0;
  while (n < kLines && std::getline(in, line)) {
    out += "\n    " + line;
    ++n;
  }
  if (n == kLines && std::getline(in, line)) out += "\n    ... (the rest is in the file)";
  return out;
}

std::string fault_message(const FailureReport& r) {
  const health::Fault& f = *r.fault;
  std::string m = "health fault " + f.describe();
  for (const auto& st : r.stacks) {
    if (st.local_rank != f.local_rank) continue;
    const std::string& file = error_file_of(r.stack_files, st.local_rank);
    m += "\n  stacks (" + st.how + (st.stopped ? "; the process was stopped" : "") + "): " + file;
    if (st.how == "faulthandler" || st.how == "py-spy") m += stack_excerpt(file);
  }
  return m;
}

Selection select(const FailureReport& r) {
  Selection sel;
  sel.failures = r.failures;
  if (r.fault) {
    // The fault's rank may have exited cleanly once stopped, or not at all
    // yet when the node's report is printed: it is listed either way.
    const int lr = std::max(r.fault->local_rank, 0);
    auto it = std::find_if(sel.failures.begin(), sel.failures.end(),
                           [&](const supervisor::WorkerExit& e) { return e.local_rank == lr; });
    if (it == sel.failures.end()) {
      supervisor::WorkerExit e;
      e.local_rank = lr;
      for (const auto& st : r.stacks) {
        if (st.local_rank == lr) e.pid = st.pid;
      }
      e.when = std::chrono::system_clock::now();
      sel.failures.insert(sel.failures.begin(), e);
      it = sel.failures.begin();
    }
    sel.root = static_cast<size_t>(it - sel.failures.begin());
  }
  for (const auto& e : sel.failures) {
    sel.details.push_back(detail_of(e, error_file_of(r.error_files, e.local_rank)));
  }
  if (r.fault) {
    sel.details[sel.root].message = fault_message(r);
  } else if (!sel.details.empty()) {
    sel.root = root_cause(sel.details);
  }
  return sel;
}

// The report text from failures whose error files were read once.
std::string render(const FailureReport& r, const Selection& sel, int rank_offset) {
  const auto& failures = sel.failures;
  const auto& details = sel.details;
  if (failures.empty()) return {};
  const std::string host = util::fqdn();
  const size_t root = sel.root;
  const std::string title = r.script_name + " FAILED";
  size_t width = title.size();
  std::vector<std::string> blocks;
  for (size_t i = 0; i < failures.size(); ++i) {
    const auto& e = failures[i];
    const Detail& d = details[i];
    const int exitcode = e.term_signal != 0 ? -e.term_signal : e.exit_code;
    std::ostringstream b;
    b << "[" << i << "]:\n"
      << "  time      : " << iso_time(d.timestamp) << "\n"
      << "  host      : " << host << "\n"
      << "  rank      : " << rank_offset + e.local_rank << " (local_rank: " << e.local_rank << ")\n"
      << "  exitcode  : " << exitcode << " (pid: " << e.pid << ") " << signal_suffix(e.term_signal)
      << "\n"
      << "  error_file: " << d.error_file << "\n"
      << "  traceback : " << d.message;
    std::string block = b.str();
    std::istringstream lines(block);
    for (std::string line; std::getline(lines, line);) width = std::max(width, line.size());
    blocks.push_back(block);
  }
  width = std::min<size_t>(width, 60);
  std::string others;
  for (size_t i = 0; i < blocks.size(); ++i) {
    if (i == root) continue;
    others += (others.empty() ? "" : "\n") + blocks[i];
  }
  if (others.empty()) others = "  <NO_OTHER_FAILURES>";
  return "\n" + std::string(width, '=') + "\n" + title + "\n" + std::string(width, '-') +
         "\nFailures:\n" + others + "\n" + std::string(width, '-') +
         "\nRoot Cause (first observed failure):\n" + blocks[root] + "\n" + std::string(width, '=');
}

}  // namespace

std::string FailureReport::format(int rank_offset) const {
  return render(*this, select(*this), rank_offset);
}

void FailureReport::print(int rank_offset) const {
  const Selection sel = select(*this);
  std::string text = render(*this, sel, rank_offset);
  std::fprintf(stderr, "%s\n", text.c_str());
  std::fflush(stderr);
  if (agent_error_file.empty() || sel.failures.empty()) return;
  // The root cause, chosen as the report does, and its own error file when
  // it wrote one (a fault's root has none worth copying: the fault is the error).
  const auto& e = sel.failures[sel.root];
  std::ifstream src(fault ? std::string() : error_file_of(error_files, e.local_rank));
  std::ofstream dst(agent_error_file, std::ios::trunc);
  nlohmann::json copied;
  bool have_copy = false;
  if (src) {
    try {
      copied = nlohmann::json::parse(src);
      have_copy = true;
    } catch (const std::exception&) {
    }
  }
  if (have_copy) {
    // As torchrun's @record: the child's error, with the exit code added.
    const int exitcode = e.term_signal != 0 ? -e.term_signal : e.exit_code;
    if (copied.contains("message") && copied["message"].is_object()) {
      copied["message"]["errorCode"] = exitcode;
    }
    dst << copied.dump();
  } else {
    const std::string why =
        fault ? "local rank " + std::to_string(e.local_rank) + ": health fault " + fault->describe()
              : "local rank " + std::to_string(e.local_rank) + " " + e.describe();
    nlohmann::json j = {
        {"message", script_name + " FAILED: " + why},
        {"timestamp", std::to_string(std::chrono::system_clock::to_time_t(e.when))}};
    dst << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
}

FailureReport failure_report(const AgentConfig& config, const AttemptResult& r) {
  FailureReport report;
  report.script_name = config.script_name;
  report.failures = r.failures;
  report.error_files = r.error_files;
  report.agent_error_file = config.agent_error_file;
  report.fault = r.fault;
  report.stacks = r.stacks;
  report.stack_files = r.stack_files;
  return report;
}

}  // namespace elasticrun::agent
