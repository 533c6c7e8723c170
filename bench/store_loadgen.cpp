// store_loadgen: a closed-loop load generator that speaks the c10d TCPStore
// wire protocol itself, so one and the same client drives `elasticctl store`
// and PyTorch's TCPStore server (bench/store_bench.py runs both).
//
//   store_loadgen HOST PORT [--clients N] [--seconds S] [--warmup S]
//                 [--mix set,get,add] [--value-size B] [--timeout S]
//     Opens N connections, each does VALIDATE + PING (as PyTorch >= 2.5
//     clients do), then runs a closed loop with one request outstanding per
//     connection, cycling through the mix on its own keys. Prints
//     "measuring" when the measured window (after the warm-up) starts, then
//     one JSON line: {"ops_per_s", "p50_us", "p99_us", "errors", ...}.
//
//   store_loadgen HOST PORT --idle N [--timeout S]
//     Opens and handshakes N connections, prints a line starting with
//     "ready" (with "setup_s": how long that took), then holds them until stdin reaches EOF or
//     SIGTERM/SIGINT arrives, so a harness can read the server's RSS meanwhile.
//
// --secret-file F (either mode): every connection first proves it holds the
// job secret in F (store/auth.hpp: AUTH_HELLO, then AUTH_PROOF with VALIDATE
// and PING), for a store started with that secret.
//
// Keys: SET and GET use "/bench/<conn>/<i % 64>", ADD uses
// "/bench/<conn>/<i % 64>/count" (i counts cycles of the mix): ADD on a key
// holding a non-numeric value closes the connection on both servers, so the
// counters live apart. Every reply is checked (PING echoes the nonce, GET
// returns the value just set, ADD returns the exact count); a mismatch or a
// closed connection counts as an error and retires that connection.
//
// SET has no reply in this protocol and PyTorch's client returns from set()
// once the bytes are written. The loadgen does the same: a SET goes out in
// one write with the request after it, and the latency recorded is that of
// the next request with a reply (so "GET" latency includes the server's
// handling of the SET before it). Throughput counts every request.
//
// This program does not use util::Socket on purpose: that type is blocking
// with deadlines, and one thread driving 10,000 connections needs
// non-blocking sockets and epoll.
//
// Exit status: 0 when it ran (errors are reported in the output), 1 when no
// connection could be set up, 2 on bad arguments.
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "fd_limit.hpp"
#include "store/auth.hpp"
#include "store/frame.hpp"
#include "store/protocol.hpp"
#include "util/hmac.hpp"
#include "util/secret.hpp"

namespace {

using elasticrun::store::kValidationMagic;
using elasticrun::store::QueryType;
using elasticrun::store::RequestWriter;
using Clock = std::chrono::steady_clock;

constexpr int kKeysPerConn = 64;

enum class Op : uint8_t { kSet, kGet, kAdd, kPing };

struct Options {
  std::string host;
  std::string port;
  int clients = 1;
  double seconds = 5;
  double warmup = 1;
  std::vector<Op> mix{Op::kSet, Op::kGet, Op::kAdd};
  std::string mix_text = "set,get,add";
  size_t value_size = 64;
  int idle = 0;         // > 0: idle mode with this many connections
  double timeout = 60;  // for connecting and handshaking every connection
  // Connections being set up at once; keeps the server's accept backlog
  // from overflowing when thousands are opened.
  int max_connecting = 256;
  std::string secret;  // --secret-file's bytes; empty: none
};

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr,
               "store_loadgen: %s\n"
               "usage: store_loadgen HOST PORT [--clients N] [--seconds S] [--warmup S]\n"
               "                     [--mix set,get,add,ping] [--value-size B] [--timeout S]\n"
               "       store_loadgen HOST PORT --idle N [--timeout S]\n"
               "       (either with --secret-file F: a store with that job secret)\n",
               why.c_str());
  std::exit(2);
}

double parse_number(const char* flag, const char* text, double min) {
  char* end = nullptr;
  double v = std::strtod(text, &end);
  if (end == text || *end != '\0' || !(v >= min)) {
    usage(std::string(flag) + " wants a number >= " + std::to_string(min) + ", not '" + text + "'");
  }
  return v;
}

std::vector<Op> parse_mix(const std::string& text) {
  std::vector<Op> mix;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    std::string word = text.substr(start, comma == std::string::npos ? comma : comma - start);
    if (word == "set") {
      mix.push_back(Op::kSet);
    } else if (word == "get") {
      mix.push_back(Op::kGet);
    } else if (word == "add") {
      mix.push_back(Op::kAdd);
    } else if (word == "ping") {
      mix.push_back(Op::kPing);
    } else {
      usage("unknown operation '" + word + "' in --mix (set, get, add, ping)");
    }
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  // SET has no reply: a closed loop needs something to wait for.
  if (std::all_of(mix.begin(), mix.end(), [](Op op) { return op == Op::kSet; })) {
    usage("--mix needs an operation with a reply (get, add or ping); SET has none");
  }
  return mix;
}

Options parse_args(int argc, char** argv) {
  Options o;
  std::vector<std::string> positional;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) usage(arg + " needs a value");
      return argv[++i];
    };
    if (arg == "--clients") {
      o.clients = static_cast<int>(parse_number("--clients", value(), 1));
    } else if (arg == "--seconds") {
      o.seconds = parse_number("--seconds", value(), 0.001);
    } else if (arg == "--warmup") {
      o.warmup = parse_number("--warmup", value(), 0);
    } else if (arg == "--mix") {
      o.mix_text = value();
      o.mix = parse_mix(o.mix_text);
    } else if (arg == "--value-size") {
      o.value_size = static_cast<size_t>(parse_number("--value-size", value(), 0));
    } else if (arg == "--idle") {
      o.idle = static_cast<int>(parse_number("--idle", value(), 1));
    } else if (arg == "--timeout") {
      o.timeout = parse_number("--timeout", value(), 0.001);
    } else if (arg == "--max-connecting") {
      o.max_connecting = static_cast<int>(parse_number("--max-connecting", value(), 1));
    } else if (arg == "--secret-file") {
      try {
        o.secret = elasticrun::util::read_secret_file("--secret-file", value());
      } catch (const std::exception& e) {
        usage(e.what());
      }
    } else if (arg == "-h" || arg == "--help") {
      usage("help");
    } else if (!arg.empty() && arg[0] == '-') {
      usage("unknown option " + arg);
    } else {
      positional.push_back(arg);
    }
  }
  if (positional.size() != 2) usage("want HOST and PORT");
  o.host = positional[0];
  o.port = positional[1];
  return o;
}

// What a connection's outstanding request will be answered with.
enum class Expect : uint8_t {
  kNothing,
  kServerNonce,  // the answer of AUTH_HELLO
  kServerProof,  // the answer of AUTH_PROOF; the PING's echo follows
  kPong,
  kGetReply,
  kAddReply
};

enum class ConnState : uint8_t { kUnopened, kConnecting, kHandshaking, kReady, kClosed };

struct Conn {
  int fd = -1;
  uint32_t id = 0;
  ConnState state = ConnState::kUnopened;
  bool want_write = false;  // EPOLLOUT registered: the kernel took part of `out`
  Expect expect = Expect::kNothing;
  uint32_t nonce = 0;                      // kPong
  std::string client_nonce, server_nonce;  // the handshake's, with a secret
  // kAddReply: how many ADDs this run has made on the key, this one included,
  // and which key. The server's count is that plus whatever the key held
  // before the run (a reused server); add_base keeps that offset per key.
  int64_t add_count = 0;
  int add_key = 0;
  std::vector<int64_t> add_base;
  bool any_get_len = false;  // kGetReply: 0 or value_size both fine
  uint32_t batch = 0;        // requests answered by the awaited reply
  uint64_t next = 0;         // index of this connection's next request
  Clock::time_point sent;
  std::string out;
  size_t out_pos = 0;
  std::string in;
};

class Loadgen {
 public:
  explicit Loadgen(Options o) : opt_(std::move(o)) {
    value_.assign(opt_.value_size, 'v');
    // GET must see the value when the cycle sets the key before reading it;
    // otherwise the first pass over the keys finds them absent.
    auto set = std::find(opt_.mix.begin(), opt_.mix.end(), Op::kSet);
    auto get = std::find(opt_.mix.begin(), opt_.mix.end(), Op::kGet);
    get_sees_set_ = set < get;
    get_may_miss_ = !get_sees_set_ && set != opt_.mix.end();
  }

  ~Loadgen() {
    for (Conn& c : conns_) {
      if (c.fd >= 0) ::close(c.fd);
    }
    if (ep_ >= 0) ::close(ep_);
  }

  int run() {
    if (!resolve()) return 1;
    ep_ = epoll_create1(EPOLL_CLOEXEC);
    if (ep_ < 0) return fatal("epoll_create1");
    int n = opt_.idle > 0 ? opt_.idle : opt_.clients;
    conns_.resize(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) conns_[static_cast<size_t>(i)].id = static_cast<uint32_t>(i);
    const auto setup_start = Clock::now();
    setup();
    setup_s_ = std::chrono::duration<double>(Clock::now() - setup_start).count();
    if (ready_ == 0) {
      std::fprintf(stderr, "store_loadgen: no connection to %s:%s could be set up (%s)\n",
                   opt_.host.c_str(), opt_.port.c_str(), first_error_.c_str());
      return 1;
    }
    return opt_.idle > 0 ? hold() : load();
  }

 private:
  int fatal(const char* what) {
    std::fprintf(stderr, "store_loadgen: %s: %s\n", what, std::strerror(errno));
    return 1;
  }

  bool resolve() {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    int rc = getaddrinfo(opt_.host.c_str(), opt_.port.c_str(), &hints, &res);
    if (rc != 0) {
      std::fprintf(stderr, "store_loadgen: cannot resolve %s:%s: %s\n", opt_.host.c_str(),
                   opt_.port.c_str(), gai_strerror(rc));
      return false;
    }
    std::memcpy(&addr_, res->ai_addr, res->ai_addrlen);
    addr_len_ = res->ai_addrlen;
    family_ = res->ai_family;
    freeaddrinfo(res);
    return true;
  }

  // Connection setup: opens up to max_connecting at a time until every
  // connection is ready or has failed, or the timeout passes.
  void setup() {
    const auto deadline = Clock::now() + seconds(opt_.timeout);
    size_t next_open = 0;
    while (ready_ + failed_ < conns_.size()) {
      while (setting_up_ < static_cast<size_t>(opt_.max_connecting) && next_open < conns_.size()) {
        open(conns_[next_open++]);
      }
      auto now = Clock::now();
      if (now >= deadline) break;
      poll_once(std::min<int64_t>(100, ms_until(deadline, now)));
    }
    for (Conn& c : conns_) {
      if (c.state == ConnState::kConnecting || c.state == ConnState::kHandshaking) {
        fail(c, "timed out connecting and handshaking");
      } else if (c.state == ConnState::kUnopened) {
        ++failed_;
        ++errors_;
      }
    }
  }

  void open(Conn& c) {
    c.fd = ::socket(family_, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c.fd < 0) {
      c.state = ConnState::kConnecting;  // so fail() accounts for it
      ++setting_up_;
      fail(c, std::string("socket: ") + std::strerror(errno));
      return;
    }
    int one = 1;
    // Same as PyTorch's client: requests are small and latency-bound.
    setsockopt(c.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    c.state = ConnState::kConnecting;
    ++setting_up_;
    int rc = ::connect(c.fd, reinterpret_cast<const sockaddr*>(&addr_), addr_len_);
    if (rc < 0 && errno != EINPROGRESS) {
      fail(c, std::string("connect: ") + std::strerror(errno));
      return;
    }
    epoll_event ev{};
    ev.events = EPOLLOUT;
    ev.data.ptr = &c;
    epoll_ctl(ep_, EPOLL_CTL_ADD, c.fd, &ev);
    c.want_write = true;
    if (rc == 0) connected(c);
  }

  void connected(Conn& c) {
    int err = 0;
    socklen_t len = sizeof(err);
    getsockopt(c.fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) {
      fail(c, std::string("connect: ") + std::strerror(err));
      return;
    }
    c.state = ConnState::kHandshaking;
    if (!opt_.secret.empty()) {
      c.client_nonce = elasticrun::util::random_bytes(elasticrun::store::kAuthNonceSize);
      RequestWriter(c.out).type(QueryType::kAuthHello).bytes(c.client_nonce);
      c.expect = Expect::kServerNonce;
      flush(c);
      return;
    }
    validate(c);
  }

  void validate(Conn& c) {
    // What TCPStore's client sends on every connect since PyTorch 2.5.
    c.nonce = 0x5eed0000u ^ c.id;
    RequestWriter(c.out).type(QueryType::kValidate).u32(kValidationMagic);
    RequestWriter(c.out).type(QueryType::kPing).u32(c.nonce);
    c.expect = Expect::kPong;
    c.batch = 0;
    flush(c);
  }

  void fail(Conn& c, const std::string& why) {
    if (c.state == ConnState::kClosed) return;
    if (first_error_.empty()) first_error_ = why;
    ++errors_;
    if (c.state == ConnState::kConnecting || c.state == ConnState::kHandshaking) {
      --setting_up_;
      ++failed_;
    } else if (c.state == ConnState::kReady) {
      --live_;
    }
    c.state = ConnState::kClosed;
    if (c.fd >= 0) ::close(c.fd);  // also removes it from the epoll set
    c.fd = -1;
    c.in.clear();
    c.out.clear();
  }

  void set_write_interest(Conn& c, bool on) {
    if (c.want_write == on) return;
    c.want_write = on;
    epoll_event ev{};
    ev.events = EPOLLIN | (on ? EPOLLOUT : 0u);
    ev.data.ptr = &c;
    epoll_ctl(ep_, EPOLL_CTL_MOD, c.fd, &ev);
  }

  void flush(Conn& c) {
    while (c.out_pos < c.out.size()) {
      ssize_t n = ::send(c.fd, c.out.data() + c.out_pos, c.out.size() - c.out_pos, MSG_NOSIGNAL);
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN) break;
        fail(c, std::string("send: ") + std::strerror(errno));
        return;
      }
      c.out_pos += static_cast<size_t>(n);
    }
    bool done = c.out_pos == c.out.size();
    if (done) {
      c.out.clear();
      c.out_pos = 0;
    }
    set_write_interest(c, !done);
  }

  void poll_once(int64_t timeout_ms) {
    epoll_event events[512];
    int n = epoll_wait(ep_, events, 512, static_cast<int>(std::max<int64_t>(0, timeout_ms)));
    for (int i = 0; i < n; ++i) {
      Conn& c = *static_cast<Conn*>(events[i].data.ptr);
      if (c.state == ConnState::kClosed) continue;
      if (c.state == ConnState::kConnecting) {
        connected(c);
        continue;
      }
      if (events[i].events & EPOLLOUT) flush(c);
      if (c.state != ConnState::kClosed && (events[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP))) {
        readable(c);
      }
    }
  }

  void readable(Conn& c) {
    static char buf[64 * 1024];
    ssize_t n = ::recv(c.fd, buf, sizeof(buf), 0);
    if (n == 0) {
      fail(c, "server closed the connection");
      return;
    }
    if (n < 0) {
      if (errno != EAGAIN && errno != EINTR) fail(c, std::string("recv: ") + std::strerror(errno));
      return;
    }
    c.in.append(buf, static_cast<size_t>(n));
    size_t used = 0;
    while (c.state != ConnState::kClosed && used < c.in.size()) {
      size_t got = reply(c, std::string_view(c.in).substr(used));
      if (got == 0) break;
      used += got;
    }
    if (c.state != ConnState::kClosed) c.in.erase(0, used);
  }

  // Consumes one complete reply from the front of data; 0 if incomplete.
  size_t reply(Conn& c, std::string_view data) {
    auto u64_at = [&](size_t at) {
      uint64_t v;
      std::memcpy(&v, data.data() + at, sizeof(v));
      return v;
    };
    size_t size = 0;
    switch (c.expect) {
      case Expect::kNothing:
        fail(c, "reply with no request outstanding");
        return 0;
      case Expect::kServerNonce:
      case Expect::kServerProof: {
        if (data.size() < 8) return 0;
        const uint64_t len = u64_at(0);
        if (len > 64) return fail(c, "a handshake field of " + std::to_string(len) + " bytes"), 0;
        if (data.size() - 8 < len) return 0;
        const std::string field(data.substr(8, len));
        namespace auth = elasticrun::store;
        if (c.expect == Expect::kServerNonce) {
          if (len != auth::kAuthNonceSize) return fail(c, "the store asks for no secret"), 0;
          c.server_nonce = field;
          RequestWriter(c.out)
              .type(QueryType::kAuthProof)
              .bytes(auth::client_proof(opt_.secret, c.client_nonce, c.server_nonce));
          validate(c);  // sends with the proof; expects the PING's echo
          c.expect = Expect::kServerProof;
        } else {
          if (!elasticrun::util::equal_in_constant_time(
                  field, auth::server_proof(opt_.secret, c.client_nonce, c.server_nonce))) {
            return fail(c, "the store refused the secret, or proved another"), 0;
          }
          c.expect = Expect::kPong;
        }
        return 8 + len;
      }
      case Expect::kPong: {
        if (data.size() < 4) return 0;
        uint32_t v;
        std::memcpy(&v, data.data(), sizeof(v));
        if (v != c.nonce) return fail(c, "PING reply does not echo the nonce"), 0;
        size = 4;
        break;
      }
      case Expect::kAddReply: {
        if (data.size() < 8) return 0;
        const auto got = static_cast<int64_t>(u64_at(0));
        int64_t& base = c.add_base[static_cast<size_t>(c.add_key)];
        if (c.add_count == 1) base = got - 1;
        if (got != base + c.add_count) {
          return fail(c, "ADD returned " + std::to_string(got) + ", expected " +
                             std::to_string(base + c.add_count)),
                 0;
        }
        size = 8;
        break;
      }
      case Expect::kGetReply: {
        if (data.size() < 8) return 0;
        uint64_t len = u64_at(0);
        bool ok = len == opt_.value_size || (c.any_get_len && len == 0);
        if (!ok) return fail(c, "GET returned " + std::to_string(len) + " bytes"), 0;
        if (data.size() - 8 < len) return 0;
        size = 8 + len;
        break;
      }
    }
    answered(c);
    return size;
  }

  void answered(Conn& c) {
    c.expect = Expect::kNothing;
    if (c.state == ConnState::kHandshaking) {
      c.state = ConnState::kReady;
      --setting_up_;
      ++ready_;
      ++live_;
      return;
    }
    if (!running_) return;
    auto now = Clock::now();
    if (c.sent >= window_start_ && now <= window_end_) {
      ops_ += c.batch;
      latencies_ns_.push_back(static_cast<uint64_t>((now - c.sent).count()));
    }
    if (now < window_end_) issue(c);
  }

  // Writes the connection's next requests: any SETs, then one with a reply.
  void issue(Conn& c) {
    const size_t m = opt_.mix.size();
    c.batch = 0;
    char key[64];
    while (c.expect == Expect::kNothing) {
      const uint64_t n = c.next++;
      const size_t pos = n % m;
      const uint64_t cycle = n / m;
      const int k = static_cast<int>(cycle % kKeysPerConn);
      RequestWriter w(c.out);
      ++c.batch;
      switch (opt_.mix[pos]) {
        case Op::kSet: {
          int len = std::snprintf(key, sizeof(key), "/bench/%u/%d", c.id, k);
          w.type(QueryType::kSet)
              .bytes(std::string_view(key, static_cast<size_t>(len)))
              .bytes(value_);
          break;
        }
        case Op::kGet: {
          int len = std::snprintf(key, sizeof(key), "/bench/%u/%d", c.id, k);
          w.type(QueryType::kGet).bytes(std::string_view(key, static_cast<size_t>(len)));
          c.expect = Expect::kGetReply;
          // Until the cycle has set every key once, a GET before the SET
          // of its cycle finds nothing.
          c.any_get_len = get_may_miss_ && cycle < static_cast<uint64_t>(kKeysPerConn);
          if (!get_sees_set_ && !get_may_miss_) c.any_get_len = true;  // no SET in the mix
          break;
        }
        case Op::kAdd: {
          int len = std::snprintf(key, sizeof(key), "/bench/%u/%d/count", c.id, k);
          w.type(QueryType::kAdd).bytes(std::string_view(key, static_cast<size_t>(len))).i64(1);
          c.expect = Expect::kAddReply;
          // Earlier ADDs on this key: one per earlier visit of each ADD in
          // the mix, plus the ADDs before this one in the current cycle.
          int64_t adds_in_mix = std::count(opt_.mix.begin(), opt_.mix.end(), Op::kAdd);
          int64_t adds_before =
              std::count(opt_.mix.begin(), opt_.mix.begin() + static_cast<long>(pos), Op::kAdd);
          c.add_count = static_cast<int64_t>(cycle / kKeysPerConn) * adds_in_mix + adds_before + 1;
          c.add_key = k;
          if (c.add_base.empty()) c.add_base.assign(kKeysPerConn, 0);
          break;
        }
        case Op::kPing:
          c.nonce = static_cast<uint32_t>(n);
          w.type(QueryType::kPing).u32(c.nonce);
          c.expect = Expect::kPong;
          break;
      }
    }
    c.sent = Clock::now();
    flush(c);
  }

  int load() {
    running_ = true;
    const auto start = Clock::now();
    window_start_ = start + seconds(opt_.warmup);
    window_end_ = window_start_ + seconds(opt_.seconds);
    latencies_ns_.reserve(1 << 20);
    for (Conn& c : conns_) {
      if (c.state == ConnState::kReady) issue(c);
    }
    auto now = Clock::now();
    bool announced = false;
    while (now < window_end_ && live_ > 0) {
      if (!announced && now >= window_start_) {
        // Lets a harness sample the server's CPU time at the start of the
        // window; it samples again when the result line arrives.
        std::printf("measuring\n");
        std::fflush(stdout);
        announced = true;
      }
      Clock::time_point until = announced ? window_end_ : window_start_;
      poll_once(std::min<int64_t>(100, ms_until(until, now) + 1));
      now = Clock::now();
    }
    // A run cut short (every connection lost) is measured up to that point.
    double measured =
        std::chrono::duration<double>(std::min(now, window_end_) - window_start_).count();
    if (measured <= 0) measured = opt_.seconds;
    std::sort(latencies_ns_.begin(), latencies_ns_.end());
    std::printf(
        "{\"clients\": %d, \"connected\": %zu, \"mix\": \"%s\", \"value_size\": %zu, "
        "\"seconds\": %.3f, \"ops\": %llu, \"ops_per_s\": %.1f, \"replies\": %zu, "
        "\"p50_us\": %.1f, \"p90_us\": %.1f, \"p99_us\": %.1f, \"p999_us\": %.1f, "
        "\"max_us\": %.1f, \"errors\": %llu, \"first_error\": \"%s\"}\n",
        opt_.clients, ready_, opt_.mix_text.c_str(), opt_.value_size, measured,
        static_cast<unsigned long long>(ops_), static_cast<double>(ops_) / measured,
        latencies_ns_.size(), percentile_us(0.50), percentile_us(0.90), percentile_us(0.99),
        percentile_us(0.999), latencies_ns_.empty() ? 0.0 : latencies_ns_.back() / 1000.0,
        static_cast<unsigned long long>(errors_), json_safe(first_error_).c_str());
    return 0;
  }

  // Nearest-rank percentile of the sorted latencies, in microseconds.
  double percentile_us(double p) const {
    if (latencies_ns_.empty()) return 0;
    size_t rank = static_cast<size_t>(p * static_cast<double>(latencies_ns_.size()) + 0.999999);
    rank = std::clamp<size_t>(rank, 1, latencies_ns_.size());
    return static_cast<double>(latencies_ns_[rank - 1]) / 1000.0;
  }

  int hold() {
    std::printf(
        "ready {\"connections\": %zu, \"setup_s\": %.4f, \"errors\": %llu, "
        "\"first_error\": \"%s\"}\n",
        ready_, setup_s_, static_cast<unsigned long long>(errors_),
        json_safe(first_error_).c_str());
    std::fflush(stdout);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigprocmask(SIG_BLOCK, &set, nullptr);
    int sfd = signalfd(-1, &set, SFD_CLOEXEC);
    pollfd fds[2] = {{STDIN_FILENO, POLLIN, 0}, {sfd, POLLIN, 0}};
    for (;;) {
      if (::poll(fds, 2, -1) < 0) {
        if (errno == EINTR) continue;
        break;
      }
      if (fds[1].revents) break;
      if (fds[0].revents & (POLLHUP | POLLERR | POLLNVAL)) break;
      if (fds[0].revents & POLLIN) {
        char buf[256];
        ssize_t n = ::read(STDIN_FILENO, buf, sizeof(buf));
        if (n <= 0) break;  // EOF: the harness is done measuring
      }
    }
    if (sfd >= 0) ::close(sfd);
    return 0;
  }

  static std::string json_safe(const std::string& s) {
    std::string out;
    for (char ch : s) {
      if (ch == '"' || ch == '\\') out += '\\';
      out += (static_cast<unsigned char>(ch) < 0x20) ? ' ' : ch;
    }
    return out;
  }

  static Clock::duration seconds(double s) {
    return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
  }

  static int64_t ms_until(Clock::time_point t, Clock::time_point now) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(t - now).count();
  }

  Options opt_;
  std::string value_;
  bool get_sees_set_ = false;
  bool get_may_miss_ = false;
  sockaddr_storage addr_{};
  socklen_t addr_len_ = 0;
  int family_ = AF_INET;
  int ep_ = -1;
  // Never resized after setup starts: epoll events point into it.
  std::vector<Conn> conns_;
  size_t setting_up_ = 0, ready_ = 0, failed_ = 0, live_ = 0;
  uint64_t errors_ = 0;
  double setup_s_ = 0;  // connecting and handshaking every connection
  std::string first_error_;
  bool running_ = false;
  Clock::time_point window_start_, window_end_;
  uint64_t ops_ = 0;
  std::vector<uint64_t> latencies_ns_;
};

}  // namespace

int main(int argc, char** argv) {
  Options opt = parse_args(argc, argv);
  std::signal(SIGPIPE, SIG_IGN);
  elasticrun::bench::raise_fd_limit(
      "store_loadgen", static_cast<size_t>(opt.idle > 0 ? opt.idle : opt.clients) + 16);
  Loadgen gen(std::move(opt));
  return gen.run();
}
