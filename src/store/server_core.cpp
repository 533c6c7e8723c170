// Connections, reads, the job secret's gate, request handling and replies:
// ServerCore's side that every client sees (store/server_core.hpp).
#include "store/server_core.hpp"

#include <netinet/in.h>
#include <uv.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "store/auth.hpp"
#include "store/frame.hpp"
#include "store/handler.hpp"
#include "store/replica.hpp"

namespace elasticrun::store {

namespace {

uint64_t random_store_id() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

}  // namespace

ServerCore::ServerCore(ServerOptions o)
    : options(std::move(o)), handler(options.limits), store_id(random_store_id()) {}

void ServerCore::drop(Connection* c, const std::string& reason) {
  if (c->closing) return;
  log->warn("closing connection from {} (client {}): {}", c->peer, c->id, reason);
  dropped.fetch_add(1, std::memory_order_relaxed);
  close(c);
}

void ServerCore::refuse(Connection* c, std::string_view answer, const std::string& why,
                        bool count) {
  c->out.append(answer);
  if (c->in_flight == 0 && !c->out.empty()) {
    uv_buf_t buf = uv_buf_init(c->out.data(), static_cast<unsigned>(c->out.size()));
    (void)uv_try_write(reinterpret_cast<uv_stream_t*>(&c->tcp), &buf, 1);
  }
  c->out.clear();
  if (count) refused.fetch_add(1, std::memory_order_relaxed);
  drop(c, "refused: " + why);
}

void ServerCore::close(Connection* c) {
  if (c->closing) return;
  c->closing = true;
  if (c == standby) detach_standby("its connection closed");
  if (!c->held.empty()) {
    c->held.clear();
    holding.erase(std::remove(holding.begin(), holding.end(), c), holding.end());
  }
  // Freed once libuv has closed it: no list may keep it.
  if (c->flush_queued) dirty.erase(std::remove(dirty.begin(), dirty.end(), c), dirty.end());
  buffered_bytes -= c->partial.size();
  c->partial.clear();
  c->partial.shrink_to_fit();
  handler.disconnect(c->id);
  clients.erase(c->id);
  uv_close(reinterpret_cast<uv_handle_t*>(&c->tcp), [](uv_handle_t* h) {
    auto* conn = static_cast<Connection*>(h->data);
    conn->core->open.fetch_sub(1, std::memory_order_relaxed);
    delete conn;
  });
}

void ServerCore::queue_reply(Connection* c, std::string_view bytes, bool reads_data) {
  if (c->closing || bytes.empty()) return;
  // A PING tells nothing of the data, but its writer learns from it that
  // its own last write is done: held while that write is unacknowledged.
  const bool wait = reads_data ? seq > acked : c->last_write > acked;
  if (wait || !c->held.empty()) {
    // After a change the standby has not acknowledged: a client must not
    // see what the standby could lack (nor anything after it, in order).
    if (c->held.empty()) holding.push_back(c);
    c->held.emplace_back(seq, std::string(bytes));
    return;
  }
  c->out.append(bytes);
  if (!c->flush_queued) {
    c->flush_queued = true;
    dirty.push_back(c);
  }
}

void ServerCore::flush(Connection* c) {
  c->flush_queued = false;
  if (c->closing || c->out.empty()) return;
  if (c->in_flight == 0) {
    uv_buf_t buf = uv_buf_init(c->out.data(), static_cast<unsigned>(c->out.size()));
    int n = uv_try_write(reinterpret_cast<uv_stream_t*>(&c->tcp), &buf, 1);
    if (n == static_cast<int>(c->out.size())) {
      c->out.clear();
      return;
    }
    if (n < 0 && n != UV_EAGAIN) {
      close(c);
      return;
    }
    if (n > 0) c->out.erase(0, static_cast<size_t>(n));
  }
  auto* w = new WriteReq;
  w->data.swap(c->out);
  w->conn = c;
  c->in_flight += w->data.size();
  uv_buf_t buf = uv_buf_init(w->data.data(), static_cast<unsigned>(w->data.size()));
  int rc = uv_write(&w->req, reinterpret_cast<uv_stream_t*>(&c->tcp), &buf, 1,
                    [](uv_write_t* req, int status) {
                      auto* wr = reinterpret_cast<WriteReq*>(req);
                      Connection* conn = wr->conn;
                      if (status != UV_ECANCELED) {
                        conn->in_flight -= wr->data.size();
                        if (status < 0) {
                          conn->core->close(conn);
                        } else {
                          conn->core->after_write(conn);
                        }
                      }
                      delete wr;
                    });
  if (rc < 0) {
    c->in_flight -= w->data.size();
    delete w;
    close(c);
    return;
  }
  if (c->in_flight + c->out.size() > options.max_pending_reply_bytes && c->reading) {
    // The client sends faster than it reads: stop reading until it drains.
    uv_read_stop(reinterpret_cast<uv_stream_t*>(&c->tcp));
    c->reading = false;
  }
}

void ServerCore::after_write(Connection* c) {
  if (c->closing) return;
  if (!c->out.empty()) {
    flush(c);
  } else if (!c->reading && c->in_flight <= options.max_pending_reply_bytes / 2) {
    start_reading(c);
  }
}

void ServerCore::flush_dirty() {
  // flush() may close connections (which leave dirty) and, through a
  // standby's detach, add released ones: hence the index.
  for (size_t i = 0; i < dirty.size(); ++i) flush(dirty[i]);
  dirty.clear();
}

void ServerCore::start_reading(Connection* c) {
  c->reading = true;
  uv_read_start(
      reinterpret_cast<uv_stream_t*>(&c->tcp),
      [](uv_handle_t* h, size_t, uv_buf_t* buf) {
        // One buffer for all connections: the loop is single-threaded and
        // on_read consumes it before the next allocation.
        auto* conn = static_cast<Connection*>(h->data);
        *buf = uv_buf_init(conn->core->read_buffer, kReadChunk);
      },
      [](uv_stream_t* s, ssize_t n, const uv_buf_t* buf) {
        auto* conn = static_cast<Connection*>(s->data);
        conn->core->on_read(conn, n, buf);
      });
}

void ServerCore::on_read(Connection* c, ssize_t n, const uv_buf_t* buf) {
  if (n == 0 || c->closing) return;
  if (n < 0) {
    if (n != UV_EOF)
      log->debug("connection from {} failed: {}", c->peer, uv_strerror(static_cast<int>(n)));
    // A client that vanishes during a WAIT simply stops waiting.
    close(c);
    flush_dirty();  // a standby that went released the replies it held
    return;
  }
  std::string_view fresh(buf->base, static_cast<size_t>(n));
  if (c->standby) {
    read_acks(c, fresh);
    flush_dirty();
    return;
  }
  if (c->partial.empty()) {
    size_t used = process(c, fresh);
    if (!c->closing && used < fresh.size()) keep_partial(c, fresh.substr(used));
  } else {
    if (!account(c, fresh.size())) return;
    c->partial.append(fresh);
    // A large request arriving in many reads is scanned once it can be
    // complete, not once per read.
    if (c->partial.size() < c->need) return;
    size_t used = process(c, c->partial);
    if (!c->closing) {
      buffered_bytes -= used;
      c->partial.erase(0, used);
      if (c->partial.empty()) c->partial.shrink_to_fit();
    }
  }
  flush_dirty();
}

bool ServerCore::account(Connection* c, size_t more) {
  if (buffered_bytes + more > options.max_buffered_bytes) {
    drop(c, "partial requests of all clients exceed the server's buffer limit of " +
                std::to_string(options.max_buffered_bytes) + " bytes");
    return false;
  }
  buffered_bytes += more;
  return true;
}

void ServerCore::keep_partial(Connection* c, std::string_view rest) {
  if (!account(c, rest.size())) return;
  c->partial.assign(rest);
}

size_t ServerCore::process(Connection* c, std::string_view data) {
  size_t used = 0;
  std::string& reply = reply_buffer;
  while (!c->closing && used < data.size()) {
    if (!c->gate.open()) {
      reply.clear();
      std::string why;
      if (c->gate.screen(static_cast<uint8_t>(data[used]), reply, why) ==
          AuthGate::Verdict::kRefused) {
        refuse(c, reply, why);
        break;
      }
    }
    Request req;
    ParseResult r = parse_request(data.substr(used), c->dialect, options.limits, req);
    if (r.status == ParseStatus::kIncomplete) {
      c->need = r.needed;
      break;
    }
    if (r.status == ParseStatus::kInvalid) {
      drop(c, r.error);
      break;
    }
    used += r.consumed;
    requests.fetch_add(1, std::memory_order_relaxed);
    reply.clear();
    std::string why;
    const AuthGate::Verdict v = c->gate.admit(req, reply, why);
    if (v == AuthGate::Verdict::kAnswered) {
      queue_reply(c, reply);
      continue;
    }
    if (v == AuthGate::Verdict::kRefused) {
      refuse(c, reply, why);
      break;
    }
    if (!serving.load(std::memory_order_relaxed)) {
      if (req.type == QueryType::kValidate) continue;  // no reply, as any store
      std::string word;
      ReplyWriter(word).u32(kStandbyWord);
      refuse(c, word, "this store is a standby: it serves no client until it takes over",
             /*count=*/false);
      break;
    }
    if (req.type == QueryType::kReplicate) {
      attach_standby(c, req.values[0]);
      if (c->standby) read_acks(c, data.substr(used));
      return data.size();
    }
    woken.clear();
    HandleResult h = handler.handle(c->id, req, reply, woken);
    if (!h.ok) {
      drop(c, h.error);
      break;
    }
    if (replicate_journal()) c->last_write = seq;
    queue_reply(c, reply, req.type != QueryType::kPing);
    wake(woken);
  }
  return used;
}

void ServerCore::wake(const std::vector<ClientId>& ids) {
  static const char kStop = static_cast<char>(WaitResponse::kStopWaiting);
  for (ClientId id : ids) {
    auto it = clients.find(id);
    if (it != clients.end()) queue_reply(it->second, std::string_view(&kStop, 1));
  }
}

void ServerCore::on_connection(int status) {
  if (status < 0) {
    log->warn("accept failed: {}", uv_strerror(status));
    return;
  }
  auto* c = new Connection;
  c->core = this;
  uv_tcp_init(&loop, &c->tcp);
  c->tcp.data = c;
  if (uv_accept(reinterpret_cast<uv_stream_t*>(&listener),
                reinterpret_cast<uv_stream_t*>(&c->tcp)) != 0) {
    uv_close(reinterpret_cast<uv_handle_t*>(&c->tcp),
             [](uv_handle_t* h) { delete static_cast<Connection*>(h->data); });
    return;
  }
  uv_tcp_nodelay(&c->tcp, 1);
  c->id = next_id++;
  c->peer = peer_name(&c->tcp);
  c->gate = AuthGate(options.secret.empty() ? nullptr : &options.secret);
  clients.emplace(c->id, c);
  accepted.fetch_add(1, std::memory_order_relaxed);
  open.fetch_add(1, std::memory_order_relaxed);
  log->debug("client {} connected from {}", c->id, c->peer);
  start_reading(c);
}

std::string ServerCore::peer_name(uv_tcp_t* tcp) {
  sockaddr_storage ss{};
  int len = sizeof(ss);
  if (uv_tcp_getpeername(tcp, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "?";
  char host[INET6_ADDRSTRLEN] = "?";
  uint16_t port = 0;
  if (ss.ss_family == AF_INET) {
    auto* a = reinterpret_cast<sockaddr_in*>(&ss);
    uv_ip4_name(a, host, sizeof(host));
    port = ntohs(a->sin_port);
    return std::string(host) + ":" + std::to_string(port);
  }
  auto* a6 = reinterpret_cast<sockaddr_in6*>(&ss);
  uv_ip6_name(a6, host, sizeof(host));
  port = ntohs(a6->sin6_port);
  return "[" + std::string(host) + "]:" + std::to_string(port);
}

void ServerCore::shutdown() {
  auto close_handle = [](uv_handle_t* h) {
    if (!uv_is_closing(h)) uv_close(h, nullptr);
  };
  // The port first: a standby that sees its stream end finds it closed,
  // not a store that seems to live on.
  if (listening) close_handle(reinterpret_cast<uv_handle_t*>(&listener));
  // Copy: close() erases from clients.
  std::vector<Connection*> all;
  all.reserve(clients.size());
  for (auto& [id, c] : clients) all.push_back(c);
  for (Connection* c : all) close(c);
  close_handle(reinterpret_cast<uv_handle_t*>(&stop_async));
  close_handle(reinterpret_cast<uv_handle_t*>(&promote_async));
  close_handle(reinterpret_cast<uv_handle_t*>(&flush_async));
  close_handle(reinterpret_cast<uv_handle_t*>(&ack_timer));
  for (uv_signal_t* s : signals) {
    uv_close(reinterpret_cast<uv_handle_t*>(s),
             [](uv_handle_t* h) { delete reinterpret_cast<uv_signal_t*>(h); });
  }
  signals.clear();
}

}  // namespace elasticrun::store
