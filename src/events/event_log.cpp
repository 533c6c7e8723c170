#include "events/event_log.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>

#include "elasticrun/errors.hpp"
#include "events/event.hpp"
#include "util/logging.hpp"
#include "util/quiet_thread.hpp"

namespace elasticrun::events {
namespace {

// Writes all of `data` to fd; false (errno set) on an error.
bool write_all(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    done += static_cast<size_t>(n);
  }
  return true;
}

double monotonic_seconds() {
  struct timespec ts {};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

int64_t wall_milliseconds() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

EventLog::EventLog() = default;

EventLog::EventLog(LogOptions options, std::vector<EventObserver*> observers)
    : options_(std::move(options)), observers_(std::move(observers)) {
  if (!options_.path.empty()) {
    fd_ = ::open(options_.path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd_ < 0) {
      throw Error("cannot open the event log " + options_.path + ": " + std::strerror(errno));
    }
  }
  if (fd_ >= 0 || options_.console) writer_ = util::start_quiet_thread([this] { write_lines(); });
}

EventLog::~EventLog() {
  if (writer_.joinable()) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    writer_.join();
  }
  if (fd_ >= 0) ::close(fd_);
}

EventLog& EventLog::disabled() {
  static EventLog none;
  return none;
}

void EventLog::record(std::string_view type, nlohmann::json fields) {
  if (!enabled()) return;
  Event e;
  e.node = options_.node_id;
  e.host = options_.host;
  e.type = std::string(type);
  e.fields = std::move(fields);
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // Taken under the lock, so that seq, time and file order agree.
    e.seq = next_seq_++;
    e.wall_ms = wall_milliseconds();
    e.mono_s = monotonic_seconds();
    if (writer_.joinable()) {
      pending_.push_back(format_line(e) + "\n");
      wake = pending_.size() == 1;  // else the writer is gathering already
    }
  }
  if (wake) cv_.notify_all();
  for (EventObserver* o : observers_) o->on_event(e);
}

void EventLog::flush() {
  if (!writer_.joinable()) return;
  std::unique_lock<std::mutex> lock(mu_);
  const int64_t target = next_seq_;
  flush_to_ = std::max(flush_to_, target);
  cv_.notify_all();
  cv_.wait(lock, [&] { return written_seq_ >= target; });
}

void EventLog::write_lines() {
  bool warned = false;
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || !pending_.empty(); });
    // What else comes within the delay goes in the same write.
    cv_.wait_for(lock, kWriteDelay, [&] { return stop_ || flush_to_ > written_seq_; });
    if (pending_.empty()) return;  // stop_, and everything is written
    std::deque<std::string> batch;
    batch.swap(pending_);
    lock.unlock();
    std::string data;
    for (const auto& line : batch) data += line;
    if (fd_ >= 0 && !write_all(fd_, data) && !warned) {
      warned = true;
      util::logger("agent")->warn("cannot write the event log {}: {}; the job goes on without it",
                                  options_.path, std::strerror(errno));
    }
    if (options_.console) write_all(STDERR_FILENO, data);
    lock.lock();
    written_seq_ += static_cast<int64_t>(batch.size());
    cv_.notify_all();
  }
}

}  // namespace elasticrun::events
