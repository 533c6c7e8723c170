#include "store/server.hpp"

#include <netdb.h>
#include <uv.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <deque>
#include <mutex>
#include <optional>
#include <random>
#include <unordered_map>

#include "elasticrun/errors.hpp"
#include "store/auth.hpp"
#include "store/frame.hpp"
#include "store/handler.hpp"
#include "store/replica.hpp"
#include "util/logging.hpp"

namespace elasticrun::store {

struct ServerCore;

namespace {

constexpr size_t kReadChunk = 64 * 1024;

struct Connection;

struct WriteReq {
  uv_write_t req;
  std::string data;
  Connection* conn;
};

struct Connection {
  uv_tcp_t tcp;
  ServerCore* core = nullptr;
  ClientId id = 0;
  std::string peer;
  Dialect dialect = Dialect::kUnknown;
  AuthGate gate{nullptr};  // the job secret's handshake, when the store has one
  // Bytes of a request that has not fully arrived. Empty for idle clients, so
  // an idle connection costs a few hundred bytes.
  std::string partial;
  // Bytes `partial` must hold before parsing it again can succeed.
  size_t need = 0;
  // Replies produced but not yet handed to the kernel.
  std::string out;
  size_t in_flight = 0;  // bytes in uv_write requests not yet completed
  bool closing = false;
  bool reading = false;
  bool flush_queued = false;
  // A standby's stream (REPLICATE): records go out, acknowledgements come in.
  bool standby = false;
  // Replies waiting for the standby to acknowledge the change number they
  // follow, in order (store/replica.hpp).
  std::deque<std::pair<uint64_t, std::string>> held;
  std::string ack_bytes;    // the standby's: a partial acknowledgement
  uint64_t last_write = 0;  // the number of the last change this client made
};

uint64_t random_store_id() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

constexpr uint64_t kAckCheckMs = 500;

}  // namespace

// The loop-thread half of the server. Everything here runs on the loop thread.
struct ServerCore {
  uv_loop_t loop{};
  uv_tcp_t listener{};
  bool listening = false;  // listener initialised
  uv_async_t stop_async{};
  // A standby's promotion: the data handed over by promote(), taken up on
  // the loop (promote_async).
  uv_async_t promote_async{};
  std::mutex promote_mu;
  std::optional<std::vector<Change>> promotion;  // guarded by promote_mu
  std::atomic<bool> serving{true};
  std::vector<uv_signal_t*> signals;
  ServerOptions options;
  Handler handler;
  std::unordered_map<ClientId, Connection*> clients;
  std::vector<Connection*> dirty;  // connections with replies to flush
  ClientId next_id = 1;
  size_t buffered_bytes = 0;
  char read_buffer[kReadChunk];
  std::shared_ptr<spdlog::logger> log = util::logger("store");

  std::atomic<uint64_t> accepted{0}, open{0}, dropped{0}, refused{0}, requests{0};
  std::atomic<uint64_t> replicated{0}, standbys_attached{0};
  std::atomic<bool> has_standby{false};
  // This store's identity, in the standby's SYNCED record: a follower never
  // takes a copy of another store (one restarted at the same endpoint).
  const uint64_t store_id = random_store_id();

  // The standby, when one is attached: the changes of every request are
  // numbered and sent to it, and replies after a change are held until it
  // acknowledged the change (store/replica.hpp).
  Connection* standby = nullptr;
  std::string standby_endpoint;
  uint64_t seq = 0;    // the last change numbered
  uint64_t acked = 0;  // the last change the standby applied (== seq without one)
  std::vector<Change> journal;
  std::vector<Connection*> holding;  // connections with held replies
  // Since when a change has waited for the standby's acknowledgement; a
  // standby silent past options.standby_ack_timeout is detached (its host
  // may be gone without a FIN), checked by ack_timer.
  std::chrono::steady_clock::time_point unacked_since{};
  uv_timer_t ack_timer{};
  // Released replies are flushed on the loop's next turn: a release can
  // happen inside flush() (a standby's write failed), where flushing again
  // would re-enter it.
  uv_async_t flush_async{};
  std::atomic<int> stop_signal{0};

  explicit ServerCore(ServerOptions o) : options(std::move(o)), handler(options.limits) {}

  void drop(Connection* c, const std::string& reason) {
    if (c->closing) return;
    log->warn("closing connection from {} (client {}): {}", c->peer, c->id, reason);
    dropped.fetch_add(1, std::memory_order_relaxed);
    close(c);
  }

  // A client the gate turned away: its answer (after what was queued
  // before it) goes out now if the socket takes it, then the connection
  // closes, logged.
  void refuse(Connection* c, std::string_view answer, const std::string& why, bool count = true) {
    c->out.append(answer);
    if (c->in_flight == 0 && !c->out.empty()) {
      uv_buf_t buf = uv_buf_init(c->out.data(), static_cast<unsigned>(c->out.size()));
      (void)uv_try_write(reinterpret_cast<uv_stream_t*>(&c->tcp), &buf, 1);
    }
    c->out.clear();
    if (count) refused.fetch_add(1, std::memory_order_relaxed);
    drop(c, "refused: " + why);
  }

  void close(Connection* c) {
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

  // `reads_data`: false for a reply that tells nothing of the data (PING's).
  void queue_reply(Connection* c, std::string_view bytes, bool reads_data = true) {
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

  // Hands queued replies to the kernel: try_write first (no allocation on the
  // fast path), the rest through a uv_write that owns a copy.
  void flush(Connection* c) {
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

  void after_write(Connection* c) {
    if (c->closing) return;
    if (!c->out.empty()) {
      flush(c);
    } else if (!c->reading && c->in_flight <= options.max_pending_reply_bytes / 2) {
      start_reading(c);
    }
  }

  void flush_dirty() {
    // flush() may close connections (which leave dirty) and, through a
    // standby's detach, add released ones: hence the index.
    for (size_t i = 0; i < dirty.size(); ++i) flush(dirty[i]);
    dirty.clear();
  }

  void start_reading(Connection* c) {
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

  void on_read(Connection* c, ssize_t n, const uv_buf_t* buf) {
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

  bool account(Connection* c, size_t more) {
    if (buffered_bytes + more > options.max_buffered_bytes) {
      drop(c, "partial requests of all clients exceed the server's buffer limit of " +
                  std::to_string(options.max_buffered_bytes) + " bytes");
      return false;
    }
    buffered_bytes += more;
    return true;
  }

  void keep_partial(Connection* c, std::string_view rest) {
    if (!account(c, rest.size())) return;
    c->partial.assign(rest);
  }

  // Parses and handles every complete request in data; returns bytes used.
  size_t process(Connection* c, std::string_view data) {
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

  // --- the standby (store/replica.hpp) ---

  void take_promotion() {
    std::optional<std::vector<Change>> data;
    {
      std::lock_guard<std::mutex> lock(promote_mu);
      data.swap(promotion);
    }
    if (!data || serving.load()) return;
    for (const Change& ch : *data) handler.apply(ch);
    serving.store(true);
    log->warn("this standby takes over: it serves its primary's data ({} changes) from now on",
              data->size());
  }

  void attach_standby(Connection* c, const std::string& endpoint) {
    if (standby) {
      drop(c, "a second standby (at " + endpoint + "); this store has one at " + standby_endpoint);
      return;
    }
    c->standby = true;
    standby = c;
    standby_endpoint = endpoint;
    has_standby = true;
    standbys_attached.fetch_add(1, std::memory_order_relaxed);
    std::string records;
    const std::vector<Change> snapshot = handler.snapshot();
    for (const Change& ch : snapshot) write_change(records, ++seq, ch);
    write_synced(records, seq, store_id);
    handler.set_journal(&journal);
    log->info("standby {} (client {} from {}) attached: {} changes to copy", endpoint, c->id,
              c->peer, snapshot.size());
    unacked_since = std::chrono::steady_clock::now();
    // The snapshot is as large as the data: only what follows it counts
    // against the standby's backlog limit.
    send_to_standby(records, /*limit=*/false);
    uv_timer_start(
        &ack_timer, [](uv_timer_t* t) { static_cast<ServerCore*>(t->data)->check_acks(); },
        kAckCheckMs, kAckCheckMs);
  }

  void check_acks() {
    if (!standby || seq == acked) return;
    const auto waited = std::chrono::steady_clock::now() - unacked_since;
    if (waited > options.standby_ack_timeout) {
      drop(standby, "acknowledged nothing for " +
                        std::to_string(
                            std::chrono::duration_cast<std::chrono::milliseconds>(waited).count()) +
                        " ms (its host may be gone)");
      flush_dirty();
    }
  }

  void detach_standby(const std::string& why) {
    log->warn("standby {} detached ({}): serving without one", standby_endpoint, why);
    standby = nullptr;
    has_standby = false;
    uv_timer_stop(&ack_timer);
    handler.set_journal(nullptr);
    journal.clear();
    acked = seq;
    release_held();
  }

  // The journal of the request just handled, numbered, to the standby;
  // true when it held changes.
  bool replicate_journal() {
    if (journal.empty()) return false;
    if (seq == acked) unacked_since = std::chrono::steady_clock::now();
    std::string records;
    for (const Change& ch : journal) write_change(records, ++seq, ch);
    replicated.fetch_add(journal.size(), std::memory_order_relaxed);
    journal.clear();
    send_to_standby(records);
    return true;
  }

  void send_to_standby(std::string_view records, bool limit = true) {
    Connection* s = standby;
    s->out.append(records);
    if (limit && s->in_flight + s->out.size() > options.max_pending_reply_bytes) {
      drop(s, "the standby fell " + std::to_string(s->in_flight + s->out.size()) + " bytes behind");
      return;
    }
    if (!s->flush_queued) {
      s->flush_queued = true;
      dirty.push_back(s);
    }
  }

  void read_acks(Connection* c, std::string_view data) {
    std::string& in = c->ack_bytes;
    in.append(data);  // at most kAckSize - 1 bytes stay
    size_t at = 0;
    uint64_t ack = acked;
    for (; in.size() - at >= kAckSize; at += kAckSize) std::memcpy(&ack, in.data() + at, kAckSize);
    in.erase(0, at);
    if (ack > seq || ack < acked) {
      drop(c, "the standby acknowledged change " + std::to_string(ack) + " of " +
                  std::to_string(seq) + " (last acknowledged " + std::to_string(acked) + ")");
      return;
    }
    if (ack == acked) return;
    acked = ack;
    unacked_since = std::chrono::steady_clock::now();  // it answers: the clock restarts
    release_held();
  }

  // Moves every held reply the standby's acknowledgements cover to its
  // connection's queue.
  void release_held() {
    size_t kept = 0;
    for (Connection* c : holding) {
      while (!c->held.empty() && c->held.front().first <= acked) {
        c->out.append(c->held.front().second);
        c->held.pop_front();
      }
      if (!c->out.empty() && !c->flush_queued) {
        c->flush_queued = true;
        dirty.push_back(c);
      }
      if (!c->held.empty()) holding[kept++] = c;
    }
    holding.resize(kept);
    uv_async_send(&flush_async);
  }

  std::vector<ClientId> woken;
  std::string reply_buffer;  // reused for every request: no allocation per reply

  void wake(const std::vector<ClientId>& ids) {
    static const char kStop = static_cast<char>(WaitResponse::kStopWaiting);
    for (ClientId id : ids) {
      auto it = clients.find(id);
      if (it != clients.end()) queue_reply(it->second, std::string_view(&kStop, 1));
    }
  }

  void on_connection(int status) {
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

  static std::string peer_name(uv_tcp_t* tcp) {
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

  void shutdown() {
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
};

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
