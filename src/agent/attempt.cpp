#include "agent/attempt.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "agent/attempt_events.hpp"
#include "agent/failure_report.hpp"
#include "agent/fault_record.hpp"
#include "agent/fault_stacks.hpp"
#include "agent/health_watch.hpp"
#include "agent/rank_logs.hpp"
#include "elasticrun/errors.hpp"
#include "supervisor/descendants.hpp"

namespace elasticrun::agent {
namespace {

namespace fs = std::filesystem;
using supervisor::WorkerExit;

// --warm-start: how long after its workers start an attempt begins warming
// the next restart's interpreters.
constexpr uint64_t kWarmRefillDelayMs = 3000;

// One attempt: start the workers, watch them until every one has exited.
class Attempt final : public AttemptControl, public supervisor::LogPump::LineObserver {
 public:
  Attempt(const AgentConfig& c, const NodeContext& node, int restart_count, fs::path attempt_dir,
          std::vector<std::string> stack_files, int rank_offset, AttemptDelegate& delegate,
          Inbox* inbox)
      : config_(c),
        node_(node),
        group_(node.watch),
        warm_(node.warm),
        job_cgroup_(node.job_cgroup),
        restart_count_(restart_count),
        attempt_dir_(std::move(attempt_dir)),
        rank_offset_(rank_offset),
        delegate_(delegate),
        inbox_(inbox),
        fault_stacks_(&loop_, std::move(stack_files)) {
    uv_loop_init(&loop_);
    uv_signal_init(&loop_, &sigchld_);
    sigchld_.data = this;
    uv_timer_init(&loop_, &kill_timer_);
    kill_timer_.data = this;
    uv_timer_init(&loop_, &leave_timer_);
    leave_timer_.data = this;
    uv_timer_init(&loop_, &refill_timer_);
    refill_timer_.data = this;
    uv_timer_init(&loop_, &rescue_timer_);
    rescue_timer_.data = this;
    uv_timer_init(&loop_, &monitor_timer_);
    monitor_timer_.data = this;
    uv_async_init(&loop_, &inbox_async_, [](uv_async_t* h) {
      auto* self = static_cast<Attempt*>(h->data);
      self->inbox_->run_pending(*self);
    });
    inbox_async_.data = this;
  }

  ~Attempt() {
    if (inbox_) inbox_->detach();
    pump_.drain_and_close();
    uv_walk(
        &loop_,
        [](uv_handle_t* h, void*) {
          if (!uv_is_closing(h)) uv_close(h, nullptr);
        },
        nullptr);
    // finish() may have called uv_stop() before the loop ever ran (every
    // worker was gone at the first look); a run that finds the stop flag set
    // returns at once without closing anything, and clears it on the way
    // out. So run until nothing is left: the handles, the loop's memory.
    while (uv_run(&loop_, UV_RUN_DEFAULT) != 0) {
    }
    uv_loop_close(&loop_);
    for (int fd : parent_fds_) ::close(fd);
  }

  Outcome run(std::vector<supervisor::SpawnSpec> specs, const std::vector<RankPlan>& logs,
              const fs::path& attempt_dir) {
    const supervisor::LogPump::LineCopy* out_copy = line_copy(
        stdout_copy_, config_.duplicate_stdout_filters, attempt_dir / "filtered_stdout.log");
    const supervisor::LogPump::LineCopy* err_copy = line_copy(
        stderr_copy_, config_.duplicate_stderr_filters, attempt_dir / "filtered_stderr.log");
    std::vector<int> child_fds;
    for (size_t r = 0; r < specs.size() && r < logs.size(); ++r) {
      specs[r].stdout_fd =
          stream_fd(logs[r].out, STDOUT_FILENO, logs[r].prefix, out_copy, 2 * r, child_fds);
      specs[r].stderr_fd =
          stream_fd(logs[r].err, STDERR_FILENO, logs[r].prefix, err_copy, 2 * r + 1, child_fds);
    }
    // A cgroup of this attempt's own, below the job's: what a worker starts,
    // setsid or not, stays in it, and is killed with it when the attempt ends.
    if (job_cgroup_ && job_cgroup_->valid()) {
      auto cg = job_cgroup_->child(attempt_dir.filename().string());
      if (cg.is_ok()) {
        cgroup_ = std::move(cg).value();
      } else {
        log_->warn("{}; this attempt's workers run without one", cg.status().message());
      }
    }
    for (auto& s : specs) s.cgroup_fd = cgroup_.procs_fd();
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
    // --warm-start: interpreters that have imported torch already take the
    // workers they can; the rest start as usual.
    const auto spawn_start = std::chrono::steady_clock::now();
    std::vector<pid_t> warm(specs.size(), 0);
    size_t warmed = 0;
    for (size_t r = 0; warm_ && r < specs.size(); ++r) {
      warm[r] = warm_->activate(specs[r]);
      warmed += warm[r] > 0 ? 1 : 0;
    }
    util::Status st = group_.start(specs, warm);
    // The workers hold their ends now; ours would keep the pipes open forever.
    for (int fd : child_fds) ::close(fd);
    if (!st) throw Error("cannot start workers: " + st.message());
    if (warm_) {
      log_->info("started {} worker(s) (restart count {}; {} in warm interpreters)", specs.size(),
                 restart_count_, warmed);
      // The next restart's interpreters import while this attempt trains,
      // once its workers are under way rather than competing with their start.
      uv_timer_start(
          &refill_timer_, [](uv_timer_t* t) { static_cast<Attempt*>(t->data)->warm_->refill(); },
          kWarmRefillDelayMs, 0);
    } else {
      log_->info("started {} worker(s) (restart count {})", specs.size(), restart_count_);
    }
    std::vector<pid_t> pids;
    for (int lr = 0; lr < static_cast<int>(group_.size()); ++lr) pids.push_back(group_.pid(lr));
    record_workers_start(*node_.events, {restart_count_, rank_offset_}, pids, warmed,
                         std::chrono::steady_clock::now() - spawn_start);
    delegate_.attempt_started(*this);
    const auto every = static_cast<uint64_t>(config_.monitor_interval.count());
    uv_timer_start(
        &monitor_timer_,
        [](uv_timer_t* t) {
          static_cast<Attempt*>(t->data)->delegate_.tick(std::chrono::steady_clock::now());
        },
        every, every);
    // A message may have been posted before the loop could hear it:
    // attaching delivers it. A child may have exited before the handler was
    // installed: look once.
    if (inbox_) inbox_->attach(&inbox_async_);
    on_child();
    if (!done_) uv_run(&loop_, UV_RUN_DEFAULT);
    // An attempt shorter than the refill delay: the next one still finds interpreters.
    if (warm_) warm_->refill();
    // Whatever the workers left behind dies with them: what is in their
    // process groups, what left those (setsid) but not the cgroup, and what
    // was handed to us as the subreaper when its parent died. The idle warm
    // interpreters and the death watch are ours, not theirs.
    group_.signal_all(SIGKILL);
    if (st = cgroup_.kill(); !st) log_->warn("{}", st.message());
    if (st = cgroup_.remove(); !st) log_->warn("{}", st.message());
    std::vector<pid_t> helpers = warm_ ? warm_->idle_pids() : std::vector<pid_t>{};
    helpers.push_back(node_.watch->pid());
    if (const size_t n = supervisor::kill_reparented(helpers); n > 0) {
      log_->info("{} process(es) the workers left behind were killed and reaped", n);
    }
    group_.forget();
    pump_.drain_and_close();
    return outcome_;
  }

  const std::vector<WorkerExit>& failures() const { return failures_; }
  const std::optional<std::string>& stop_reason() const { return stop_reason_; }
  const std::optional<health::Fault>& fault() const { return fault_; }
  const std::vector<StackResult>& stacks() const { return fault_stacks_.stacks(); }

 private:
  // torchrun's filtered_std{out,err}.log of the attempt, created (empty) as
  // torchrun does whenever filters are given; null without filters.
  const supervisor::LogPump::LineCopy* line_copy(supervisor::LogPump::LineCopy& copy,
                                                 const std::vector<std::string>& needles,
                                                 const fs::path& path) {
    if (needles.empty()) return nullptr;
    copy.fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (copy.fd < 0) {
      throw Error("cannot create log file " + path.string() + ": " + std::strerror(errno));
    }
    parent_fds_.push_back(copy.fd);
    copy.needles = needles;
    return &copy;
  }

  // The descriptor a worker gets for one stream, per the plan; -1 inherits
  // the agent's. Descriptors only the child needs go to child_fds.
  int stream_fd(const StreamPlan& p, int console, const std::string& prefix,
                const supervisor::LogPump::LineCopy* copy, size_t tag,
                std::vector<int>& child_fds) {
    if (p.observed && !p.tee) {
      // Where the bytes would have gone, unchanged; and the lines to the rules.
      supervisor::LogPump::Sink sink;
      if (!p.file.empty()) {
        sink.file_fd = ::open(p.file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (sink.file_fd < 0) {
          throw Error("cannot create log file " + p.file + ": " + std::strerror(errno));
        }
        parent_fds_.push_back(sink.file_fd);
      } else if (!p.discard) {
        sink.console_fd = console;
        sink.raw = true;
      }
      sink.observer = this;
      sink.tag = static_cast<int>(tag);
      int pipe_w = pump_.add(std::move(sink));
      child_fds.push_back(pipe_w);
      return pipe_w;
    }
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
    int pipe_w = pump_.add(
        {file, console, false, prefix, copy, p.observed ? this : nullptr, static_cast<int>(tag)});
    child_fds.push_back(pipe_w);
    return pipe_w;
  }

  // LogPump::LineObserver: a line of a stream a log rule reads.
  void on_line(int tag, std::string_view line) override {
    if (!stopping_) delegate_.on_log_line(tag / 2, line);
  }

 public:
  int stop_signal() const { return stop_signal_; }

 private:
  void on_child() {
    for (const WorkerExit& e : group_.reap()) {
      record_rescue(e);
      if (e.failed() && !stopping_) {
        log_->warn("worker local rank {} (pid {}) failed: {}", e.local_rank, e.pid, e.describe());
        failures_.push_back(e);
        stop_after_failure(Outcome::kFailed, config_.shutdown_timeout);
        delegate_.on_failure(e);
      } else if (e.failed() && outcome_ == Outcome::kFailed) {
        // Survivors we stopped are listed too (exitcode -15), as torchrun
        // lists them; the root cause is still the earliest failure.
        failures_.push_back(e);
      }
    }
    if (group_.all_exited()) finish();
  }

  void on_signal(int sig) {
    const bool first = stop_signal_ == 0;
    // The delegate hears of the first signal even when it is forwarded.
    const bool leaves = first && delegate_.on_signal(sig);
    if (leaves && !stopping_) {
      log_->warn("received {}: this node leaves the job; its workers stop as the nodes agree",
                 supervisor::signal_name(sig));
      stop_signal_ = sig;
      // Forwarded after all if the job does not answer in time.
      uv_timer_start(
          &leave_timer_,
          [](uv_timer_t* t) {
            auto* self = static_cast<Attempt*>(t->data);
            if (self->stopping_) return;
            self->log_->warn("no stop request within {} ms of {}: forwarding it to the workers",
                             self->config_.graceful_shutdown_timeout.count(),
                             supervisor::signal_name(self->stop_signal_));
            self->stop(self->stop_signal_, Outcome::kSignaled, self->config_.shutdown_timeout);
          },
          static_cast<uint64_t>(config_.graceful_shutdown_timeout.count()), 0);
      return;
    }
    if (stopping_ && outcome_ == Outcome::kSignaled) {
      if (sig == SIGINT) {
        log_->warn("second SIGINT: killing workers now");
        group_.signal_all(SIGKILL);
      }
      return;
    }
    log_->warn("received {}: forwarding it to the workers", supervisor::signal_name(sig));
    stop_signal_ = sig;
    // A stop already under way (a failure, a round that ended) turns into
    // this: the run now ends with the signal.
    if (stopping_) {
      outcome_ = Outcome::kSignaled;
      group_.signal_all(sig);
    }
    stop(sig, Outcome::kSignaled, config_.shutdown_timeout);
  }

  // A worker given the rescue window exited: whether its SDK marked its
  // rescue saved, and how long after the failure.
  void record_rescue(const WorkerExit& e) {
    if (!rescue_started_ ||
        std::find(rescuers_.begin(), rescuers_.end(), e.local_rank) == rescuers_.end()) {
      return;
    }
    const bool saved = node_.control && e.local_rank < node_.control->num_slots() &&
                       (node_.control->read_slot(e.local_rank).flags & control::kFlagSaved) != 0;
    agent::record_rescue(*node_.events, {restart_count_, rank_offset_}, e, saved,
                         std::chrono::steady_clock::now() - *rescue_started_);
  }

 public:
  const supervisor::WorkerGroup& workers() const override { return group_; }
  int rank_offset() const override { return rank_offset_; }
  int restart_count() const override { return restart_count_; }

  void report_fault(const health::Fault& fault) override {
    if (stopping_ && !done_ && !fault_) {
      // Too late to be why the workers stop, but often why they failed: a
      // GPU's XID kills its workers before the next GPU reading sees it.
      log_->warn("health: {} (found after the workers were told to stop)", fault.describe());
    }
    if (stopping_ || done_ || fault_) return;
    fault_ = fault;
    log_->error("health: {}", fault.describe());
    // Where every running worker was, before anything is signalled.
    const auto& files = fault_stacks_.files();
    std::vector<StackTarget> targets;
    for (int lr = 0; lr < static_cast<int>(group_.size()); ++lr) {
      if (group_.exited(lr) || static_cast<size_t>(lr) >= files.size()) continue;
      StackTarget t;
      t.local_rank = lr;
      t.pid = group_.pid(lr);
      t.registered = node_.control && lr < node_.control->num_slots() &&
                     (node_.control->read_slot(lr).flags & control::kFlagStacks) != 0;
      t.file = files[static_cast<size_t>(lr)];
      targets.push_back(t);
    }
    const auto path = node_.base.find("PATH");
    // Once the workers' faulthandlers have written (or the grace passed),
    // they stop as after a failure.
    fault_stacks_.capture(targets, path == node_.base.end() ? "" : path->second, [this] {
      if (!stopping_) stop_after_failure(Outcome::kFailed, config_.shutdown_timeout);
    });
    write_fault_record(attempt_dir_ / "fault.json", fault, rank_offset_, fault_stacks_.stacks(),
                       files);
    record_health_fault(*node_.events, {restart_count_, rank_offset_}, fault,
                        (attempt_dir_ / "fault.json").string());
    delegate_.on_fault(fault);
  }

  void request_stop(const std::string& reason) override {
    if (stopping_ || done_) return;
    stop_reason_ = reason;
    log_->info("stopping the workers: {}", reason);
    if (delegate_.tell_stop(group_)) {
      stop(0, Outcome::kStopped, config_.graceful_shutdown_timeout);
    } else {
      stop_after_failure(Outcome::kStopped, config_.graceful_shutdown_timeout);
    }
  }

 private:
  // --shutdown-signal to every worker after a failure; those that can save a
  // rescue get the rescue window first (AttemptHooks::rescue).
  void stop_after_failure(Outcome why, std::chrono::milliseconds grace) {
    const std::chrono::milliseconds window = delegate_.rescue_window();
    rescuers_.clear();
    for (int lr = 0; lr < static_cast<int>(group_.size()); ++lr) {
      if (window.count() > 0 && !group_.exited(lr) && delegate_.rescue(lr) != Rescue::kNone) {
        rescuers_.push_back(lr);
      } else {
        group_.signal_group(lr, config_.shutdown_signal);
      }
    }
    stop(0, why, grace + window);
    kill_stopped();
    if (rescuers_.empty()) return;
    rescue_started_ = std::chrono::steady_clock::now();
    log_->info("{} worker(s) may save a rescue: {} in {} ms unless one is under way",
               rescuers_.size(), supervisor::signal_name(config_.shutdown_signal), window.count());
    uv_timer_start(
        &rescue_timer_,
        [](uv_timer_t* t) {
          auto* self = static_cast<Attempt*>(t->data);
          for (int lr : self->rescuers_) {
            if (self->group_.exited(lr)) continue;
            if (self->delegate_.rescue(lr) == Rescue::kUnderWay) {
              self->log_->info("worker local rank {} is saving a rescue: left to finish", lr);
            } else {
              self->group_.signal_group(lr, self->config_.shutdown_signal);
            }
          }
        },
        static_cast<uint64_t>(window.count()), 0);
  }

  // A stopped worker (SIGSTOP) acts on no polite signal until it continues,
  // and continuing it would let it run on: it is killed at once.
  void kill_stopped() {
    for (int lr = 0; lr < static_cast<int>(group_.size()); ++lr) {
      if (group_.exited(lr) || !process_stopped(group_.pid(lr))) continue;
      log_->warn("worker local rank {} (pid {}) is stopped: killing it", lr, group_.pid(lr));
      group_.signal_group(lr, SIGKILL);
    }
  }

  // Stops the workers with sig (0: the caller signals them) and SIGKILLs
  // them after grace.
  void stop(int sig, Outcome why, std::chrono::milliseconds grace) {
    if (stopping_) return;
    stopping_ = true;
    outcome_ = why;
    kill_after_ = grace;
    if (sig != 0) group_.signal_all(sig);
    uv_timer_start(
        &kill_timer_,
        [](uv_timer_t* t) {
          auto* self = static_cast<Attempt*>(t->data);
          self->log_->warn(
              "workers still running {} ms after they were told to stop: sending "
              "SIGKILL",
              self->kill_after_.count());
          self->group_.signal_all(SIGKILL);
        },
        static_cast<uint64_t>(grace.count()), 0);
  }

  void finish() {
    done_ = true;
    if (!stopping_) outcome_ = Outcome::kSucceeded;
    uv_timer_stop(&kill_timer_);
    uv_timer_stop(&leave_timer_);
    uv_timer_stop(&refill_timer_);
    uv_timer_stop(&rescue_timer_);
    uv_timer_stop(&monitor_timer_);
    fault_stacks_.cancel();
    uv_stop(&loop_);
  }

  const AgentConfig& config_;
  const NodeContext& node_;
  supervisor::WorkerGroup group_;
  WarmPool* warm_;
  supervisor::Cgroup* job_cgroup_;
  supervisor::Cgroup cgroup_;  // this attempt's, when there is a job cgroup
  int restart_count_;
  fs::path attempt_dir_;
  int rank_offset_;
  AttemptDelegate& delegate_;
  Inbox* inbox_;  // may be null
  uv_loop_t loop_{};
  uv_async_t inbox_async_{};
  std::chrono::milliseconds kill_after_{0};
  std::optional<std::string> stop_reason_;
  uv_signal_t sigchld_{};
  uv_timer_t kill_timer_{};
  uv_timer_t leave_timer_{};    // signal_means_leave: forwards the signal if nobody stops us
  uv_timer_t refill_timer_{};   // --warm-start: interpreters for the next attempt
  uv_timer_t rescue_timer_{};   // the end of the rescue window after a failure
  uv_timer_t monitor_timer_{};  // --monitor-interval: the delegate's tick
  std::optional<health::Fault> fault_;
  FaultStacks fault_stacks_;   // the fault's stacks, and the wait for them
  std::vector<int> rescuers_;  // local ranks given the rescue window
  std::optional<std::chrono::steady_clock::time_point> rescue_started_;  // that window's start
  std::vector<std::unique_ptr<uv_signal_t>> forwarded_;
  bool stopping_ = false;
  bool done_ = false;
  Outcome outcome_ = Outcome::kSucceeded;
  int stop_signal_ = 0;
  std::vector<WorkerExit> failures_;
  supervisor::LogPump::LineCopy stdout_copy_, stderr_copy_;  // outlive pump_
  supervisor::LogPump pump_{&loop_};
  std::vector<int> parent_fds_;
  std::shared_ptr<spdlog::logger> log_ = util::logger("agent");
};

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

}  // namespace

FailureReport failure_report(const AgentConfig& config, const AttemptResult& r) {
  FailureReport report;
  report.script_name = config.script_name;
  report.failures = r.failures;
  report.error_files = r.error_files;
  report.agent_error_file = config.agent_error_file;
  report.fault = r.fault;
  report.stacks = r.stacks;
  report.stack_files = r.stack_files;
  return report;
}

AttemptResult run_attempt(const AgentConfig& config, const NodeContext& node, const Assignment& a,
                          int attempt_index, AttemptDelegate& delegate, Inbox* inbox) {
  auto log = util::logger("agent");
  WorkerEnvOptions eo;
  eo.role = config.role;
  eo.run_id = config.run_id;
  eo.max_restarts = config.max_restarts;
  eo.virtual_local_rank = config.virtual_local_rank;
  eo.stack_signal = stack_signal();
  if (config.progress.hang.mode == health::HangLimit::Mode::kFixed) {
    eo.hang_seconds = static_cast<double>(config.progress.hang.fixed.count()) / 1000.0;
  }
  const fs::path attempt_dir = node.run_dir / ("attempt_" + std::to_string(attempt_index));
  std::vector<supervisor::SpawnSpec> specs;
  std::vector<RankPlan> logs;
  // torchrun recreates the attempt directory; a leftover of a crashed run must not mix in.
  fs::remove_all(attempt_dir);
  fs::create_directories(attempt_dir);
  for (int lr = 0; lr < a.local_world_size; ++lr) {
    fs::path rank_dir = attempt_dir / std::to_string(lr);
    // One mkdir each: the attempt directory was just made, and it is empty.
    fs::create_directory(rank_dir);
    eo.error_files.push_back((rank_dir / "error.json").string());
    eo.stack_files.push_back((rank_dir / "stacks.txt").string());
    logs.push_back(plan_rank_logs(config, rank_dir, lr, a.rank_offset + lr, node.host));
  }
  for (int lr = 0; lr < a.local_world_size; ++lr) {
    supervisor::SpawnSpec s;
    s.argv = config.worker_command;
    // torchrun's macros: ${local_rank} in any argument (not the program).
    for (size_t i = 1; i < s.argv.size(); ++i) {
      s.argv[i] = substitute_template(s.argv[i], {{"local_rank", std::to_string(lr)}});
    }
    s.env = to_envp(worker_env(node.base, a, eo, lr));
    if (static_cast<size_t>(lr) < node.cpu_sets.size()) {
      s.cpu_affinity = node.cpu_sets[static_cast<size_t>(lr)];
    }
    specs.push_back(std::move(s));
  }

  AttemptResult result;
  result.error_files = eo.error_files;
  result.stack_files = eo.stack_files;
  if (!config.pre_train_command.empty() &&
      run_hook("pre-train", config.pre_train_command, node.base) != 0) {
    log->error("pre-train script failed: the workers of attempt {} do not start", attempt_index);
  } else {
    Attempt attempt(config, node, a.restart_count, attempt_dir, eo.stack_files, a.rank_offset,
                    delegate, inbox);
    result.outcome = attempt.run(std::move(specs), logs, attempt_dir);
    result.failures = attempt.failures();
    result.stop_signal = attempt.stop_signal();
    result.stop_reason = attempt.stop_reason();
    result.fault = attempt.fault();
    result.stacks = attempt.stacks();
    record_workers_end(*node.events, {a.restart_count, a.rank_offset}, result);
  }
  if (!config.post_train_command.empty()) {
    run_hook("post-train", config.post_train_command, node.base);
  }
  return result;
}

}  // namespace elasticrun::agent
