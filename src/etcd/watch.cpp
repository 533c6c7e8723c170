#include "etcd/watch.hpp"

#include <httplib.h>

#include "etcd/codec.hpp"
#include "util/quiet_thread.hpp"

namespace elasticrun::etcd {
namespace {

// A watch message carries the keys' values, each below etcd's request limit
// (1.5 MiB by default); a longer line is not etcd talking.
constexpr size_t kMaxWatchMessage = 16u << 20;

// An idle stream says nothing; after this long without a byte the watch
// ends and is started again from its revision, so a member whose host
// vanished without a FIN is left within that time. (A member cut off from
// its leader ends the stream itself: Grpc-Metadata-hasleader.)
constexpr time_t kIdleLimitS = 30;

}  // namespace

KeyWatch::KeyWatch(std::unique_ptr<httplib::Client> client, std::string key, int64_t start_revision)
    : client_(std::move(client)), key_(std::move(key)) {
  client_->set_keep_alive(false);
  client_->set_read_timeout(kIdleLimitS, 0);
  thread_ = util::start_quiet_thread([this, start_revision] { run(start_revision); });
}

KeyWatch::~KeyWatch() {
  // Closing the socket ends the blocking read on the watch's thread; until
  // the thread has opened it there is nothing to close, hence the loop.
  std::unique_lock lock(mu_);
  while (!exited_) {
    lock.unlock();
    client_->stop();
    lock.lock();
    cv_.wait_for(lock, std::chrono::milliseconds(10), [this] { return exited_; });
  }
  lock.unlock();
  thread_.join();
}

KeyWatch::State KeyWatch::wait(util::Deadline dl) {
  std::unique_lock lock(mu_);
  cv_.wait_until(lock, dl.at(), [this] { return state_ != State::kRunning; });
  return state_;
}

std::string KeyWatch::failure() const {
  std::lock_guard lock(mu_);
  return failure_;
}

void KeyWatch::finish(State s, std::string why) {
  {
    std::lock_guard lock(mu_);
    if (state_ != State::kRunning) return;
    state_ = s;
    failure_ = std::move(why);
  }
  cv_.notify_all();
}

void KeyWatch::run(int64_t start_revision) {
  httplib::Request req;
  req.method = "POST";
  req.path = "/v3/watch";
  req.body = watch_request(key_, start_revision).dump();
  req.set_header("Content-Type", "application/json");
  // A member cut off from its cluster's leader ends the stream instead of
  // holding it open with nothing to say.
  req.set_header("Grpc-Metadata-hasleader", "true");
  std::string buffer;
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    buffer.append(data, n);
    if (buffer.size() > kMaxWatchMessage) {
      finish(State::kFailed,
             "a watch message of over " + std::to_string(kMaxWatchMessage) + " bytes");
      return false;
    }
    for (size_t nl; (nl = buffer.find('\n')) != std::string::npos; buffer.erase(0, nl + 1)) {
      // Nothing may escape into httplib's read loop: a malformed message
      // ends this stream like a broken one.
      const Json line = Json::parse(buffer.substr(0, nl), nullptr, /*allow_exceptions=*/false);
      if (line.is_discarded()) {
        finish(State::kFailed, "an unreadable watch message");
        return false;
      }
      if (const auto e = error_of(line)) {
        finish(State::kFailed, e->message);
        return false;
      }
      WatchMessage m;
      try {
        m = parse_watch(line);
      } catch (const std::exception& e) {
        finish(State::kFailed, e.what());
        return false;
      }
      if (m.compact_revision > 0) {
        finish(State::kCompacted);
        return false;
      }
      if (m.canceled) {
        finish(State::kFailed, "watch cancelled: " + m.cancel_reason);
        return false;
      }
      for (const auto& ev : m.events) {
        if (!ev.deleted && ev.kv.key == key_) {
          finish(State::kPut);
          return false;
        }
      }
    }
    return true;
  };
  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  client_->send(req, res, err);
  finish(State::kFailed,
         err == httplib::Error::Success ? "the stream ended" : httplib::to_string(err));
  {
    std::lock_guard lock(mu_);
    exited_ = true;
  }
  cv_.notify_all();
}

}  // namespace elasticrun::etcd
