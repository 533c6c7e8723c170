#include "store/server.hpp"

#include <netdb.h>
#include <uv.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "elasticrun/errors.hpp"
#include "store/server_core.hpp"

namespace elasticrun::store {

struct Server::Impl {
  ServerCore core;
  std::atomic<bool> stop_requested{false};
  bool bound = false;
  uint16_t port = 0;
  std::mutex mu;  // guards async handle use against destruction
  bool loop_alive = false;

  explicit Impl(ServerOptions o) : core(std::move(o)) {}
};

Server::Server(ServerOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {
  uv_loop_init(&impl_->core.loop);
  uv_async_init(&impl_->core.loop, &impl_->core.stop_async,
                [](uv_async_t* a) { static_cast<ServerCore*>(a->data)->shutdown(); });
  impl_->core.stop_async.data = &impl_->core;
  uv_async_init(&impl_->core.loop, &impl_->core.flush_async,
                [](uv_async_t* a) { static_cast<ServerCore*>(a->data)->flush_dirty(); });
  impl_->core.flush_async.data = &impl_->core;
  uv_timer_init(&impl_->core.loop, &impl_->core.ack_timer);
  impl_->core.ack_timer.data = &impl_->core;
  uv_async_init(&impl_->core.loop, &impl_->core.promote_async,
                [](uv_async_t* a) { static_cast<ServerCore*>(a->data)->take_promotion(); });
  impl_->core.promote_async.data = &impl_->core;
  impl_->core.serving = !impl_->core.options.standby;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->loop_alive = true;
  }
}

Server::~Server() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->loop_alive = false;
  }
  // Close whatever is still open (run() never called, or returned already)
  // and let libuv run the close callbacks before the loop goes away.
  impl_->core.shutdown();
  uv_run(&impl_->core.loop, UV_RUN_DEFAULT);
  uv_loop_close(&impl_->core.loop);
}

void Server::bind() {
  ServerCore& core = impl_->core;
  const auto& opt = core.options;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  const std::string where = opt.host + ":" + std::to_string(opt.port);
  int gai = getaddrinfo(opt.host.c_str(), std::to_string(opt.port).c_str(), &hints, &res);
  if (gai != 0)
    throw NetworkError("store: cannot resolve listen address " + where + ": " + gai_strerror(gai));
  uv_tcp_init(&core.loop, &core.listener);
  core.listening = true;
  core.listener.data = &core;
  int rc = uv_tcp_bind(&core.listener, res->ai_addr, 0);
  freeaddrinfo(res);
  if (rc == 0) {
    rc = uv_listen(reinterpret_cast<uv_stream_t*>(&core.listener), opt.listen_backlog,
                   [](uv_stream_t* s, int status) {
                     static_cast<ServerCore*>(s->data)->on_connection(status);
                   });
  }
  if (rc != 0) throw NetworkError("store: cannot listen on " + where + ": " + uv_strerror(rc));
  sockaddr_storage ss{};
  int len = sizeof(ss);
  uv_tcp_getsockname(&core.listener, reinterpret_cast<sockaddr*>(&ss), &len);
  impl_->port = ntohs(ss.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                                               : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  impl_->bound = true;
  core.log->info("store listening on {}:{}", opt.host, impl_->port);
}

uint16_t Server::port() const {
  return impl_->port;
}
const std::string& Server::host() const {
  return impl_->core.options.host;
}

void Server::stop_on_signals(const std::vector<int>& sigs) {
  for (int signum : sigs) {
    auto* s = new uv_signal_t;
    uv_signal_init(&impl_->core.loop, s);
    s->data = &impl_->core;
    uv_signal_start(
        s,
        [](uv_signal_t* h, int received) {
          auto* core = static_cast<ServerCore*>(h->data);
          core->log->info("received signal {}, stopping", received);
          core->stop_signal.store(received);
          core->shutdown();
        },
        signum);
    impl_->core.signals.push_back(s);
  }
}

void Server::run() {
  if (!impl_->bound) bind();
  if (impl_->stop_requested.load()) impl_->core.shutdown();
  uv_run(&impl_->core.loop, UV_RUN_DEFAULT);
  impl_->core.log->info("store on port {} stopped", impl_->port);
}

void Server::stop() {
  impl_->stop_requested.store(true);
  std::lock_guard<std::mutex> lock(impl_->mu);
  // uv_async_send is the one libuv call that is safe from another thread.
  // Once shutdown() has closed the handle a send only pokes the loop's wakeup
  // descriptor, which is harmless while the loop exists: loop_alive says so.
  if (impl_->loop_alive) uv_async_send(&impl_->core.stop_async);
}

void Server::promote(std::vector<Change> data) {
  {
    std::lock_guard<std::mutex> lock(impl_->core.promote_mu);
    impl_->core.promotion = std::move(data);
  }
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (impl_->loop_alive) uv_async_send(&impl_->core.promote_async);
}

bool Server::serving() const {
  return impl_->core.serving.load();
}

ServerStats Server::stats() const {
  const ServerCore& c = impl_->core;
  return ServerStats{c.accepted.load(),          c.open.load(),      c.dropped.load(),
                     c.refused.load(),           c.requests.load(),  c.has_standby.load(),
                     c.standbys_attached.load(), c.replicated.load()};
}

int Server::stop_signal() const {
  return impl_->core.stop_signal.load();
}

}  // namespace elasticrun::store
