#include "agent/agent.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <uv.h>

#include <cctype>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>

#include "agent/embedded_store.hpp"
#include "agent/failure_report.hpp"
#include "agent/worker_env.hpp"
#include "elasticrun/errors.hpp"
#include "elasticrun/store_client.hpp"
#include "supervisor/death_watch.hpp"
#include "supervisor/log_pump.hpp"
#include "supervisor/worker_group.hpp"
#include "util/logging.hpp"

namespace elasticrun::agent {
namespace {

namespace fs = std::filesystem;
using supervisor::WorkerExit;

std::string random_suffix() {
  static const char kChars[] = "abcdefghijklmnopqrstuvwxyz0123456789_";
  std::mt19937_64 rng(std::random_device{}());
  std::string s;
  for (int i = 0; i < 8; ++i) s += kChars[rng() % (sizeof(kChars) - 1)];
  return s;
}

// torchrun's layout: <log_dir or a fresh temp dir>/<run_id>_<random>/attempt_<n>/<local_rank>/
fs::path make_run_dir(const AgentConfig& c) {
  fs::path base;
  if (!c.log_dir.empty()) {
    base = c.log_dir;
    fs::create_directories(base);
  } else {
    // Python's mkdtemp(prefix="torchelastic_"): 8 characters of [a-z0-9_].
    for (;;) {
      base = fs::temp_directory_path() / ("torchelastic_" + random_suffix());
      if (fs::create_directory(base)) break;
    }
    fs::permissions(base, fs::perms::owner_all, fs::perm_options::replace);
  }
  for (;;) {
    fs::path dir = base / (c.run_id + "_" + random_suffix());
    if (fs::create_directory(dir)) return dir;
  }
}

enum class Outcome { kSucceeded, kFailed, kSignaled };

// Where one worker's stdout or stderr goes (torchrun's DefaultLogsSpecs).
struct StreamPlan {
  std::string file;      // log file, when redirected or tee'd
  bool tee = false;      // also to the console, line by line with the prefix
  bool discard = false;  // filtered out by --local-ranks-filter: /dev/null
};

struct RankPlan {
  StreamPlan out, err;
  std::string prefix;
};

RankPlan plan_rank_logs(const AgentConfig& c, const fs::path& rank_dir, int local_rank, int rank,
                        const std::string& host) {
  auto bits = [](const std::vector<int>& v, int r) {
    return static_cast<size_t>(r) < v.size() ? v[static_cast<size_t>(r)] : 0;
  };
  int tee = bits(c.tee, local_rank);
  const int redirect = bits(c.redirects, local_rank) | tee;
  const bool filtered = c.local_ranks_filter && !c.local_ranks_filter->count(local_rank);
  if (filtered) tee = 0;
  RankPlan p;
  auto plan = [&](StreamPlan& s, int bit, const char* name) {
    if (redirect & bit) s.file = (rank_dir / name).string();
    s.tee = (tee & bit) != 0;
    s.discard = filtered && s.file.empty();
  };
  plan(p.out, 1, "stdout.log");
  plan(p.err, 2, "stderr.log");
  p.prefix =
      substitute_template(c.log_line_prefix_template, {{"role_name", c.role},
                                                       {"rank", std::to_string(rank)},
                                                       {"local_rank", std::to_string(local_rank)},
                                                       {"hostname", host}});
  return p;
}

// One attempt: start the workers, watch them until every one has exited.
class Attempt {
 public:
  Attempt(const AgentConfig& c, supervisor::DeathWatch& watch, int restart_count)
      : config_(c), group_(&watch), restart_count_(restart_count) {
    uv_loop_init(&loop_);
    uv_signal_init(&loop_, &sigchld_);
    sigchld_.data = this;
    uv_timer_init(&loop_, &kill_timer_);
    kill_timer_.data = this;
  }

  ~Attempt() {
    pump_.drain_and_close();
    uv_walk(
        &loop_,
        [](uv_handle_t* h, void*) {
          if (!uv_is_closing(h)) uv_close(h, nullptr);
        },
        nullptr);
    uv_run(&loop_, UV_RUN_DEFAULT);
    uv_loop_close(&loop_);
    for (int fd : parent_fds_) ::close(fd);
  }

  Outcome run(std::vector<supervisor::SpawnSpec> specs, const std::vector<RankPlan>& logs) {
    std::vector<int> child_fds;
    for (size_t r = 0; r < specs.size() && r < logs.size(); ++r) {
      specs[r].stdout_fd = stream_fd(logs[r].out, STDOUT_FILENO, logs[r].prefix, child_fds);
      specs[r].stderr_fd = stream_fd(logs[r].err, STDERR_FILENO, logs[r].prefix, child_fds);
    }
    uv_signal_start(
        &sigchld_, [](uv_signal_t* h, int) { static_cast<Attempt*>(h->data)->on_child(); },
        SIGCHLD);
    for (int sig : config_.signals_to_handle) {
      auto s = std::make_unique<uv_signal_t>();
      uv_signal_init(&loop_, s.get());
      s->data = this;
      uv_signal_start(
          s.get(),
          [](uv_signal_t* h, int signum) { static_cast<Attempt*>(h->data)->on_signal(signum); },
          sig);
      forwarded_.push_back(std::move(s));
    }
    util::Status st = group_.start(specs);
    // The workers hold their ends now; ours would keep the pipes open forever.
    for (int fd : child_fds) ::close(fd);
    if (!st) throw Error("cannot start workers: " + st.message());
    log_->info("started {} worker(s) (restart count {})", specs.size(), restart_count_);
    // A child may have exited before the handler was installed: look once.
    on_child();
    if (!done_) uv_run(&loop_, UV_RUN_DEFAULT);
    // Whatever the workers left behind in their process groups dies with them.
    group_.signal_all(SIGKILL);
    group_.forget();
    pump_.drain_and_close();
    return outcome_;
  }

  const std::vector<WorkerExit>& failures() const { return failures_; }

 private:
  // The descriptor a worker gets for one stream, per the plan; -1 inherits
  // the agent's. Descriptors only the child needs go to child_fds.
  int stream_fd(const StreamPlan& p, int console, const std::string& prefix,
                std::vector<int>& child_fds) {
    if (p.discard) {
      int fd = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
      child_fds.push_back(fd);
      return fd;
    }
    if (p.file.empty()) return -1;
    int file = ::open(p.file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (file < 0) throw Error("cannot create log file " + p.file + ": " + std::strerror(errno));
    if (!p.tee) {
      child_fds.push_back(file);
      return file;
    }
    parent_fds_.push_back(file);  // the pump writes it
    int pipe_w = pump_.add(file, console, prefix);
    child_fds.push_back(pipe_w);
    return pipe_w;
  }

 public:
  int stop_signal() const { return stop_signal_; }

 private:
  void on_child() {
    for (const WorkerExit& e : group_.reap()) {
      if (e.failed() && !stopping_) {
        log_->warn("worker local rank {} (pid {}) failed: {}", e.local_rank, e.pid, e.describe());
        failures_.push_back(e);
        stop(config_.shutdown_signal, Outcome::kFailed);
      } else if (e.failed() && outcome_ == Outcome::kFailed) {
        // Survivors we stopped are listed too (exitcode -15), as torchrun
        // lists them; the root cause is still the earliest failure.
        failures_.push_back(e);
      }
    }
    if (group_.all_exited()) finish();
  }

  void on_signal(int sig) {
    if (stopping_ && outcome_ == Outcome::kSignaled) {
      if (sig == SIGINT) {
        log_->warn("second SIGINT: killing workers now");
        group_.signal_all(SIGKILL);
      }
      return;
    }
    log_->warn("received {}: forwarding it to the workers", supervisor::signal_name(sig));
    stop_signal_ = sig;
    stop(sig, Outcome::kSignaled);
  }

  void stop(int sig, Outcome why) {
    if (stopping_) return;
    stopping_ = true;
    outcome_ = why;
    group_.signal_all(sig);
    uv_timer_start(
        &kill_timer_,
        [](uv_timer_t* t) {
          auto* self = static_cast<Attempt*>(t->data);
          self->log_->warn("workers still running {} ms after {}: sending SIGKILL",
                           self->config_.shutdown_timeout.count(),
                           supervisor::signal_name(self->config_.shutdown_signal));
          self->group_.signal_all(SIGKILL);
        },
        static_cast<uint64_t>(config_.shutdown_timeout.count()), 0);
  }

  void finish() {
    done_ = true;
    if (!stopping_) outcome_ = Outcome::kSucceeded;
    uv_timer_stop(&kill_timer_);
    uv_stop(&loop_);
  }

  const AgentConfig& config_;
  supervisor::WorkerGroup group_;
  int restart_count_;
  uv_loop_t loop_{};
  uv_signal_t sigchld_{};
  uv_timer_t kill_timer_{};
  std::vector<std::unique_ptr<uv_signal_t>> forwarded_;
  bool stopping_ = false;
  bool done_ = false;
  Outcome outcome_ = Outcome::kSucceeded;
  int stop_signal_ = 0;
  std::vector<WorkerExit> failures_;
  supervisor::LogPump pump_{&loop_};
  std::vector<int> parent_fds_;
  std::shared_ptr<spdlog::logger> log_ = util::logger("agent");
};

// The first address a name resolves to, as text ("127.0.0.1", "::1"); the
// name itself when it does not resolve.
std::string resolve_numeric(const std::string& host) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0 || res == nullptr) return host;
  char buf[INET6_ADDRSTRLEN] = {};
  std::string out = host;
  if (::getnameinfo(res->ai_addr, res->ai_addrlen, buf, sizeof(buf), nullptr, 0, NI_NUMERICHOST) ==
      0) {
    out = buf;
  }
  ::freeaddrinfo(res);
  return out;
}

// Runs a pre/post-train hook to completion; returns its exit status
// (128+N when killed by signal N, 127 when it could not start).
int run_hook(const char* what, const std::vector<std::string>& cmd,
             const std::map<std::string, std::string>& env) {
  auto log = util::logger("agent");
  supervisor::SpawnSpec spec;
  spec.argv = cmd;
  spec.env = to_envp(env);
  auto pid = supervisor::spawn(spec);
  if (!pid.is_ok()) {
    log->error("{} script: {}", what, pid.status().message());
    return 127;
  }
  int status = 0;
  while (::waitpid(pid.value(), &status, 0) < 0 && errno == EINTR) {
  }
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  if (code != 0) log->warn("{} script {} exited with {}", what, cmd[0], code);
  return code;
}

void wait_at_exit_barrier(const AgentConfig& c, int store_port);

// Every agent of a multi-node job waits here until all have finished, so
// that the node hosting the store does not take it away from the others.
void exit_barrier(const AgentConfig& c, int store_port) {
  if (c.nnodes <= 1) return;
  auto log = util::logger("agent");
  log->info("waiting up to {} s for the other agents at the exit barrier",
            std::chrono::duration_cast<std::chrono::seconds>(c.exit_barrier_timeout).count());
  try {
    wait_at_exit_barrier(c, store_port);
  } catch (const Error& e) {
    // As torchrun: this node's workers succeeded, so the run did; a peer
    // that never arrives is its own failure.
    log->error("error waiting on the exit barrier: {}", e.what());
  }
}

void wait_at_exit_barrier(const AgentConfig& c, int store_port) {
  StoreClientOptions opts;
  opts.key_prefix = "/elasticrun/" + c.run_id + "/";
  opts.connect_timeout = c.join_timeout;
  auto client = StoreClient::connect(c.master_addr, static_cast<uint16_t>(store_port), opts);
  const int64_t arrived = client.add("exit_barrier/count", 1);
  if (arrived >= c.nnodes) {
    client.set("exit_barrier/done", "1");
  } else {
    client.wait({"exit_barrier/done"}, c.exit_barrier_timeout);
  }
}

}  // namespace

int run_agent(const AgentConfig& config) {
  auto log = util::logger("agent");
  for (const auto& note : config.notes) log->info("{}", note);
  // A worker's pipe closing must be an error code, not our death.
  ::signal(SIGPIPE, SIG_IGN);
  util::Status st = supervisor::become_subreaper();
  if (!st) log->warn("{}; orphaned grandchildren will not be reaped by the agent", st.message());
  supervisor::DeathWatch watch;
  st = watch.start();
  if (!st) log->warn("{}; workers' descendants may outlive a killed agent", st.message());

  const fs::path run_dir = make_run_dir(config);
  char hostbuf[256] = {};
  ::gethostname(hostbuf, sizeof(hostbuf) - 1);
  const std::string host = hostbuf;
  std::map<std::string, std::string> base = current_environment();
  if (config.nproc_per_node > 1 && !base.count("OMP_NUM_THREADS")) {
    log->warn(
        "setting OMP_NUM_THREADS=1 for each worker to avoid overloading the system; "
        "tune it for your application");
    base["OMP_NUM_THREADS"] = "1";
  }

  // The node hosting the store keeps it for the whole run; standalone jobs
  // get a fresh store each attempt, so a restarted job never reads keys of
  // the attempt before (PyTorch workers do not namespace them).
  std::unique_ptr<EmbeddedStore> job_store;
  if (!config.standalone && config.node_rank == 0) {
    job_store = std::make_unique<EmbeddedStore>(config.master_addr, config.master_port);
  }

  // Where "localhost" points, looked up once: a restart should not wait on
  // the resolver.
  const std::string standalone_bind = config.standalone ? resolve_numeric("localhost") : "";
  std::vector<WorkerExit> failures;
  // The store of the attempt before, stopping on its own thread while the
  // next attempt starts; joined when it is replaced or at exit.
  std::unique_ptr<EmbeddedStore> retired_store;
  for (int restart = 0;; ++restart) {
    std::unique_ptr<EmbeddedStore> attempt_store;
    Assignment a;
    a.group_rank = config.node_rank;
    a.group_world_size = config.nnodes;
    a.local_world_size = config.nproc_per_node;
    a.rank_offset = config.node_rank * config.nproc_per_node;
    a.world_size = config.nnodes * config.nproc_per_node;
    a.restart_count = restart;
    if (config.standalone) {
      // torchrun gives standalone workers MASTER_ADDR=localhost; binding the
      // name puts the store on the address the workers' lookup finds first.
      attempt_store = std::make_unique<EmbeddedStore>(standalone_bind, 0);
      a.master_addr = "localhost";
      a.master_port = attempt_store->port();
    } else {
      a.master_addr = config.master_addr;
      a.master_port = job_store ? job_store->port() : config.master_port;
    }

    WorkerEnvOptions eo;
    eo.role = config.role;
    eo.run_id = config.run_id;
    eo.max_restarts = config.max_restarts;
    eo.virtual_local_rank = config.virtual_local_rank;
    const fs::path attempt_dir = run_dir / ("attempt_" + std::to_string(restart));
    std::vector<supervisor::SpawnSpec> specs;
    std::vector<RankPlan> logs;
    // torchrun recreates the attempt directory; a leftover of a crashed run must not mix in.
    fs::remove_all(attempt_dir);
    for (int lr = 0; lr < config.nproc_per_node; ++lr) {
      fs::path rank_dir = attempt_dir / std::to_string(lr);
      fs::create_directories(rank_dir);
      eo.error_files.push_back((rank_dir / "error.json").string());
      logs.push_back(plan_rank_logs(config, rank_dir, lr, a.rank_offset + lr, host));
    }
    for (int lr = 0; lr < config.nproc_per_node; ++lr) {
      supervisor::SpawnSpec s;
      s.argv = config.worker_command;
      // torchrun's macros: ${local_rank} in any argument (not the program).
      for (size_t i = 1; i < s.argv.size(); ++i) {
        s.argv[i] = substitute_template(s.argv[i], {{"local_rank", std::to_string(lr)}});
      }
      s.env = to_envp(worker_env(base, a, eo, lr));
      specs.push_back(std::move(s));
    }

    Outcome outcome = Outcome::kFailed;
    std::vector<WorkerExit> attempt_failures;
    int stop_signal = 0;
    if (!config.pre_train_command.empty() &&
        run_hook("pre-train", config.pre_train_command, base) != 0) {
      log->error("pre-train script failed: the workers of attempt {} do not start", restart);
    } else {
      Attempt attempt(config, watch, restart);
      outcome = attempt.run(std::move(specs), logs);
      attempt_failures = attempt.failures();
      stop_signal = attempt.stop_signal();
    }
    if (!config.post_train_command.empty()) run_hook("post-train", config.post_train_command, base);
    if (outcome == Outcome::kSucceeded) {
      exit_barrier(config, a.master_port);
      log->info("all {} worker(s) succeeded", config.nproc_per_node);
      return 0;
    }
    if (outcome == Outcome::kSignaled) {
      return 128 + stop_signal;
    }
    failures = attempt_failures;
    if (restart < config.max_restarts) {
      log->warn("restarting workers ({} of {} restarts used)", restart + 1, config.max_restarts);
      if (attempt_store) {
        attempt_store->request_stop();
        retired_store = std::move(attempt_store);
      }
      continue;
    }
    if (failures.empty()) return 1;  // the pre-train script failed; already logged
    FailureReport report{config.script_name, failures, eo.error_files, config.agent_error_file};
    report.print(a.rank_offset);
    return 1;
  }
}

}  // namespace elasticrun::agent
