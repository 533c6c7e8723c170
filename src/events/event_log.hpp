// An agent's event log: every decision and event of the agent, one line
// each (event.hpp), appended to --event-log FILE and/or written to stderr
// (torchrun's --event-log-handler console). Any thread may record; the
// line is formatted on the caller's thread and written by the log's own,
// so a slow disk never holds up the supervision loop or a store watch.
// The writer gathers what is recorded within kWriteDelay of a first line
// and writes it at once: a burst (an agent's start, a round's end) costs
// one wake of its thread, not one per line. Every line is written by
// flush() and by the log's end.
// A write error is logged once and the job goes on: the event log never
// fails a job.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "events/event.hpp"

namespace elasticrun::events {

// How long a line may wait for others before it is written.
inline constexpr std::chrono::milliseconds kWriteDelay{50};

// Hears every event as it is recorded (the agent's metrics): on the
// recording thread, after the line is queued; it must not block.
class EventObserver {
 public:
  virtual void on_event(const Event& e) = 0;

 protected:
  ~EventObserver() = default;
};

struct LogOptions {
  std::string path;      // empty: no file
  bool console = false;  // each line to stderr too
  std::string node_id;   // the "node" of every line
  std::string host;      // the "host" of every line
};

class EventLog {
 public:
  // Records nothing (neither a file nor the console).
  EventLog();
  // Opens options.path for appending (created 0644 when absent) and starts
  // the writer; throws Error naming the file when it cannot be opened.
  // `observers` (not owned) must outlive the log.
  explicit EventLog(LogOptions options, std::vector<EventObserver*> observers = {});
  // Writes what was recorded, then closes the file.
  ~EventLog();
  EventLog(const EventLog&) = delete;
  EventLog& operator=(const EventLog&) = delete;

  // A log for code that was given none: records nothing.
  static EventLog& disabled();

  bool enabled() const { return writer_.joinable() || !observers_.empty(); }
  // Any thread. `fields`: a JSON object of the type's fields (types.hpp).
  void record(std::string_view type, nlohmann::json fields = nlohmann::json::object());
  // Returns once every line recorded before the call is written.
  void flush();

 private:
  void write_lines();

  LogOptions options_;
  std::vector<EventObserver*> observers_;
  int fd_ = -1;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::string> pending_;  // formatted lines, each ending in '\n'
  int64_t next_seq_ = 0;
  int64_t written_seq_ = 0;  // lines written so far (flush waits on it)
  int64_t flush_to_ = 0;     // a flush() waits for the lines before this
  bool stop_ = false;
  std::thread writer_;
};

}  // namespace elasticrun::events
