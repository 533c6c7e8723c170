#include "agent/static_restart.hpp"

#include <chrono>

#include "elasticrun/errors.hpp"
#include "util/logging.hpp"
#include "util/quiet_thread.hpp"

namespace elasticrun::agent {
namespace {

using namespace std::chrono_literals;

// How often a watch looks up from its WAIT to notice that its attempt is
// over; a restart request wakes it at once.
constexpr auto kPoll = 200ms;

std::string attempt_key(int attempt, const char* name) {
  return "attempt/" + std::to_string(attempt) + "/" + name;
}

}  // namespace

StaticRestarts::StaticRestarts(const AgentConfig& config, int store_port)
    : config_(config),
      store_port_(store_port),
      client_(connect()),
      courier_(std::make_unique<StoreClient>(connect())) {}

StoreClient StaticRestarts::connect() const {
  StoreClientOptions o;
  o.key_prefix = "/elasticrun/" + config_.run_id + "/";
  o.connect_timeout = config_.join_timeout;
  return StoreClient::connect(config_.master_addr, static_cast<uint16_t>(store_port_), o);
}

void StaticRestarts::publish_worker_store(int attempt, int port) {
  client_.set(attempt_key(attempt, "master"), std::to_string(port));
}

int StaticRestarts::worker_store_port(int attempt) {
  const std::string key = attempt_key(attempt, "master");
  std::string v;
  try {
    v = client_.get(key, config_.join_timeout);
  } catch (const TimeoutError&) {
    throw TimeoutError("node rank 0 did not start the store of restart " + std::to_string(attempt) +
                       " within the join timeout");
  }
  try {
    const int port = std::stoi(v);
    if (port > 0 && port < 65536) return port;
  } catch (const std::exception&) {
  }
  throw StoreError("malformed worker store port '" + v + "' under " + key);
}

void StaticRestarts::request_restart(int attempt, const std::string& reason) {
  courier_.post([key = attempt_key(attempt, "restart"), reason](StoreClient& client) {
    try {
      client.compare_set(key, "", reason);
    } catch (const Error& e) {
      // The other nodes then learn it from their own workers' failures.
      util::logger("agent")->warn("could not ask the other nodes to restart: {}", e.what());
    }
  });
}

void StaticRestarts::publish_decision(int attempt, const health::RestartDecision& d) {
  client_.set(attempt_key(attempt, "decision"),
              std::string(health::to_string(d.action)) + " " + d.reason);
}

health::RestartDecision StaticRestarts::decision(int attempt) {
  const std::string key = attempt_key(attempt, "decision");
  std::string v;
  try {
    v = client_.get(key, config_.join_timeout);
  } catch (const TimeoutError&) {
    return {health::RestartAction::kFail, "node rank 0 decided nothing about restart " +
                                              std::to_string(attempt + 1) +
                                              " within the join timeout"};
  } catch (const Error& e) {
    // Node 0 hosts the job store: once it is gone no restart can happen,
    // whether node 0 decided to fail and exited or died deciding.
    return {health::RestartAction::kFail,
            "lost node rank 0's store before its decision about restart " +
                std::to_string(attempt + 1) + ": " + e.what()};
  }
  const size_t sp = v.find(' ');
  const std::string word = v.substr(0, sp);
  const std::string reason = sp == std::string::npos ? "" : v.substr(sp + 1);
  for (auto action : {health::RestartAction::kInPlace, health::RestartAction::kFullJob,
                      health::RestartAction::kFail}) {
    if (word == health::to_string(action)) return {action, reason};
  }
  throw StoreError("malformed restart decision '" + v + "' under " + key);
}

StaticRestarts::Watch::Watch(const StaticRestarts& owner, int attempt, Inbox& inbox) {
  // A connection of its own: the agent's main thread uses the owner's meanwhile.
  auto client = std::make_shared<StoreClient>(owner.connect());
  thread_ = util::start_quiet_thread([this, client, attempt, &inbox] {
    const std::string key = attempt_key(attempt, "restart");
    while (!done_.load()) {
      try {
        client->wait({key}, kPoll);
        inbox.post([why = "restart requested: " + client->get_present(key)](AttemptControl& c) {
          c.request_stop(why);
        });
        return;
      } catch (const TimeoutError&) {
      } catch (const Error& e) {
        if (!done_.load()) {
          util::logger("agent")->warn("lost the job store while workers run: {}", e.what());
        }
        return;
      }
    }
  });
}

StaticRestarts::Watch::~Watch() {
  done_.store(true);
  thread_.join();
}

}  // namespace elasticrun::agent
