// The HTTP API's side in the agent (serve/http_server.hpp): GET /status
// answers with this node's place and its ranks' steps, and for a dynamic
// job with what `elasticctl status --json` prints (members, spares,
// excluded nodes, the policy's state: ctl/job_status); POST /scale and
// /release make elasticctl's requests (ctl/ctl_requests); POST /drain
// makes this node leave as on SIGTERM. It hears the event log to know the
// node's round. Runs on the server's threads; one store connection of its
// own, used by one request at a time.
#pragma once

#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "agent/agent.hpp"
#include "ctl/ctl_requests.hpp"
#include "ctl/job_connection.hpp"
#include "elasticrun/store_client.hpp"
#include "events/event_log.hpp"
#include "serve/http_server.hpp"

namespace elasticrun::control {
class ControlBlock;
}

namespace elasticrun::agent {

class AgentJobControl final : public serve::JobControl, public events::EventObserver {
 public:
  explicit AgentJobControl(const AgentConfig& config);
  ~AgentJobControl();
  // The node's control block, once it exists (before any worker starts).
  void set_block(const control::ControlBlock* block);

  nlohmann::json status() override;
  nlohmann::json scale(int nodes, bool wait) override;
  nlohmann::json release(int nodes, bool wait) override;
  nlohmann::json drain() override;

  void on_event(const events::Event& e) override;

 private:
  nlohmann::json request(const ctl::Request& r, bool wait);
  StoreClient connect() const;
  ctl::JobAddress job() const;

  const AgentConfig& config_;
  std::mutex mu_;  // block_, round_
  const control::ControlBlock* block_ = nullptr;
  nlohmann::json round_;  // the last round_start's fields; null before one
  std::thread drainer_;   // POST /drain's SIGTERM, sent after the answer
};

}  // namespace elasticrun::agent
