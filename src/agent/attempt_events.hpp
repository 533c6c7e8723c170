// The attempt's lines of the event log (docs/events.md): its workers'
// start and end, a health fault, a rescuer's exit. Made here so that
// attempt.cpp only says when; the fields of each type are in one place.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

#include "agent/attempt.hpp"
#include "events/event_log.hpp"
#include "health/fault.hpp"
#include "supervisor/worker_group.hpp"

namespace elasticrun::agent {

// Where the attempt's workers are: every line names them so.
struct AttemptPlace {
  int restart_count = 0;
  int rank_offset = 0;
};

void record_workers_start(events::EventLog& events, const AttemptPlace& at,
                          const std::vector<pid_t>& pids, size_t warm,
                          std::chrono::steady_clock::duration spawn);
void record_workers_end(events::EventLog& events, const AttemptPlace& at, const AttemptResult& r);
void record_health_fault(events::EventLog& events, const AttemptPlace& at,
                         const health::Fault& fault, const std::string& fault_file);
// `saved`: its SDK marked the rescue written; `since_failure`: from the
// failure that opened the rescue window to its exit.
void record_rescue(events::EventLog& events, const AttemptPlace& at,
                   const supervisor::WorkerExit& e, bool saved,
                   std::chrono::steady_clock::duration since_failure);

}  // namespace elasticrun::agent
