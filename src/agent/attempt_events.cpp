#include "agent/attempt_events.hpp"

#include "events/types.hpp"

namespace elasticrun::agent {
namespace {

const char* outcome_name(Outcome o) {
  switch (o) {
    case Outcome::kSucceeded:
      return "succeeded";
    case Outcome::kFailed:
      return "failed";
    case Outcome::kSignaled:
      return "signaled";
    case Outcome::kStopped:
      return "stopped";
  }
  return "unknown";
}

double seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

}  // namespace

void record_workers_start(events::EventLog& events, const AttemptPlace& at,
                          const std::vector<pid_t>& pids, size_t warm,
                          std::chrono::steady_clock::duration spawn) {
  events.record(events::type::kWorkersStart, {{"restart_count", at.restart_count},
                                              {"rank_offset", at.rank_offset},
                                              {"pids", pids},
                                              {"warm", warm},
                                              {"spawn_s", seconds(spawn)}});
}

void record_workers_end(events::EventLog& events, const AttemptPlace& at, const AttemptResult& r) {
  nlohmann::json failures = nlohmann::json::array();
  for (const auto& f : r.failures) {
    failures.push_back({{"local_rank", f.local_rank},
                        {"rank", at.rank_offset + f.local_rank},
                        {"pid", f.pid},
                        {"exit_code", f.exit_code},
                        {"signal", f.term_signal},
                        {"what", f.describe()}});
  }
  nlohmann::json fields = {{"restart_count", at.restart_count},
                           {"outcome", outcome_name(r.outcome)},
                           {"failures", failures}};
  if (r.stop_reason) fields["stop_reason"] = *r.stop_reason;
  if (r.stop_signal != 0) fields["signal"] = r.stop_signal;
  if (r.fault) fields["fault"] = r.fault->reason();
  // --inprocess-restart: the workers still alive, waiting for the next round.
  if (r.parked) fields["parked"] = r.parked->count();
  events.record(events::type::kWorkersEnd, std::move(fields));
}

void record_health_fault(events::EventLog& events, const AttemptPlace& at,
                         const health::Fault& fault, const std::string& fault_file) {
  events.record(events::type::kHealthFault,
                {{"restart_count", at.restart_count},
                 {"reason", fault.reason()},
                 {"monitor", fault.monitor},
                 {"local_rank", fault.local_rank},
                 {"rank", fault.local_rank >= 0 ? at.rank_offset + fault.local_rank : -1},
                 {"last_step", fault.last_step},
                 {"message", fault.message},
                 {"fault_file", fault_file}});
}

void record_rescue(events::EventLog& events, const AttemptPlace& at,
                   const supervisor::WorkerExit& e, bool saved,
                   std::chrono::steady_clock::duration since_failure) {
  events.record(events::type::kRescue, {{"restart_count", at.restart_count},
                                        {"local_rank", e.local_rank},
                                        {"rank", at.rank_offset + e.local_rank},
                                        {"saved", saved},
                                        {"seconds", seconds(since_failure)},
                                        {"what", e.describe()}});
}

}  // namespace elasticrun::agent
