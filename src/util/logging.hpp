// Named spdlog loggers, one per subsystem ("store", "rendezvous", ...), all
// writing to stderr through one sink so that lines never interleave.
#pragma once

#include <spdlog/spdlog.h>

#include <memory>
#include <string>

namespace elasticrun::util {

// Returns the logger for a subsystem, creating it on first use.
std::shared_ptr<spdlog::logger> logger(const std::string& subsystem);

// Sets the level of every logger, present and future ("trace" .. "off").
// Unknown names fall back to "info". ELASTICRUN_LOG_LEVEL sets the initial level.
void set_log_level(const std::string& level);

}  // namespace elasticrun::util
