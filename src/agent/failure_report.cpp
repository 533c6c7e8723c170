#include "agent/failure_report.hpp"

#include <netdb.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace elasticrun::agent {
namespace {

constexpr const char* kNotAvailable = "<N/A>";

std::string fqdn() {
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  addrinfo hints{};
  hints.ai_flags = AI_CANONNAME;
  addrinfo* res = nullptr;
  std::string name = host;
  if (::getaddrinfo(host, nullptr, &hints, &res) == 0) {
    if (res && res->ai_canonname) name = res->ai_canonname;
    ::freeaddrinfo(res);
  }
  return name;
}

// Message and timestamp of one failure, read from its error file when the
// worker wrote one (@record), as torchrun's ProcessFailure does.
struct Detail {
  std::string message;
  std::string error_file = kNotAvailable;
  std::time_t timestamp = 0;
};

Detail detail_of(const supervisor::WorkerExit& e, const std::string& error_file) {
  Detail d;
  d.timestamp = std::chrono::system_clock::to_time_t(e.when);
  std::ifstream in(error_file);
  if (in) {
    try {
      auto j = nlohmann::json::parse(in);
      d.error_file = error_file;
      const auto& m = j.at("message");
      if (m.is_string()) {
        d.message = m.get<std::string>();
        if (j.contains("timestamp")) d.timestamp = std::stoll(j["timestamp"].get<std::string>());
      } else {
        const auto& extra = m.value("extraInfo", nlohmann::json::object());
        d.message = extra.contains("py_callstack") ? extra["py_callstack"].get<std::string>()
                                                   : m.value("message", std::string(kNotAvailable));
        if (extra.contains("timestamp"))
          d.timestamp = std::stoll(extra["timestamp"].get<std::string>());
      }
    } catch (const std::exception&) {
      // A torn or foreign file: report the failure without it.
      d.error_file = kNotAvailable;
      d.message.clear();
    }
  }
  if (d.message.empty()) {
    d.message =
        e.term_signal != 0
            ? "Signal " + std::to_string(e.term_signal) + " (" +
                  supervisor::signal_name(e.term_signal) + ") received by PID " +
                  std::to_string(e.pid)
            : "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html";
  }
  // Indent continuation lines of a traceback under "traceback :".
  std::string indented;
  for (char c : d.message) {
    indented += c;
    if (c == '\n') indented += "  ";
  }
  d.message = indented;
  return d;
}

std::string iso_time(std::time_t t) {
  std::tm tm{};
  ::localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d_%H:%M:%S", &tm);
  return buf;
}

}  // namespace

std::string FailureReport::format(int rank_offset) const {
  if (failures.empty()) return {};
  const std::string host = fqdn();
  size_t root = 0;
  std::vector<Detail> details;
  for (size_t i = 0; i < failures.size(); ++i) {
    const auto& e = failures[i];
    details.push_back(detail_of(e, static_cast<size_t>(e.local_rank) < error_files.size()
                                       ? error_files[static_cast<size_t>(e.local_rank)]
                                       : std::string()));
    if (details[i].timestamp < details[root].timestamp) root = i;
  }
  const std::string title = script_name + " FAILED";
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
      << "  exitcode  : " << exitcode << " (pid: " << e.pid << ") "
      << (e.term_signal != 0 ? " (" + supervisor::signal_name(e.term_signal) + ")" : "") << "\n"
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

void FailureReport::print(int /*local_world_size*/, int rank_offset) const {
  std::string text = format(rank_offset);
  std::fprintf(stderr, "%s\n", text.c_str());
  std::fflush(stderr);
  if (agent_error_file.empty() || failures.empty()) return;
  // The root cause's own error file, when it wrote one; else a message.
  size_t root = 0;
  for (size_t i = 1; i < failures.size(); ++i) {
    if (failures[i].when < failures[root].when) root = i;
  }
  const auto& e = failures[root];
  std::ifstream src(static_cast<size_t>(e.local_rank) < error_files.size()
                        ? error_files[static_cast<size_t>(e.local_rank)]
                        : std::string());
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
    nlohmann::json j = {
        {"message",
         script_name + " FAILED: local rank " + std::to_string(e.local_rank) + " " + e.describe()},
        {"timestamp", std::to_string(std::chrono::system_clock::to_time_t(e.when))}};
    dst << j.dump();
  }
}

}  // namespace elasticrun::agent
