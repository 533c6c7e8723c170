// <attempt>/fault.json: why the agent stopped an attempt's workers for a
// health fault, written before it signals them (docs/health.md lists the
// fields; readers ignore fields they do not know).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "agent/stacks.hpp"
#include "health/fault.hpp"

namespace elasticrun::agent {

// Best effort: a record that cannot be written is logged, never an error
// that would keep the workers from being stopped.
void write_fault_record(const std::filesystem::path& path, const health::Fault& fault,
                        int rank_offset, const std::vector<StackResult>& stacks,
                        const std::vector<std::string>& stack_files);

}  // namespace elasticrun::agent
