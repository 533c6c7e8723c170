#include "agent/job_control.hpp"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "control/control_block.hpp"
#include "ctl/job_connection.hpp"
#include "ctl/job_status.hpp"
#include "elasticrun/errors.hpp"
#include "events/types.hpp"
#include "util/quiet_thread.hpp"

namespace elasticrun::agent {
namespace {

using namespace std::chrono_literals;

// How long POST /scale and /release wait for the leader when asked to: a
// few heartbeat intervals normally; a round in the middle of a change takes
// longer. The request stays queued past it (504 says so).
constexpr auto kHandledTimeout = 30s;
constexpr auto kStoreTimeout = 10s;
// Long enough for the server to write POST /drain's answer.
constexpr auto kDrainDelay = 200ms;

}  // namespace

AgentJobControl::AgentJobControl(const AgentConfig& config) : config_(config) {}

void AgentJobControl::set_block(const control::ControlBlock* block) {
  std::lock_guard<std::mutex> lock(mu_);
  block_ = block;
}

void AgentJobControl::on_event(const events::Event& e) {
  if (e.type != events::type::kRoundStart) return;
  std::lock_guard<std::mutex> lock(mu_);
  round_ = e.fields;
}

ctl::JobAddress AgentJobControl::job() const {
  return {config_.rdzv.store_host, static_cast<uint16_t>(config_.rdzv.store_port),
          config_.rdzv.run_id, config_.rdzv.secret, config_.rdzv.etcd};
}

// A connection per request, closed with it: API calls are rare, and a
// connection kept open would hold the store's host agent at the end of the
// job, where it serves the store until every other connection is gone.
StoreClient AgentJobControl::connect() const {
  return ctl::connect_job(job(), kStoreTimeout, kStoreTimeout);
}

nlohmann::json AgentJobControl::status() {
  nlohmann::json node = {{"node_id", config_.event_log.node_id},
                         {"host", config_.event_log.host},
                         {"pid", static_cast<int>(::getpid())}};
  {
    // The lock is the agent loop's too (on_event): nothing slow under it.
    nlohmann::json ranks = nlohmann::json::array();
    std::lock_guard<std::mutex> lock(mu_);
    const int offset = round_.is_object() ? round_.value("rank_offset", 0) : 0;
    for (int lr = 0; block_ && lr < block_->num_slots(); ++lr) {
      const auto slot = block_->read_slot(lr);
      ranks.push_back({{"local_rank", lr}, {"rank", offset + lr}, {"step", slot.step}});
    }
    node["round"] = round_;
    node["ranks"] = std::move(ranks);
  }
  nlohmann::json out = {{"run_id", config_.dynamic ? config_.rdzv.run_id : config_.run_id},
                        {"backend", config_.dynamic      ? (config_.rdzv.etcd ? "etcd" : "c10d")
                                    : config_.standalone ? "standalone"
                                                         : "static"},
                        {"node", node}};
  if (config_.dynamic) {
    StoreClient client = connect();
    out["job"] = nlohmann::json::parse(ctl::format_json(ctl::read_status(client, job())));
  }
  return out;
}

nlohmann::json AgentJobControl::request(const ctl::Request& r, bool wait) {
  if (!config_.dynamic) {
    throw serve::UnsupportedError(
        "this job's size is fixed (--rdzv-backend static or --standalone); an elastic job runs "
        "with --rdzv-backend c10d --nnodes MIN:MAX");
  }
  StoreClient job = connect();
  const ctl::Ticket t = ctl::submit(job, r);
  nlohmann::json out = {{"request", ctl::describe(r)}, {"seq", t.seq}};
  if (!wait) {
    out["handled"] = false;
    return out;
  }
  ctl::wait_handled(job, t, kHandledTimeout);  // a TimeoutError leaves the request queued
  out["handled"] = true;
  out["outcome"] = ctl::outcome(job, r, t);
  return out;
}

nlohmann::json AgentJobControl::scale(int nodes, bool wait) {
  return request({ctl::Request::Kind::kScale, nodes}, wait);
}

nlohmann::json AgentJobControl::release(int nodes, bool wait) {
  return request({ctl::Request::Kind::kRelease, nodes}, wait);
}

nlohmann::json AgentJobControl::drain() {
  // The same path as a SIGTERM from the outside: the agent's handler makes
  // this node leave, the others go on without it. Sent once the answer is
  // on its way: a node waiting as a spare has no handler, and ends at once.
  std::lock_guard<std::mutex> lock(mu_);
  if (!drainer_.joinable()) {
    drainer_ = util::start_quiet_thread([] {
      std::this_thread::sleep_for(kDrainDelay);
      ::kill(::getpid(), SIGTERM);
    });
  }
  return {{"draining", true}, {"node_id", config_.event_log.node_id}};
}

AgentJobControl::~AgentJobControl() {
  if (drainer_.joinable()) drainer_.join();
}

}  // namespace elasticrun::agent
