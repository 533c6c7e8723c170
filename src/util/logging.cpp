#include "util/logging.hpp"

#include <spdlog/sinks/stdout_sinks.h>

#include <cstdlib>
#include <mutex>

namespace elasticrun::util {
namespace {

std::mutex g_mu;

spdlog::level::level_enum& current_level() {
  static spdlog::level::level_enum level = [] {
    const char* env = std::getenv("ELASTICRUN_LOG_LEVEL");
    return env ? spdlog::level::from_str(env) : spdlog::level::info;
  }();
  return level;
}

spdlog::sink_ptr shared_sink() {
  static spdlog::sink_ptr sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
  return sink;
}

}  // namespace

std::shared_ptr<spdlog::logger> logger(const std::string& subsystem) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (auto existing = spdlog::get(subsystem)) return existing;
  auto l = std::make_shared<spdlog::logger>(subsystem, shared_sink());
  l->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%n] [%l] %v");
  l->set_level(current_level());
  spdlog::register_logger(l);
  return l;
}

void set_log_level(const std::string& level) {
  std::lock_guard<std::mutex> lock(g_mu);
  current_level() = spdlog::level::from_str(level);
  spdlog::set_level(current_level());
}

}  // namespace elasticrun::util
