// rendezvous_loadgen: many lightweight agents in one process, each running
// the real rendezvous::Rendezvous::join() against one store, to time the
// first round of a fixed-size job (bench/rendezvous_bench.py drives it).
//
//   rendezvous_loadgen --agents N [--repeats R] [--store HOST:PORT | --etcd H:P[,H:P...]]
//                      [--heartbeat-interval-ms MS] [--missed-heartbeats N]
//                      [--join-timeout-s S] [--stack-kib K] [--log-level LEVEL]
//
// Each run: a fresh store::Server on 127.0.0.1 port 0 on a thread of this
// process (or the given store, or an etcd cluster's members, then with a
// fresh run id), N Rendezvous
// objects connected to it (one blocking TCP connection each, set up before
// the clock starts, as an agent's is before its first join), and N threads
// parked on a start gate. The clock starts when the gate opens; the run's
// figure is the time until the last join() returned. min = max = N, so the
// round closes when the N-th agent arrives and no last-call window is in
// the figure. Prints one JSON line per run:
//   {"agents", "run", "wall_ms", "join_p50_ms", "join_p99_ms", "join_max_ms",
//    "connect_ms", "cpu_s", "requests", "requests_per_agent", "errors", "first_error"}
// "cpu_s" is the process's user + system CPU time over the timed window
// (agents and the in-process server together), "server_cpu_s" the server
// thread's alone (0 with --store).
// "requests" counts every request the in-process server took during the
// timed window (null with --store).
//
// Agents' heartbeat threads are not started: they are not part of what a
// join costs. (A join beats once, with its record; a closer judges that
// beat stale after --missed-heartbeats intervals, so a run that may take
// longer wants more of them.) The closer's heartbeat is the exception, kept alive by one
// library Heartbeat once the closer is known, because followers that wait
// longer than missed_heartbeats intervals take over a closer whose counter
// stands still; without it a slow run would measure that takeover instead.
//
// One thread per agent is the simplest faithful client: Rendezvous blocks on
// its connection by design. Threads get small stacks (--stack-kib) so that
// 4,096 of them are cheap; the descriptor limit is raised for the 2N sockets
// (both ends live in this process when the server does).
//
// Exit status: 0 when every run ran (failed joins are reported as errors in
// the output), 1 on a setup failure, 2 on bad arguments.
#include <pthread.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <latch>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "elasticrun/errors.hpp"
#include "fd_limit.hpp"
#include "rendezvous/heartbeat.hpp"
#include "rendezvous/rendezvous.hpp"
#include "store/server.hpp"
#include "util/logging.hpp"
#include "util/quiet_thread.hpp"

namespace {

namespace rdzv = elasticrun::rendezvous;
using Clock = std::chrono::steady_clock;

struct Options {
  int agents = 16;
  int repeats = 1;
  std::string store_host;  // empty: in-process server
  int store_port = 0;
  std::optional<elasticrun::etcd::EtcdOptions> etcd;  // the rendezvous on etcd
  int heartbeat_interval_ms = 1000;  // RendezvousConfig's default, as the agent uses
  int missed_heartbeats = 5;         // likewise
  int join_timeout_s = 600;
  size_t stack_kib = 256;
  std::string log_level = "warn";
};

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr,
               "rendezvous_loadgen: %s\n"
               "usage: rendezvous_loadgen --agents N [--repeats R] [--store HOST:PORT | --etcd "
               "H:P[,H:P...]]\n"
               "                          [--heartbeat-interval-ms MS] [--missed-heartbeats N]\n"
               "                          [--join-timeout-s S] [--stack-kib K] [--log-level LEVEL]\n",
               why.c_str());
  std::exit(2);
}

long parse_int(const std::string& flag, const char* text, long min) {
  char* end = nullptr;
  long v = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || v < min) {
    usage(flag + " wants an integer >= " + std::to_string(min) + ", not '" + text + "'");
  }
  return v;
}

Options parse_args(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) usage(arg + " needs a value");
      return argv[++i];
    };
    if (arg == "--agents") {
      o.agents = static_cast<int>(parse_int(arg, value(), 1));
    } else if (arg == "--repeats") {
      o.repeats = static_cast<int>(parse_int(arg, value(), 1));
    } else if (arg == "--store") {
      std::string hp = value();
      auto colon = hp.rfind(':');
      if (colon == std::string::npos || colon == 0) usage("--store wants HOST:PORT");
      o.store_host = hp.substr(0, colon);
      o.store_port = static_cast<int>(parse_int(arg, hp.c_str() + colon + 1, 1));
    } else if (arg == "--etcd") {
      elasticrun::etcd::EtcdOptions e;
      std::string list = value();
      for (size_t begin = 0; begin <= list.size();) {
        size_t end = list.find(',', begin);
        if (end == std::string::npos) end = list.size();
        const std::string hp = list.substr(begin, end - begin);
        const auto colon = hp.rfind(':');
        if (colon == std::string::npos || colon == 0) usage("--etcd wants HOST:PORT,...");
        e.endpoints.emplace_back(hp.substr(0, colon),
                                 static_cast<uint16_t>(parse_int(arg, hp.c_str() + colon + 1, 1)));
        begin = end + 1;
      }
      o.etcd = std::move(e);
    } else if (arg == "--heartbeat-interval-ms") {
      o.heartbeat_interval_ms = static_cast<int>(parse_int(arg, value(), 1));
    } else if (arg == "--missed-heartbeats") {
      o.missed_heartbeats = static_cast<int>(parse_int(arg, value(), 1));
    } else if (arg == "--join-timeout-s") {
      o.join_timeout_s = static_cast<int>(parse_int(arg, value(), 1));
    } else if (arg == "--stack-kib") {
      o.stack_kib = static_cast<size_t>(parse_int(arg, value(), 64));
    } else if (arg == "--log-level") {
      o.log_level = value();
    } else {
      usage("unknown argument " + arg);
    }
  }
  return o;
}

// A joinable thread with a stack of our choosing (std::thread cannot set one).
class SmallThread {
 public:
  SmallThread(size_t stack_bytes, std::function<void()> f) : f_(std::move(f)) {
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, stack_bytes);
    int rc = pthread_create(&tid_, &attr, &SmallThread::trampoline, this);
    pthread_attr_destroy(&attr);
    if (rc != 0) {
      // Threads already parked on the gate cannot be released without
      // starting a round that can never fill: give up on the whole process.
      std::fprintf(stderr, "rendezvous_loadgen: pthread_create: %s\n", std::strerror(rc));
      std::_Exit(1);
    }
    started_ = true;
  }
  ~SmallThread() { join(); }
  SmallThread(const SmallThread&) = delete;
  SmallThread& operator=(const SmallThread&) = delete;
  void join() {
    if (started_) pthread_join(tid_, nullptr);
    started_ = false;
  }

 private:
  static void* trampoline(void* self) {
    static_cast<SmallThread*>(self)->f_();
    return nullptr;
  }
  std::function<void()> f_;
  pthread_t tid_{};
  bool started_ = false;
};

// User + system CPU time of the whole process (agents and server alike).
double cpu_seconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  auto sec = [](const timeval& tv) { return static_cast<double>(tv.tv_sec) + tv.tv_usec / 1e6; };
  return sec(ru.ru_utime) + sec(ru.ru_stime);
}

double ms(Clock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t i = static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += ' ';
    } else {
      out += c;
    }
  }
  return out + "\"";
}

struct AgentResult {
  Clock::time_point begin, end;
  bool ok = false;
  int group_rank = -1;
  int world_size = 0;
  std::string error;
};

// The in-process store, on a thread that blocks every signal.
class LocalStore {
 public:
  LocalStore() {
    elasticrun::store::ServerOptions o;
    o.host = "127.0.0.1";
    o.port = 0;
    server_ = std::make_unique<elasticrun::store::Server>(o);
    server_->bind();
    thread_ = elasticrun::util::start_quiet_thread([this] {
      tid_.store(static_cast<int>(gettid()));
      server_->run();
    });
  }
  ~LocalStore() {
    server_->stop();
    if (thread_.joinable()) thread_.join();
  }
  int port() const { return server_->port(); }
  uint64_t requests() const { return server_->stats().requests; }
  // User + system CPU time of the server's thread so far: the part of the
  // work that stays on one core however many hosts the agents run on.
  double cpu_seconds() const {
    std::FILE* f =
        std::fopen(("/proc/self/task/" + std::to_string(tid_.load()) + "/stat").c_str(), "r");
    if (!f) return 0;
    char buf[1024] = {};
    size_t len = std::fread(buf, 1, sizeof(buf) - 1, f);
    std::fclose(f);
    // Fields after the ")" that ends the thread's name: state is field 3,
    // utime and stime are fields 14 and 15.
    const char* p = std::strrchr(buf, ')');
    if (!p || static_cast<size_t>(p - buf) >= len) return 0;
    unsigned long long utime = 0, stime = 0;
    if (std::sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &utime,
                    &stime) != 2) {
      return 0;
    }
    return static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
  }

 private:
  std::unique_ptr<elasticrun::store::Server> server_;
  std::atomic<int> tid_{0};
  std::thread thread_;
};

void run_once(const Options& opt, int run) {
  std::optional<LocalStore> local;
  std::string host = opt.store_host;
  int port = opt.store_port;
  if (host.empty() && !opt.etcd) {
    local.emplace();
    host = "127.0.0.1";
    port = local->port();
  }
  const int n = opt.agents;
  // A fresh run id per run: a given store keeps the rounds of earlier runs.
  const std::string run_id = "rdzv-bench-" + std::to_string(getpid()) + "-" + std::to_string(run);

  rdzv::RendezvousConfig base;
  base.store_host = host;
  base.store_port = port;
  base.etcd = opt.etcd;
  base.run_id = run_id;
  base.host = "127.0.0.1";
  base.local_world_size = 1;
  base.sizes.min_replicas = n;
  base.sizes.max_replicas = n;
  base.join_timeout = std::chrono::seconds(opt.join_timeout_s);
  base.heartbeat_interval = std::chrono::milliseconds(opt.heartbeat_interval_ms);
  base.missed_heartbeats = opt.missed_heartbeats;
  base.store_timeout = std::chrono::seconds(opt.join_timeout_s);

  const auto connect_start = Clock::now();
  std::vector<std::unique_ptr<rdzv::Rendezvous>> agents;
  agents.reserve(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    rdzv::RendezvousConfig c = base;
    c.node_id = "bench-" + std::to_string(getpid()) + "-" + std::to_string(i);
    agents.push_back(std::make_unique<rdzv::Rendezvous>(c));
  }
  const double connect_ms = ms(Clock::now() - connect_start);

  std::vector<AgentResult> results(static_cast<size_t>(n));
  std::latch parked(n + 1);
  std::latch gate(1);
  Clock::time_point t0;
  std::vector<std::unique_ptr<SmallThread>> threads;
  threads.reserve(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    threads.push_back(std::make_unique<SmallThread>(opt.stack_kib * 1024, [&, i] {
      AgentResult& r = results[static_cast<size_t>(i)];
      parked.count_down();
      gate.wait();
      r.begin = Clock::now();
      try {
        rdzv::Assignment a = agents[static_cast<size_t>(i)]->join();
        r.ok = true;
        r.group_rank = a.group_rank;
        r.world_size = a.world_size;
      } catch (const std::exception& e) {
        r.error = e.what();
      }
      r.end = Clock::now();
    }));
  }
  parked.arrive_and_wait();

  // Keeps the closer's heartbeat moving (see the header comment). Started
  // with the gate so that it costs nothing before; its few requests (one
  // connection, a WAIT and GET for rec/1, one ADD per interval) are in
  // "requests".
  std::atomic<bool> done{false};
  const uint64_t requests_before = local ? local->requests() : 0;
  const double cpu_before = cpu_seconds();
  const double server_cpu_before = local ? local->cpu_seconds() : 0;
  t0 = Clock::now();
  gate.count_down();
  std::thread pump = elasticrun::util::start_quiet_thread([&] {
    try {
      const auto timeout = std::chrono::seconds(opt.join_timeout_s);
      auto client = rdzv::connect_store(base, timeout, timeout);
      rdzv::RendezvousConfig c = base;
      c.node_id = rdzv::JoinRecord::parse(client.get(rdzv::keys::join(1, 1))).node_id;
      rdzv::Heartbeat hb(c);
      while (!done.load()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "rendezvous_loadgen: closer heartbeat: %s\n", e.what());
    }
  });
  for (auto& t : threads) t->join();
  const double cpu_s = cpu_seconds() - cpu_before;
  const double server_cpu_s = local ? local->cpu_seconds() - server_cpu_before : 0;
  const uint64_t requests_after = local ? local->requests() : 0;
  done.store(true);
  pump.join();

  std::vector<double> lat;
  Clock::time_point last = t0;
  int errors = 0;
  std::string first_error;
  std::set<int> ranks;
  for (const AgentResult& r : results) {
    last = std::max(last, r.end);
    if (!r.ok) {
      ++errors;
      if (first_error.empty()) first_error = r.error;
      continue;
    }
    lat.push_back(ms(r.end - r.begin));
    if (r.world_size != n) {
      ++errors;
      if (first_error.empty()) first_error = "world size " + std::to_string(r.world_size);
    }
    ranks.insert(r.group_rank);
  }
  if (errors == 0 &&
      (static_cast<int>(ranks.size()) != n || *ranks.begin() != 0 || *ranks.rbegin() != n - 1)) {
    ++errors;
    first_error = "group ranks are not 0..N-1 each once";
  }
  std::string requests = "null", per_agent = "null";
  if (local) {
    const uint64_t req = requests_after - requests_before;
    requests = std::to_string(req);
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.2f", static_cast<double>(req) / n);
    per_agent = buf;
  }
  std::printf(
      "{\"agents\": %d, \"run\": %d, \"wall_ms\": %.3f, \"join_p50_ms\": %.3f, "
      "\"join_p99_ms\": %.3f, \"join_max_ms\": %.3f, \"connect_ms\": %.3f, \"cpu_s\": %.3f, "
      "\"server_cpu_s\": %.3f, "
      "\"requests\": %s, "
      "\"requests_per_agent\": %s, \"errors\": %d, \"first_error\": %s}\n",
      n, run, ms(last - t0), percentile(lat, 0.5), percentile(lat, 0.99), percentile(lat, 1.0),
      connect_ms, cpu_s, server_cpu_s, requests.c_str(), per_agent.c_str(), errors,
      json_string(first_error).c_str());
  std::fflush(stdout);
  // Agents disconnect (and threads are joined) before the store stops.
  threads.clear();
  agents.clear();
}

}  // namespace

int main(int argc, char** argv) {
  Options opt = parse_args(argc, argv);
  std::signal(SIGPIPE, SIG_IGN);
  elasticrun::bench::raise_fd_limit("rendezvous_loadgen", static_cast<size_t>(opt.agents) * 2 + 64);
  // Per-agent info lines would time 4,096 writes to one stderr, not the protocol.
  elasticrun::util::set_log_level(opt.log_level);
  try {
    for (int run = 1; run <= opt.repeats; ++run) run_once(opt, run);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rendezvous_loadgen: %s\n", e.what());
    return 1;
  }
  return 0;
}
