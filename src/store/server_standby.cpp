// The standby's half of ServerCore (store/replica.hpp, docs/protocol.md
// "Standby"): the numbered change stream to the standby, its
// acknowledgements, the replies held until it acknowledged them, and a
// standby's own promotion.
#include <uv.h>

#include <chrono>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "store/replica.hpp"
#include "store/server_core.hpp"

namespace elasticrun::store {

namespace {

constexpr uint64_t kAckCheckMs = 500;

}  // namespace

void ServerCore::take_promotion() {
  std::optional<std::vector<Change>> data;
  {
    std::lock_guard<std::mutex> lock(promote_mu);
    data.swap(promotion);
  }
  if (!data || serving.load()) return;
  for (const Change& ch : *data) handler.apply(ch);
  serving.store(true);
  log->warn("this standby takes over: it serves its primary's data ({} changes) from now on",
            data->size());
}

void ServerCore::attach_standby(Connection* c, const std::string& endpoint) {
  if (standby) {
    drop(c, "a second standby (at " + endpoint + "); this store has one at " + standby_endpoint);
    return;
  }
  c->standby = true;
  standby = c;
  standby_endpoint = endpoint;
  has_standby = true;
  standbys_attached.fetch_add(1, std::memory_order_relaxed);
  std::string records;
  const std::vector<Change> snapshot = handler.snapshot();
  for (const Change& ch : snapshot) write_change(records, ++seq, ch);
  write_synced(records, seq, store_id);
  handler.set_journal(&journal);
  log->info("standby {} (client {} from {}) attached: {} changes to copy", endpoint, c->id, c->peer,
            snapshot.size());
  unacked_since = std::chrono::steady_clock::now();
  // The snapshot is as large as the data: only what follows it counts
  // against the standby's backlog limit.
  send_to_standby(records, /*limit=*/false);
  uv_timer_start(
      &ack_timer, [](uv_timer_t* t) { static_cast<ServerCore*>(t->data)->check_acks(); },
      kAckCheckMs, kAckCheckMs);
}

void ServerCore::check_acks() {
  if (!standby || seq == acked) return;
  const auto waited = std::chrono::steady_clock::now() - unacked_since;
  if (waited > options.standby_ack_timeout) {
    drop(standby,
         "acknowledged nothing for " +
             std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(waited).count()) +
             " ms (its host may be gone)");
    flush_dirty();
  }
}

void ServerCore::detach_standby(const std::string& why) {
  log->warn("standby {} detached ({}): serving without one", standby_endpoint, why);
  standby = nullptr;
  has_standby = false;
  uv_timer_stop(&ack_timer);
  handler.set_journal(nullptr);
  journal.clear();
  acked = seq;
  release_held();
}

bool ServerCore::replicate_journal() {
  if (journal.empty()) return false;
  if (seq == acked) unacked_since = std::chrono::steady_clock::now();
  std::string records;
  for (const Change& ch : journal) write_change(records, ++seq, ch);
  replicated.fetch_add(journal.size(), std::memory_order_relaxed);
  journal.clear();
  send_to_standby(records);
  return true;
}

void ServerCore::send_to_standby(std::string_view records, bool limit) {
  Connection* s = standby;
  s->out.append(records);
  if (limit && s->in_flight + s->out.size() > options.max_pending_reply_bytes) {
    drop(s, "the standby fell " + std::to_string(s->in_flight + s->out.size()) + " bytes behind");
    return;
  }
  if (!s->flush_queued) {
    s->flush_queued = true;
    dirty.push_back(s);
  }
}

void ServerCore::read_acks(Connection* c, std::string_view data) {
  std::string& in = c->ack_bytes;
  in.append(data);  // at most kAckSize - 1 bytes stay
  size_t at = 0;
  uint64_t ack = acked;
  for (; in.size() - at >= kAckSize; at += kAckSize) std::memcpy(&ack, in.data() + at, kAckSize);
  in.erase(0, at);
  if (ack > seq || ack < acked) {
    drop(c, "the standby acknowledged change " + std::to_string(ack) + " of " +
                std::to_string(seq) + " (last acknowledged " + std::to_string(acked) + ")");
    return;
  }
  if (ack == acked) return;
  acked = ack;
  unacked_since = std::chrono::steady_clock::now();  // it answers: the clock restarts
  release_held();
}

void ServerCore::release_held() {
  size_t kept = 0;
  for (Connection* c : holding) {
    while (!c->held.empty() && c->held.front().first <= acked) {
      c->out.append(c->held.front().second);
      c->held.pop_front();
    }
    if (!c->out.empty() && !c->flush_queued) {
      c->flush_queued = true;
      dirty.push_back(c);
    }
    if (!c->held.empty()) holding[kept++] = c;
  }
  holding.resize(kept);
  uv_async_send(&flush_async);
}

}  // namespace elasticrun::store
