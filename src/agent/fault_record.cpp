#include "agent/fault_record.hpp"

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>

#include "util/logging.hpp"

namespace elasticrun::agent {

void write_fault_record(const std::filesystem::path& path, const health::Fault& fault,
                        int rank_offset, const std::vector<StackResult>& stacks,
                        const std::vector<std::string>& stack_files) {
  using nlohmann::ordered_json;
  ordered_json stack_list = ordered_json::array();
  for (const auto& s : stacks) {
    const auto lr = static_cast<size_t>(s.local_rank);
    stack_list.push_back({{"local_rank", s.local_rank},
                          {"pid", s.pid},
                          {"file", lr < stack_files.size() ? stack_files[lr] : ""},
                          {"how", s.how},
                          {"stopped", s.stopped}});
  }
  const auto now = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::system_clock::now().time_since_epoch());
  const ordered_json j = {
      {"version", 1},
      {"kind", health::to_string(fault.kind)},
      {"reason", fault.reason()},
      {"monitor", fault.monitor},
      {"local_rank", fault.local_rank},
      {"rank", fault.local_rank >= 0 ? rank_offset + fault.local_rank : -1},
      {"last_step", fault.last_step},
      {"message", fault.message},
      {"time_unix_ms", now.count()},
      {"stacks", stack_list},
  };
  std::ofstream out(path, std::ios::trunc);
  out << j.dump(2, ' ', false, ordered_json::error_handler_t::replace) << "\n";
  if (!out) util::logger("health")->warn("cannot write the fault record {}", path.string());
}

}  // namespace elasticrun::agent
