// Restarts of a static multi-node job (--rdzv-backend static, or --nnodes N
// with --master-addr/--master-port), coordinated over the job's store.
//
// torchrun restarts each node on its own: when a worker fails, only its node
// restarts; the other nodes' workers hang in their next collective until it
// times out, and every restarted worker connects to the same store as the
// attempt before, where PyTorch finds the previous attempt's keys (gloo's
// peer addresses among them) and fails to connect. So with PyTorch 2.x a
// static multi-node job does not survive a worker failure under torchrun.
//
// Here every attempt after the first gets a fresh worker store, hosted by
// node rank 0 and published in the job store, and a failure on any node
// stops the workers of every node, which then restart together:
//
//   attempt/<k>/master   node 0: the port of attempt k's worker store (k >= 1)
//   attempt/<k>/restart  the first node whose workers failed in attempt k
//                        (COMPARE_SET from ""): why
//   attempt/<k>/decision node 0: the restart policy's decision for that
//                        failure, "in_place|full|fail <reason>"
//
// Attempt 0 uses the job store itself, as torchrun does, so the workers'
// environment is torchrun's until something fails.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "agent/agent.hpp"
#include "agent/attempt.hpp"
#include "agent/courier.hpp"
#include "elasticrun/store_client.hpp"
#include "health/restart_policy.hpp"

namespace elasticrun::agent {

class StaticRestarts {
 public:
  // Connects to the job store at master_addr:store_port (retrying up to the
  // join timeout). Throws elasticrun::Error.
  StaticRestarts(const AgentConfig& config, int store_port);

  // Node 0: announces attempt's worker store. The others: waits up to the
  // join timeout for node 0's announcement and returns the port.
  void publish_worker_store(int attempt, int port);
  int worker_store_port(int attempt);

  // Asks every node to restart attempt's workers; the first reason wins.
  // Returns at once (the attempt's loop calls it): the courier writes it.
  void request_restart(int attempt, const std::string& reason);
  // Waits until the requests made so far are written (or failed).
  void flush() { courier_.drain(); }

  // What the restart policy made of attempt's failure. Node 0 decides and
  // publishes; the others wait for it (up to the join timeout), so that
  // every node restarts the same way or none does. A node that loses node
  // 0's store meanwhile reads it as kFail: no restart can run without it.
  void publish_decision(int attempt, const health::RestartDecision& d);
  health::RestartDecision decision(int attempt);

  // While one attempt runs: posts the first node's restart request for it
  // to the attempt's inbox, so that this node's workers stop too.
  class Watch {
   public:
    Watch(const StaticRestarts& owner, int attempt, Inbox& inbox);
    ~Watch();  // returns within one poll interval
    Watch(const Watch&) = delete;
    Watch& operator=(const Watch&) = delete;

   private:
    std::atomic<bool> done_{false};
    std::thread thread_;
  };

 private:
  StoreClient connect() const;

  const AgentConfig& config_;
  int store_port_;
  StoreClient client_;            // the agent's main thread's
  Courier<StoreClient> courier_;  // restart requests, off the loop
};

}  // namespace elasticrun::agent
