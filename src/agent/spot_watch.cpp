#include "agent/spot_watch.hpp"

#include <httplib.h>

#include <csignal>

#include "elasticrun/errors.hpp"
#include "util/logging.hpp"
#include "util/quiet_thread.hpp"
#include "util/strings.hpp"

namespace elasticrun::agent {
namespace {

constexpr std::chrono::seconds kRequestTimeout{1};
constexpr const char* kTokenPath = "/latest/api/token";
constexpr const char* kTokenTtl = "21600";  // IMDSv2's longest: six hours

std::string trimmed(std::string_view s) {
  const auto a = s.find_first_not_of(" \t\r\n");
  if (a == std::string_view::npos) return "";
  const auto b = s.find_last_not_of(" \t\r\n");
  return std::string(s.substr(a, b - a + 1));
}

}  // namespace

SpotAnswer read_spot_answer(int status, std::string_view body) {
  if (status == 404) return SpotAnswer::kNone;
  if (status != 200) return SpotAnswer::kUnclear;
  const std::string text = trimmed(body);
  if (text.empty() || text == "FALSE" || text == "false") return SpotAnswer::kNone;
  return SpotAnswer::kNotice;
}

SpotWatch::SpotWatch(SpotNoticeOptions options) : options_(std::move(options)) {
  constexpr std::string_view kScheme = "http://";
  const std::string_view url = options_.url;
  if (!url.starts_with(kScheme) || url.size() == kScheme.size()) {
    throw ConfigError("--spot-notice-url " + util::quote(options_.url) + ": not an http:// URL");
  }
  const auto slash = url.find('/', kScheme.size());
  origin_ = std::string(url.substr(0, slash));
  path_ = slash == std::string_view::npos ? "/" : std::string(url.substr(slash));
  thread_ = util::start_quiet_thread([this] { run(); });
}

SpotWatch::~SpotWatch() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void SpotWatch::run() {
  auto log = util::logger("agent");
  log->info("watching {} for a spot interruption notice every {}", options_.url,
            util::seconds_text(options_.interval));
  httplib::Client client(origin_);
  client.set_connection_timeout(kRequestTimeout);
  client.set_read_timeout(kRequestTimeout);
  client.set_keep_alive(false);
  std::string last_trouble;
  // IMDSv2: where the server hands out a token, every read must carry one.
  // Asked for until a server shows it has none; again after a 401.
  std::string token;
  bool ask_token = true;
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    lock.unlock();
    if (token.empty() && ask_token) {
      const auto got = client.Put(kTokenPath, {{"X-aws-ec2-metadata-token-ttl-seconds", kTokenTtl}},
                                  "", "text/plain");
      if (got && got->status == 200) token = trimmed(got->body);
      ask_token = !got || got->status >= 500;  // 403, 404, 405: no tokens here
    }
    httplib::Headers headers{{"Metadata-Flavor", "Google"}};
    if (!token.empty()) headers.emplace("X-aws-ec2-metadata-token", token);
    const auto res = client.Get(path_, headers);
    const int status = res ? res->status : 0;
    if (status == 401) {
      token.clear();
      ask_token = true;
    }
    const std::string body = res ? res->body : "";
    switch (read_spot_answer(status, body)) {
      case SpotAnswer::kNotice:
        log->warn("spot interruption notice from {}: {}; this node leaves the job", options_.url,
                  util::quote(trimmed(body), 200));
        // The same path as a SIGTERM from the cloud: the agent's handler.
        ::kill(::getpid(), SIGTERM);
        return;
      case SpotAnswer::kNone:
        last_trouble.clear();
        break;
      case SpotAnswer::kUnclear: {
        std::string trouble =
            res ? "HTTP " + std::to_string(status) : std::string(httplib::to_string(res.error()));
        if (trouble != last_trouble) {
          log->warn("spot notice watch: {} from {}; asking again", trouble, options_.url);
        }
        last_trouble = std::move(trouble);
        break;
      }
    }
    lock.lock();
    wake_.wait_for(lock, options_.interval, [this] { return stop_; });
  }
}

}  // namespace elasticrun::agent
