#include "rendezvous/heartbeat.hpp"

#include "util/logging.hpp"
#include "util/quiet_thread.hpp"

namespace elasticrun::rendezvous {

namespace {
// A beat that takes longer than the stall limit is as good as missing. On
// etcd the beat lives on a lease of twice that limit: the key of an agent
// that died goes away, while the stall limit still decides first.
StoreClient connect_for(const RendezvousConfig& c, std::chrono::milliseconds connect_timeout) {
  const auto stall = c.heartbeat_interval * c.missed_heartbeats;
  return connect_store(c, connect_timeout, stall, 2 * stall);
}
}  // namespace

Heartbeat::Heartbeat(const RendezvousConfig& config, const BeatProgress* progress)
    : config_(config), progress_(progress), client_(connect_for(config_, config_.store_timeout)) {
  client_.set(keys::heartbeat(config_.node_id), beat());
  thread_ = util::start_quiet_thread([this] { run(); });
}

Heartbeat::~Heartbeat() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Heartbeat::run() {
  auto log = util::logger("rendezvous");
  const std::string key = keys::heartbeat(config_.node_id);
  bool broken = false;
  std::unique_lock lock(mu_);
  while (!cv_.wait_for(lock, config_.heartbeat_interval, [this] { return stop_; })) {
    lock.unlock();
    try {
      if (broken) {
        // Short: the destructor may be waiting for this thread.
        client_ = connect_for(config_, config_.heartbeat_interval);
        log->info("heartbeat: reconnected to the store {}", client_.endpoint());
        broken = false;
      }
      client_.set(key, beat());
    } catch (const Error& e) {
      // The store may be restarting or the network cut for a moment: keep
      // trying every interval; the leader decides what a gap means.
      if (!broken) log->warn("heartbeat: {}", e.what());
      broken = true;
    }
    lock.lock();
  }
}

std::string Heartbeat::beat() const {
  HeartbeatRecord r;
  r.unix_ms = now_unix_ms();
  if (progress_) progress_->load(r);
  return r.serialize();
}

void BeatProgress::set_ranks(std::vector<int64_t> steps, std::optional<double> samples_per_s) {
  std::lock_guard lock(mu_);
  rank_steps_ = std::move(steps);
  samples_per_s_ = samples_per_s;
}

void BeatProgress::load(HeartbeatRecord& r) const {
  r.step = step.load(std::memory_order_relaxed);
  r.compute_us = compute_us.load(std::memory_order_relaxed);
  std::lock_guard lock(mu_);
  r.rank_steps = rank_steps_;
  r.samples_per_s = samples_per_s_;
}

int64_t now_unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

bool heartbeat_stale(const std::string& beat, int64_t now_ms, std::chrono::milliseconds limit) {
  const auto b = HeartbeatRecord::try_parse(beat);
  return !b || now_ms - b->unix_ms > limit.count();
}

}  // namespace elasticrun::rendezvous
