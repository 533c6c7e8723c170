#include "store/standby.hpp"

#include "elasticrun/errors.hpp"
#include "store/frame.hpp"
#include "store/replica.hpp"
#include "util/logging.hpp"
#include "util/quiet_thread.hpp"
#include "util/socket.hpp"

namespace elasticrun::store {
namespace {

using Clock = std::chrono::steady_clock;
using util::Deadline;
constexpr auto kTick = std::chrono::milliseconds(200);  // how often stop_ is looked at

}  // namespace

StandbyFollower::StandbyFollower(Options options) : options_(std::move(options)) {
  // It never takes a signal meant for its owner's loop (util/quiet_thread).
  thread_ = util::start_quiet_thread([this] { run(); });
}

StandbyFollower::~StandbyFollower() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

bool StandbyFollower::wait_lost(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, timeout, [this] { return lost_; });
}

std::string StandbyFollower::why() const {
  std::lock_guard<std::mutex> lock(mu_);
  return why_;
}

std::vector<Change> StandbyFollower::take() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!lost_ || !synced_) return {};
  return copy_.snapshot();
}

void StandbyFollower::run() {
  auto log = util::logger("store");
  const std::string primary = util::format_endpoint(options_.primary_host, options_.primary_port);
  std::string why;
  for (;;) {
    why = follow_once();
    if (stop_) return;
    // Lost only when a copy is whole and the primary's port does not
    // answer. Before the first copy there is nothing to take over with:
    // wait for the primary (it may start after its standby).
    if (synced_ && !primary_answers()) break;
    if (synced_) {
      // The primary lives and ended the stream (it detached us, say): it
      // served writes since that this copy lacks, so the copy is stale
      // until a new snapshot is whole.
      synced_ = false;
      log->warn("standby {}: the stream from {} ended ({}), but it answers: following it again",
                options_.endpoint, primary, why);
    } else {
      log->debug("standby {}: not following {} yet: {}", options_.endpoint, primary, why);
    }
    for (int i = 0; i < 3 && !stop_; ++i) std::this_thread::sleep_for(kTick);
    if (stop_) return;
  }
  log->warn("standby {}: the primary {} is lost: {}", options_.endpoint, primary, why);
  std::lock_guard<std::mutex> lock(mu_);
  lost_ = true;
  why_ = why;
  cv_.notify_all();
}

std::string StandbyFollower::follow_once() {
  StoreClientOptions o;
  o.connect_timeout = kTick * 5;
  o.timeout = std::chrono::seconds(10);
  o.secret = options_.secret;
  util::Socket sock;
  try {
    StoreClient client = StoreClient::connect(options_.primary_host, options_.primary_port, o);
    sock = take_socket(client);
  } catch (const Error& e) {
    return e.what();
  }
  std::string frame;
  RequestWriter(frame).type(QueryType::kReplicate).bytes(options_.endpoint);
  if (util::Status st = sock.send_all(frame.data(), frame.size(), Deadline::after(o.timeout));
      !st) {
    return st.message();
  }
  // The snapshot goes into a State of its own: the copy is replaced only
  // by a whole one, so a stream cut mid-snapshot leaves the last copy.
  State incoming;
  bool in_snapshot = true;
  bool first = true;  // numbers go on from the primary's last: the first sets the base
  uint64_t last = 0, acked = 0;
  std::string buf;
  std::vector<char> chunk(1 << 16);
  auto heard = Clock::now();
  // A record is as large as the primary allows (its limits are its own)
  // or as a value grown by APPENDs: held to the request size only.
  Limits limits;
  limits.max_key_size = limits.max_value_size = limits.max_request_size;
  while (!stop_) {
    auto got = sock.recv_some(chunk.data(), chunk.size(), Deadline::after(kTick));
    if (!got) {
      if (got.status().err() != ETIMEDOUT) return got.status().message();
      if (Clock::now() - heard > options_.silence) {
        if (!primary_answers()) return "the stream was silent and the primary does not answer";
        heard = Clock::now();
      }
      continue;
    }
    if (got.value() == 0) return "the primary closed the stream";
    heard = Clock::now();
    buf.append(chunk.data(), got.value());
    size_t at = 0;
    for (;;) {
      ReplicaRecord rec;
      ParseResult r = parse_replica_record(std::string_view(buf).substr(at), limits, rec);
      if (r.status == ParseStatus::kIncomplete) break;
      if (r.status == ParseStatus::kInvalid) return r.error;
      at += r.consumed;
      if (first) {
        last = rec.tag == ReplicaRecord::Tag::kSynced ? rec.seq : rec.seq - 1;
        first = false;
      }
      if (rec.seq != (rec.tag == ReplicaRecord::Tag::kSynced ? last : last + 1)) {
        return "change " + std::to_string(rec.seq) + " after " + std::to_string(last);
      }
      last = rec.seq;
      if (rec.tag == ReplicaRecord::Tag::kSynced) {
        if (store_id_ != 0 && rec.store_id != store_id_) {
          util::logger("store")->warn(
              "standby {}: the store at {}:{} is a new one (it restarted): copying it afresh",
              options_.endpoint, options_.primary_host, options_.primary_port);
        }
        store_id_ = rec.store_id;
        std::lock_guard<std::mutex> lock(mu_);
        copy_ = std::move(incoming);
        in_snapshot = false;
        synced_ = true;
        applied_ = 0;
      } else if (in_snapshot) {
        incoming.apply(rec.change);
      } else {
        copy_.apply(rec.change);  // mu_ is for take(), which waits for lost_
        applied_.fetch_add(1);
      }
    }
    buf.erase(0, at);
    if (last > acked) {
      std::string ack;
      write_ack(ack, last);
      if (util::Status st = sock.send_all(ack.data(), ack.size(), Deadline::after(o.timeout));
          !st) {
        return st.message();
      }
      acked = last;
    }
  }
  return "stopped";
}

bool StandbyFollower::primary_answers() const {
  // A store that answers: the whole handshake, PING's echo included. A
  // port that only accepts is not enough: a primary being killed can
  // complete a TCP handshake after its stream to us is already closed.
  StoreClientOptions o;
  o.connect_timeout = options_.probe_timeout;
  o.timeout = options_.probe_timeout;
  o.secret = options_.secret;
  try {
    (void)StoreClient::connect(options_.primary_host, options_.primary_port, o);
    return true;
  } catch (const Error&) {
    return false;
  }
}

}  // namespace elasticrun::store
