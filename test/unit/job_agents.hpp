// Agents of a dynamic job for the elasticctl tests (ctl_test, watch_test):
// real Rendezvous objects with heartbeats around a test store, with short
// windows. Agent i is node id "node<i>" on host "10.0.0.<i>", two workers.
#pragma once

#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "rendezvous/heartbeat.hpp"
#include "rendezvous/rendezvous.hpp"
#include "server_fixture.hpp"

namespace elasticrun::test {

inline rendezvous::RendezvousConfig job_agent(const ServerFixture& s, const std::string& run_id,
                                              int i, int min, int max) {
  using namespace std::chrono_literals;
  rendezvous::RendezvousConfig c;
  c.store_host = "127.0.0.1";
  c.store_port = s.port();
  c.run_id = run_id;
  c.node_id = "node" + std::to_string(i);
  c.host = "10.0.0." + std::to_string(i);
  c.local_world_size = 2;
  c.sizes.min_replicas = min;
  c.sizes.max_replicas = max;
  c.join_timeout = 20s;
  c.last_call_timeout = 200ms;
  c.heartbeat_interval = 50ms;
  c.missed_heartbeats = 4;
  c.store_timeout = 10s;
  return c;
}

// n agents with heartbeats (so that nobody takes over the closer's job);
// each beats the progress in `progress[i]`.
struct JobAgents {
  std::vector<std::unique_ptr<rendezvous::Rendezvous>> rdzv;
  std::vector<std::unique_ptr<rendezvous::BeatProgress>> progress;
  std::vector<std::unique_ptr<rendezvous::Heartbeat>> beats;

  JobAgents(const ServerFixture& s, const std::string& run_id, int n, int min, int max) {
    for (int i = 0; i < n; ++i) {
      rdzv.push_back(std::make_unique<rendezvous::Rendezvous>(job_agent(s, run_id, i, min, max)));
      progress.push_back(std::make_unique<rendezvous::BeatProgress>());
      beats.push_back(
          std::make_unique<rendezvous::Heartbeat>(rdzv.back()->config(), progress.back().get()));
    }
  }

  std::vector<rendezvous::Assignment> join_all() {
    std::vector<std::future<rendezvous::Assignment>> fs;
    for (auto& r : rdzv) {
      fs.push_back(std::async(std::launch::async, [&r] { return r->join(); }));
    }
    std::vector<rendezvous::Assignment> out;
    for (auto& f : fs) out.push_back(f.get());
    return out;
  }
};

}  // namespace elasticrun::test
