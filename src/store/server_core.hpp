// The loop-thread half of store::Server (server.hpp), private to the three
// files that make the server: server_core.cpp (connections, reads, the auth
// gate, request handling, replies, backpressure), server_standby.cpp (the
// standby's half: the numbered change stream and the replies held until the
// standby acknowledged them, store/replica.hpp) and server.cpp (Server and
// the handles it sets up on the loop).
#pragma once

#include <uv.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "store/auth.hpp"
#include "store/handler.hpp"
#include "store/server.hpp"
#include "store/state.hpp"
#include "util/logging.hpp"

namespace elasticrun::store {

struct ServerCore;
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

// The loop-thread half of the server. Everything here runs on the loop thread.
struct ServerCore {
  static constexpr size_t kReadChunk = 64 * 1024;

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
  const uint64_t store_id;

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

  std::vector<ClientId> woken;
  std::string reply_buffer;  // reused for every request: no allocation per reply

  // Picks this store's random store_id. The loop and its handles are set up
  // by Server's constructor (server.cpp).
  explicit ServerCore(ServerOptions o);

  // --- connections, reads, requests and replies (server_core.cpp) ---

  // Closes a client that broke the protocol or a limit, with a warning
  // naming it and why, counted as dropped. Nothing for one already closing.
  void drop(Connection* c, const std::string& reason);
  // A client the gate turned away: its answer (after what was queued
  // before it) goes out now if the socket takes it, then the connection
  // closes, logged.
  void refuse(Connection* c, std::string_view answer, const std::string& why, bool count = true);
  // Closes c once: its partial request, held replies and place in every
  // list go at once (a standby is detached first); libuv frees it later.
  void close(Connection* c);
  // `reads_data`: false for a reply that tells nothing of the data (PING's).
  void queue_reply(Connection* c, std::string_view bytes, bool reads_data = true);
  // Hands queued replies to the kernel: try_write first (no allocation on the
  // fast path), the rest through a uv_write that owns a copy.
  void flush(Connection* c);
  // A uv_write of c's completed: flushes what was queued meanwhile, or
  // reads again once a client stopped for backpressure has drained.
  void after_write(Connection* c);
  // Flushes every connection in `dirty`, those a flush adds too, and
  // empties it.
  void flush_dirty();
  void start_reading(Connection* c);
  void on_read(Connection* c, ssize_t n, const uv_buf_t* buf);
  // Counts `more` bytes of partial requests against max_buffered_bytes;
  // false, with c dropped, past it.
  bool account(Connection* c, size_t more);
  void keep_partial(Connection* c, std::string_view rest);
  // Parses and handles every complete request in data; returns bytes used.
  size_t process(Connection* c, std::string_view data);
  // Queues STOP_WAITING to each of these clients still connected.
  void wake(const std::vector<ClientId>& ids);
  void on_connection(int status);
  // "host:port" ("[host]:port" for IPv6), "?" when the socket has no peer.
  static std::string peer_name(uv_tcp_t* tcp);
  // Closes the listener, every connection and every handle, so that the
  // loop ends; safe to call again.
  void shutdown();

  // --- the standby (store/replica.hpp; server_standby.cpp) ---

  // On the loop, after Server::promote(): applies the handed-over data and
  // serves from then on. Nothing when there is none or it serves already.
  void take_promotion();
  // REPLICATE from c: c becomes the standby (a second one is dropped) and
  // gets a snapshot of the data, numbered, then SYNCED.
  void attach_standby(Connection* c, const std::string& endpoint);
  // ack_timer's: drops a standby that acknowledged nothing for
  // options.standby_ack_timeout while changes waited.
  void check_acks();
  // Serves on without a standby: every held reply is released.
  void detach_standby(const std::string& why);
  // The journal of the request just handled, numbered, to the standby;
  // true when it held changes.
  bool replicate_journal();
  // Queues records to the standby; with `limit`, drops a standby whose
  // backlog passes max_pending_reply_bytes.
  void send_to_standby(std::string_view records, bool limit = true);
  // Bytes the standby sent: its acknowledgements. One out of order (behind
  // the last, or past the last change numbered) drops it.
  void read_acks(Connection* c, std::string_view data);
  // Moves every held reply the standby's acknowledgements cover to its
  // connection's queue.
  void release_held();
};

}  // namespace elasticrun::store
