// --spot-notice-url: a thread that asks an instance-metadata endpoint for
// an interruption notice and, when one comes, makes this node leave the
// job as a SIGTERM does (the agent's handler: a graceful leave at an agreed
// step in an elastic job; the workers told to stop in a fixed one), before
// the cloud takes the instance (AWS gives two minutes).
//
// The endpoint's contract, as the clouds' are:
// - AWS (http://169.254.169.254/latest/meta-data/spot/instance-action):
//   404 until a notice, then 200 with {"action": "terminate", "time": ...}.
//   IMDSv2: a token from PUT /latest/api/token goes with every GET when
//   the server gives one (an IMDSv1 or plain server gives none).
// - GCP (.../computeMetadata/v1/instance/preempted, Metadata-Flavor:
//   Google, which every request carries): 200 "FALSE", then "TRUE".
// So: a 200 whose body is not empty and not FALSE is a notice; 404, FALSE
// or an empty body are none; anything else (no answer, 5xx) is logged
// once per change and polled again.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

namespace elasticrun::agent {

struct SpotNoticeOptions {
  std::string url;  // http://host[:port]/path; empty: no watch
  std::chrono::milliseconds interval{std::chrono::seconds(5)};
};

enum class SpotAnswer { kNone, kNotice, kUnclear };
// What one answer says (status 0: no answer at all).
SpotAnswer read_spot_answer(int status, std::string_view body);

class SpotWatch {
 public:
  // Starts polling. Throws ConfigError for a URL it cannot use.
  explicit SpotWatch(SpotNoticeOptions options);
  ~SpotWatch();  // stops polling and joins
  SpotWatch(const SpotWatch&) = delete;
  SpotWatch& operator=(const SpotWatch&) = delete;

 private:
  void run();

  const SpotNoticeOptions options_;
  std::string origin_;  // "http://host:port"
  std::string path_;
  std::mutex mu_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace elasticrun::agent
