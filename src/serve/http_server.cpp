#include "serve/http_server.hpp"

#include <httplib.h>
#include <sys/socket.h>

#include <charconv>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <system_error>
#include <vector>

#include "elasticrun/errors.hpp"
#include "util/http_auth.hpp"
#include "util/logging.hpp"
#include "util/quiet_thread.hpp"

namespace elasticrun::serve {
namespace {

// Two workers: a scrape and a request at once; more would only add
// threads to every agent of a large job.
constexpr size_t kWorkers = 2;
constexpr time_t kIoTimeoutS = 10;

// httplib's ThreadPool with its threads started at the first requests, not
// with the server: an agent that nobody scrapes (and every agent's start
// and end) pays for the listener's thread only.
class LazyPool final : public httplib::TaskQueue {
 public:
  explicit LazyPool(size_t max_threads) : max_threads_(max_threads) {}
  ~LazyPool() override = default;

  void enqueue(std::function<void()> fn) override {
    std::unique_lock<std::mutex> lock(mu_);
    if (idle_ <= jobs_.size() && threads_.size() < max_threads_) {
      try {
        threads_.emplace_back([this] { work(); });
      } catch (const std::system_error&) {
        // Out of threads: a running worker takes it later; with none, the
        // listener answers it itself rather than end the agent.
        if (threads_.empty()) {
          lock.unlock();
          fn();
          return;
        }
      }
    }
    jobs_.push_back(std::move(fn));
    cv_.notify_one();
  }

  void shutdown() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();  // only the listener enqueues, and it has stopped
  }

 private:
  void work() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      ++idle_;
      cv_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
      --idle_;
      if (jobs_.empty()) return;  // stopping_, and nothing is left to answer
      auto fn = std::move(jobs_.front());
      jobs_.pop_front();
      lock.unlock();
      fn();
      lock.lock();
    }
  }

  const size_t max_threads_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  std::vector<std::thread> threads_;
  size_t idle_ = 0;  // threads waiting for a job
  bool stopping_ = false;
};

void reply(httplib::Response& res, int status, const nlohmann::json& body) {
  res.status = status;
  res.set_content(body.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n",
                  "application/json");
}

void fail(httplib::Response& res, int status, const std::string& why) {
  reply(res, status, {{"error", why}});
}

// A request's parameters: the JSON object of its body, or its query string.
struct Params {
  std::optional<int> nodes;
  bool wait = true;
};

std::optional<int> parse_int(const std::string& s) {
  int v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  return v;
}

// Throws ConfigError saying what is wrong.
Params read_params(const httplib::Request& req) {
  Params p;
  if (!req.body.empty()) {
    const auto j = nlohmann::json::parse(req.body, nullptr, false);
    if (j.is_discarded() || !j.is_object()) {
      throw ConfigError("the body is not a JSON object");
    }
    for (const auto& [k, v] : j.items()) {
      if (k == "nodes") {
        if (!v.is_number_integer()) throw ConfigError("\"nodes\" must be an integer");
        p.nodes = v.get<int>();
      } else if (k == "wait") {
        if (!v.is_boolean()) throw ConfigError("\"wait\" must be true or false");
        p.wait = v.get<bool>();
      } else {
        throw ConfigError("unknown field \"" + k + "\" (nodes, wait)");
      }
    }
  }
  for (const auto& [k, v] : req.params) {
    if (k == "nodes") {
      p.nodes = parse_int(v);
      if (!p.nodes) throw ConfigError("nodes=" + v + " is not an integer");
    } else if (k == "wait") {
      if (v != "true" && v != "false" && v != "1" && v != "0") {
        throw ConfigError("wait=" + v + " is not true or false");
      }
      p.wait = v == "true" || v == "1";
    } else {
      throw ConfigError("unknown parameter " + k + " (nodes, wait)");
    }
  }
  return p;
}

// Runs one API call, mapping what it throws to a status.
template <typename Fn>
void answer(httplib::Response& res, Fn&& fn) {
  try {
    reply(res, 200, fn());
  } catch (const ConfigError& e) {
    fail(res, 400, e.what());
  } catch (const UnsupportedError& e) {
    fail(res, 409, e.what());
  } catch (const TimeoutError& e) {
    fail(res, 504, e.what());
  } catch (const std::exception& e) {
    fail(res, 503, e.what());
  }
}

void route(httplib::Server& s, const std::string& path, const char* method,
           httplib::Server::Handler handler) {
  auto wrong = [method](const httplib::Request& req, httplib::Response& res) {
    res.set_header("Allow", method);
    fail(res, 405, req.method + " " + req.path + ": use " + method);
  };
  const bool get = std::string(method) == "GET";
  s.Get(path, get ? handler : wrong);
  s.Post(path, get ? wrong : handler);
  s.Put(path, wrong);
  s.Delete(path, wrong);
}

// The job secret's check in front of a handler (util/http_auth.hpp); no
// check when the job has no secret.
struct Gate {
  const std::string* secret = nullptr;  // null: none
  util::NonceBook* nonces = nullptr;
};

httplib::Server::Handler guarded(const Gate& gate, httplib::Server::Handler handler) {
  if (!gate.secret) return handler;
  return [gate, handler = std::move(handler)](const httplib::Request& req, httplib::Response& res) {
    const std::string why =
        util::check_http_authorization(*gate.secret, *gate.nonces, req.method, req.target, req.body,
                                       req.get_header_value("Authorization"));
    if (!why.empty()) {
      util::logger("http")->warn("refused {} {} from {}: {}", req.method, req.path, req.remote_addr,
                                 why);
      return fail(res, 401, why);
    }
    handler(req, res);
  };
}

// The routes and settings of the agent's server.
void configure(httplib::Server& s, AgentMetrics* metrics, JobControl* control, const Gate& gate) {
  s.new_task_queue = [] { return new LazyPool(kWorkers); };
  s.set_payload_max_length(kMaxBody);
  // SO_REUSEADDR only: httplib's default adds SO_REUSEPORT, with which a
  // second agent would bind the same port and share its requests.
  s.set_socket_options([](int sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  s.set_read_timeout(kIoTimeoutS, 0);
  s.set_write_timeout(kIoTimeoutS, 0);
  s.set_keep_alive_max_count(100);

  if (metrics) {
    route(s, "/metrics", "GET", [metrics](const httplib::Request&, httplib::Response& res) {
      res.set_content(metrics->scrape(), "text/plain; version=0.0.4; charset=utf-8");
    });
  }
  if (gate.secret) {
    route(s, util::kAuthNoncePath, "GET",
          [nonces = gate.nonces](const httplib::Request& req, httplib::Response& res) {
            res.set_content(nonces->issue(req.remote_addr), "text/plain");
          });
  }
  if (control) {
    route(s, "/status", "GET",
          guarded(gate, [control](const httplib::Request& req, httplib::Response& res) {
            if (!req.params.empty()) return fail(res, 400, "GET /status takes no parameters");
            answer(res, [&] { return control->status(); });
          }));
    auto scaling = [control](bool scale) {
      return [control, scale](const httplib::Request& req, httplib::Response& res) {
        answer(res, [&] {
          const Params p = read_params(req);
          if (!p.nodes) throw ConfigError("give the number of nodes: {\"nodes\": N}");
          if (*p.nodes < 1) throw ConfigError("nodes must be at least 1");
          return scale ? control->scale(*p.nodes, p.wait) : control->release(*p.nodes, p.wait);
        });
      };
    };
    route(s, "/scale", "POST", guarded(gate, scaling(true)));
    route(s, "/release", "POST", guarded(gate, scaling(false)));
    route(s, "/drain", "POST",
          guarded(gate, [control](const httplib::Request& req, httplib::Response& res) {
            answer(res, [&] {
              if (!req.body.empty() || !req.params.empty()) {
                throw ConfigError("POST /drain takes no parameters");
              }
              return control->drain();
            });
          }));
  }
  s.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    // Only what no handler answered: an unknown path, a body too large.
    if (!res.body.empty()) return;
    if (res.status == 413) {
      return fail(res, 413, "the body is over " + std::to_string(kMaxBody) + " bytes");
    }
    if (res.status == 404) {
      return fail(res, 404,
                  "no such path: " + req.path +
                      " (GET /metrics, GET /status, POST /scale, "
                      "POST /release, POST /drain)");
    }
    fail(res, res.status, "bad request");
  });
}

}  // namespace

HttpServer::HttpServer(const ServerOptions& options, AgentMetrics* metrics, JobControl* control)
    : host_(options.host), requested_port_(options.port), secret_(options.secret) {
  // Its workers start from it and inherit the quiet mask (util/quiet_thread).
  thread_ = util::start_quiet_thread([this, options, metrics, control] {
    auto server = std::make_unique<httplib::Server>();
    configure(*server, metrics, control, secret_.empty() ? Gate{} : Gate{&secret_, &nonces_});
    const int port = options.port == 0
                         ? server->bind_to_any_port(options.host)
                         : (server->bind_to_port(options.host, options.port) ? options.port : -1);
    {
      std::lock_guard<std::mutex> lock(mu_);
      server_ = std::move(server);
      port_ = port;
      bound_ = true;
    }
    cv_.notify_all();
    // A request that comes before the loop runs waits in the backlog.
    if (port > 0) server_->listen_after_bind();
    loop_ended_ = true;
  });
}

int HttpServer::port() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return bound_; });
  if (port_ <= 0) {
    throw NetworkError("cannot serve HTTP on " + host_ + ":" + std::to_string(requested_port_) +
                       " (in use, or not this machine's address)");
  }
  return port_;
}

void HttpServer::stop() {
  if (stopping_.exchange(true)) return;
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return bound_; });
    if (port_ <= 0) return;  // nothing listens
  }
  // httplib's stop() does nothing before the listening loop has begun, and
  // the loop then waits in accept() for good: wait for it to begin (within
  // microseconds of the bind), or to end (on an error, it is never seen
  // running).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (!server_->is_running() && !loop_ended_ && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  server_->stop();
}

HttpServer::~HttpServer() {
  stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace elasticrun::serve
