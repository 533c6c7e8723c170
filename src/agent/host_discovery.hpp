// --host-discovery-script (horovodrun's contract): a program that prints
// the hosts the job may use now, one `host[:slots]` a line
// (rendezvous/host_list.hpp), and exits 0. The closer of a round admits
// only agents on listed hosts; the leader of a running round ends it when a
// member's host leaves the list (a graceful stop at an agreed step) and
// grows the job when a waiting agent's host joins it.
//
// elasticrun does not start agents on the hosts it discovers: each host
// runs its own agent (a cloud instance's boot script, a scheduler), and the
// list says which of them take part. An instance about to be scaled in
// drops out of the list first and leaves without losing a step.
//
// The script runs on demand, at most once per interval, on a thread of its
// own, so that a slow cloud API never holds up a heartbeat: current()
// answers from the last good run at once and asks for a new one when it is
// due. Only the agents that close or lead a round ask. A run that fails
// (exit status, a malformed line, past the timeout) is logged once per
// distinct error and leaves the last good list in force; before the first
// good run the rendezvous goes by the list another agent published in the
// store, and without one allows no host.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "rendezvous/host_list.hpp"

namespace elasticrun::agent {

struct HostDiscoveryOptions {
  std::string script;  // run as `/bin/sh -c '"$0"' script`: a path, or a name on PATH
  std::chrono::milliseconds interval{std::chrono::seconds(1)};
  std::chrono::milliseconds timeout{std::chrono::seconds(30)};
};

// Runs the script once in the agent's environment, its stdin /dev/null and
// its stderr the agent's. Returns the list it printed; throws Error saying
// why there is none (TimeoutError past `timeout`, when its process group
// is killed; the same within 100 ms of `cancel` becoming true).
rendezvous::HostList run_discovery_script(const std::string& script,
                                          std::chrono::milliseconds timeout,
                                          const std::atomic<bool>* cancel = nullptr);

class HostDiscovery final : public rendezvous::HostSource {
 public:
  static constexpr std::chrono::milliseconds kFirstWait{std::chrono::seconds(5)};

  explicit HostDiscovery(HostDiscoveryOptions options);  // starts the thread; runs nothing yet
  ~HostDiscovery();                                      // kills a run in progress and joins
  HostDiscovery(const HostDiscovery&) = delete;
  HostDiscovery& operator=(const HostDiscovery&) = delete;

  // The last good list, none before a run succeeds; the first call waits
  // for the first run, up to kFirstWait.
  std::optional<rendezvous::HostList> current() override;
  std::chrono::milliseconds interval() const override { return options_.interval; }

 private:
  using Clock = std::chrono::steady_clock;
  void run();
  void finish_run(std::optional<rendezvous::HostList> list, const std::string& error);

  const HostDiscoveryOptions options_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::optional<rendezvous::HostList> good_;
  std::string last_error_;
  std::optional<Clock::time_point> last_run_;  // when the last run ended
  bool wanted_ = false;
  std::atomic<bool> stop_{false};
  int runs_ = 0;
  std::thread thread_;
};

}  // namespace elasticrun::agent
