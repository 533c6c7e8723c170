// The agent's HTTP server (docs/api.md): the Prometheus text format on
// GET /metrics, and the control API: GET /status, POST /scale, POST
// /release, POST /drain. cpp-httplib on a thread of its own, which also
// binds, with up to two workers, started at the first requests; a request
// never runs on the agent's loop. Bad requests get a
// 4xx and a JSON body {"error": "..."} and change nothing; bodies over
// kMaxBody bytes get 413 before they are read whole.
//
// It binds to loopback unless the user names another address: POST
// /release takes a node away. With the job secret, the control paths ask
// every request to prove it (ServerOptions::secret).
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "serve/metrics.hpp"
#include "util/http_auth.hpp"

namespace httplib {
class Server;
}

namespace elasticrun::serve {

inline constexpr size_t kMaxBody = 4096;

// What the API asks of the agent; any method may throw: ConfigError is the
// caller's mistake (400), UnsupportedError (below) a request this job
// cannot do (409), TimeoutError an answer that did not come in time (504),
// any other Error a store that failed (503).
class JobControl {
 public:
  virtual nlohmann::json status() = 0;
  // Asks the job's leader to scale to `nodes` nodes (scale) or to release
  // `nodes` of them; `wait`: returns once the leader acted on it.
  virtual nlohmann::json scale(int nodes, bool wait) = 0;
  virtual nlohmann::json release(int nodes, bool wait) = 0;
  // This node leaves the job as on SIGTERM.
  virtual nlohmann::json drain() = 0;

 protected:
  ~JobControl() = default;
};

class UnsupportedError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 0;  // 0: any free port (port() says which)
  // The job secret: with one, GET /status and the POSTs answer only
  // requests that prove it (util/http_auth.hpp; 401 and a warning else),
  // and GET /auth/nonce hands out their nonces. GET /metrics stays open:
  // Prometheus cannot sign, and it changes nothing. Empty: none.
  std::string secret;
};

class HttpServer {
 public:
  // Starts serving on a thread of its own and returns at once: httplib's
  // set-up (the routes' patterns, the address's lookup, the bind) runs
  // beside the agent's start, which asks port() when it needs the answer.
  // `metrics` and `control` (either may be null: its paths answer 404)
  // must outlive the server.
  HttpServer(const ServerOptions& options, AgentMetrics* metrics, JobControl* control);
  // Stops serving and joins the thread (a request under way finishes first).
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // The port served, once bound (the first call waits for the bind).
  // Throws NetworkError when the address cannot be bound.
  int port();
  const std::string& host() const { return host_; }
  // Stops accepting and returns without waiting for the thread to end (the
  // destructor joins it), so that the agent's own teardown runs beside it.
  // Calls after the first do nothing.
  void stop();

 private:
  const std::string host_;
  const int requested_port_;
  const std::string secret_;
  util::NonceBook nonces_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool bound_ = false;                       // the thread tried to bind (under mu_)
  int port_ = 0;                             // what it bound, <= 0: failed (under mu_)
  std::unique_ptr<httplib::Server> server_;  // made by the thread; read once bound_
  std::atomic<bool> loop_ended_{false};      // listen_after_bind returned, or never ran
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace elasticrun::serve
