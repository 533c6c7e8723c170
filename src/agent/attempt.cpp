#include "agent/attempt.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "agent/attempt_events.hpp"
#include "agent/attempt_plan.hpp"
#include "agent/failure_report.hpp"
#include "agent/fault_record.hpp"
#include "agent/fault_stacks.hpp"
#include "agent/handled_signals.hpp"
#include "agent/health_watch.hpp"
#include "agent/hook.hpp"
#include "agent/parking.hpp"
#include "agent/rank_logs.hpp"
#include "agent/rescue_window.hpp"
#include "agent/worker_streams.hpp"
#include "elasticrun/errors.hpp"
#include "supervisor/descendants.hpp"

namespace elasticrun::agent {
namespace {

namespace fs = std::filesystem;
using supervisor::WorkerExit;

// --warm-start: how long after its workers start an attempt begins warming
// the next restart's interpreters.
constexpr uint64_t kWarmRefillDelayMs = 3000;

// A parked worker's wait for the agent is checked this often while stopping.
constexpr uint64_t kParkPollMs = 5;

// What a dismissed attempt's loop asks when no round is left to ask.
AttemptDelegate& no_round() {
  static AttemptDelegate idle;
  return idle;
}

}  // namespace

// One attempt: start the workers, watch them until every one has exited,
// or (--inprocess-restart) until every one still running has parked; then
// resume() runs them in the next round, or dismiss() ends them.
class Attempt final : public AttemptControl,
                      public supervisor::LogPump::LineObserver,
                      private SignalTarget {
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
        delegate_(&delegate),
        inbox_(inbox),
        inprocess_(c.inprocess_restart && node.control != nullptr),
        fault_stacks_(&loop_, std::move(stack_files)) {
    uv_loop_init(&loop_);
    uv_signal_init(&loop_, &sigchld_);
    sigchld_.data = this;
    for (uv_timer_t* t : {&kill_timer_, &refill_timer_, &monitor_timer_, &park_timer_}) {
      uv_timer_init(&loop_, t);
      t->data = this;
    }
    uv_async_init(&loop_, &inbox_async_, [](uv_async_t* h) {
      auto* self = static_cast<Attempt*>(h->data);
      self->inbox_->run_pending(*self);
    });
    inbox_async_.data = this;
  }

  ~Attempt() {
    if (inbox_) inbox_->detach();
    streams_.drain_and_close();
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
  }

  // The first attempt of these workers: every one starts.
  Outcome run(std::vector<supervisor::SpawnSpec> specs, const std::vector<RankPlan>& logs,
              const fs::path& attempt_dir) {
    streams_.open_filtered_copies(config_, attempt_dir);
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
    uv_signal_start(
        &sigchld_, [](uv_signal_t* h, int) { static_cast<Attempt*>(h->data)->on_child(); },
        SIGCHLD);
    signals_.start(&loop_);
    return launch(std::move(specs), logs, std::vector<pid_t>(specs.size(), 0));
  }

  // A later round of the same workers (--inprocess-restart): the parked
  // ones continue in it with the assignment published for them; the local
  // ranks whose process is gone start afresh from `specs`.
  Outcome resume(std::vector<supervisor::SpawnSpec> specs, const std::vector<RankPlan>& logs,
                 const Assignment& a, fs::path attempt_dir, std::vector<std::string> stack_files,
                 AttemptDelegate& delegate, Inbox* inbox) {
    restart_count_ = a.restart_count;
    rank_offset_ = a.rank_offset;
    attempt_dir_ = std::move(attempt_dir);
    delegate_ = &delegate;
    inbox_ = inbox;
    fault_stacks_.renew(std::move(stack_files));
    stopping_ = agreed_stop_ = done_ = parked_ = false;
    outcome_ = Outcome::kSucceeded;
    failures_.clear();
    stop_reason_.reset();
    fault_.reset();
    rescue_.clear();
    // A worker that died while the node was between rounds starts again.
    for (const WorkerExit& e : group_.reap()) {
      log_->warn("worker local rank {} (pid {}) exited while parked ({}); it starts again",
                 e.local_rank, e.pid, e.describe());
    }
    std::vector<pid_t> running(specs.size(), 0);
    for (int lr = 0; lr < static_cast<int>(specs.size()); ++lr) {
      if (static_cast<size_t>(lr) < group_.size() && !group_.exited(lr)) {
        running[static_cast<size_t>(lr)] = group_.pid(lr);
      } else {
        node_.control->clear_slot(lr);
      }
    }
    return launch(std::move(specs), logs, running);
  }

  // Tells parked workers to exit (no round wants them) and ends the
  // attempt as run() ends one: nothing of the workers is left.
  void dismiss(const std::string& reason) {
    delegate_ = &no_round();
    inbox_ = nullptr;
    if (!group_.all_exited()) {
      log_->info("{} parked worker(s) told to exit: {}", group_.running(), reason);
      dismiss_parked(*node_.control, reason);
      // The last round's stop is over: this one needs its own kill timer.
      stopping_ = agreed_stop_ = done_ = parked_ = false;
      dismissing_ = true;
      stop(0, Outcome::kStopped, config_.shutdown_timeout);
      on_child();
      if (!done_) uv_run(&loop_, UV_RUN_DEFAULT);
    }
    teardown();
  }

  bool parked() const { return parked_; }

 private:
  // Starts every local rank whose running[] is 0, adopts the others, and
  // watches the workers until all have exited (then tears the attempt
  // down) or all running ones have parked.
  Outcome launch(std::vector<supervisor::SpawnSpec> specs, const std::vector<RankPlan>& logs,
                 const std::vector<pid_t>& running) {
    std::vector<int> child_fds;
    for (size_t r = 0; r < specs.size() && r < logs.size(); ++r) {
      if (running[r] == 0) streams_.wire(specs[r], logs[r], r, child_fds);
    }
    for (auto& s : specs) s.cgroup_fd = cgroup_.procs_fd();
    // --warm-start: interpreters that have imported torch already take the
    // workers they can; the rest start as usual.
    const auto spawn_start = std::chrono::steady_clock::now();
    std::vector<pid_t> adopt = running;
    size_t warmed = 0, resumed = 0;
    for (size_t r = 0; r < specs.size(); ++r) {
      if (adopt[r] > 0) {
        ++resumed;
      } else if (warm_) {
        adopt[r] = warm_->activate(specs[r]);
        warmed += adopt[r] > 0 ? 1 : 0;
      }
    }
    util::Status st = group_.start(specs, adopt);
    // The workers hold their ends now; ours would keep the pipes open forever.
    for (int fd : child_fds) ::close(fd);
    if (!st) throw Error("cannot start workers: " + st.message());
    if (resumed > 0) {
      log_->info("{} parked worker(s) go on in the new round; {} started (restart count {})",
                 resumed, specs.size() - resumed, restart_count_);
    } else if (warm_) {
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
    delegate_->attempt_started(*this);
    const auto every = static_cast<uint64_t>(config_.monitor_interval.count());
    uv_timer_start(
        &monitor_timer_,
        [](uv_timer_t* t) {
          static_cast<Attempt*>(t->data)->delegate_->tick(std::chrono::steady_clock::now());
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
    if (parked_) {
      // The round's inbox goes with the round; the next one brings its own.
      if (inbox_) inbox_->detach();
      inbox_ = nullptr;
      return outcome_;
    }
    teardown();
    return outcome_;
  }

  void teardown() {
    // Whatever the workers left behind dies with them: what is in their
    // process groups, what left those (setsid) but not the cgroup, and what
    // was handed to us as the subreaper when its parent died. The idle warm
    // interpreters and the death watch are ours, not theirs.
    torn_down_ = true;
    group_.signal_all(SIGKILL);
    util::Status st;
    if (st = cgroup_.kill(); !st) log_->warn("{}", st.message());
    if (st = cgroup_.remove(); !st) log_->warn("{}", st.message());
    std::vector<pid_t> helpers = warm_ ? warm_->idle_pids() : std::vector<pid_t>{};
    helpers.push_back(node_.watch->pid());
    if (const size_t n = supervisor::kill_reparented(helpers); n > 0) {
      log_->info("{} process(es) the workers left behind were killed and reaped", n);
    }
    group_.forget();
    streams_.drain_and_close();
  }

 public:
  bool torn_down() const { return torn_down_; }
  const std::vector<WorkerExit>& failures() const { return failures_; }
  const std::optional<std::string>& stop_reason() const { return stop_reason_; }
  const std::optional<health::Fault>& fault() const { return fault_; }
  const std::vector<StackResult>& stacks() const { return fault_stacks_.stacks(); }

 private:
  // LogPump::LineObserver: a line of a stream a log rule reads.
  void on_line(int tag, std::string_view line) override {
    if (!stopping_) delegate_->on_log_line(tag / 2, line);
  }

 public:
  int stop_signal() const { return signals_.stop_signal(); }

 private:
  void on_child() {
    for (const WorkerExit& e : group_.reap()) {
      rescue_.record_exit(e, node_.control, *node_.events, {restart_count_, rank_offset_});
      if (e.failed() && !stopping_) {
        log_->warn("worker local rank {} (pid {}) failed: {}", e.local_rank, e.pid, e.describe());
        failures_.push_back(e);
        stop_after_failure(Outcome::kFailed, config_.shutdown_timeout);
        delegate_->on_failure(e);
      } else if (e.failed() && outcome_ == Outcome::kFailed) {
        // Survivors we stopped are listed too (exitcode -15), as torchrun
        // lists them; the root cause is still the earliest failure.
        failures_.push_back(e);
      }
    }
    if (group_.all_exited()) {
      finish();
    } else {
      check_parked();
    }
  }

  // --inprocess-restart: the attempt ends parked once every worker still
  // running has parked, and one has.
  void check_parked() {
    if (!inprocess_ || !stopping_ || done_ || dismissing_) return;
    size_t waiting = 0;
    for (int lr = 0; lr < static_cast<int>(group_.size()); ++lr) {
      if (group_.exited(lr)) continue;
      if (!agent::parked(*node_.control, lr, group_.pid(lr))) return;
      ++waiting;
    }
    if (waiting == 0) return;
    log_->info("{} worker(s) parked, waiting for the next round", waiting);
    parked_ = true;
    finish();
  }

  // SignalTarget: what the handled signals do (handled_signals.hpp).
  bool node_leaves(int sig) override { return delegate_->on_signal(sig); }
  bool stopping() const override { return stopping_; }
  bool stopping_at_agreed_step() const override { return stopping_ && agreed_stop_; }
  bool stopped_by_signal() const override { return outcome_ == Outcome::kSignaled; }
  void forward(int sig) override { group_.signal_all(sig); }
  void kill_workers() override { group_.signal_all(SIGKILL); }
  void stop_with(int sig) override {
    // A stop already under way (a failure, a round that ended) turns into
    // this: the run now ends with the signal.
    if (stopping_) {
      outcome_ = Outcome::kSignaled;
      group_.signal_all(sig);
    }
    stop(sig, Outcome::kSignaled, config_.shutdown_timeout);
    kill_stopped();
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
    const auto targets = fault_stacks_.targets(group_, node_.control);
    const auto path = node_.base.find("PATH");
    // Once the workers' faulthandlers have written (or the grace passed),
    // they stop as after a failure.
    fault_stacks_.capture(targets, path == node_.base.end() ? "" : path->second, [this] {
      if (!stopping_) stop_after_failure(Outcome::kFailed, config_.shutdown_timeout);
    });
    write_fault_record(attempt_dir_ / "fault.json", fault, rank_offset_, fault_stacks_.stacks(),
                       fault_stacks_.files());
    record_health_fault(*node_.events, {restart_count_, rank_offset_}, fault,
                        (attempt_dir_ / "fault.json").string());
    delegate_->on_fault(fault);
  }

  void request_stop(const std::string& reason) override {
    if (stopping_ || done_) return;
    stop_reason_ = reason;
    log_->info("stopping the workers: {}", reason);
    if (delegate_->tell_stop(group_)) {
      agreed_stop_ = true;
      stop(0, Outcome::kStopped, config_.graceful_shutdown_timeout);
      kill_stopped();  // it would reach no agreed step, nor park
    } else {
      stop_after_failure(Outcome::kStopped, config_.graceful_shutdown_timeout);
    }
  }

 private:
  // --shutdown-signal to every worker after a failure; those that can save a
  // rescue get the rescue window first (AttemptHooks::rescue).
  void stop_after_failure(Outcome why, std::chrono::milliseconds grace) {
    const std::chrono::milliseconds window = delegate_->rescue_window();
    rescue_.clear();
    for (int lr = 0; lr < static_cast<int>(group_.size()); ++lr) {
      // They park once their collectives are released (the SDK's releaser).
      if (inprocess_ && !group_.exited(lr) && reforms(*node_.control, lr, group_.pid(lr))) continue;
      if (window.count() > 0 && !group_.exited(lr) && delegate_->rescue(lr) != Rescue::kNone) {
        rescue_.add(static_cast<int>(lr));
      } else {
        group_.signal_group(lr, config_.shutdown_signal);
      }
    }
    stop(0, why, grace + window);
    kill_stopped();
    rescue_.open(window, *delegate_);
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
              "SIGKILL{}",
              self->kill_after_.count(), self->parking() ? " to those not parked" : "");
          self->kill_unparked();
        },
        static_cast<uint64_t>(grace.count()), 0);
    if (parking()) {
      uv_timer_start(
          &park_timer_, [](uv_timer_t* t) { static_cast<Attempt*>(t->data)->check_parked(); },
          kParkPollMs, kParkPollMs);
    }
  }

  bool parking() const { return inprocess_ && !dismissing_; }

  // At the stop's grace: every worker, or, while workers may park, those
  // that have not (they start again in the next round).
  void kill_unparked() {
    for (int lr = 0; lr < static_cast<int>(group_.size()); ++lr) {
      if (parking() && !group_.exited(lr) && agent::parked(*node_.control, lr, group_.pid(lr))) {
        continue;
      }
      group_.signal_group(lr, SIGKILL);
    }
  }

  void finish() {
    done_ = true;
    if (!stopping_) outcome_ = Outcome::kSucceeded;
    uv_timer_stop(&kill_timer_);
    signals_.cancel();
    uv_timer_stop(&refill_timer_);
    rescue_.cancel();
    uv_timer_stop(&monitor_timer_);
    uv_timer_stop(&park_timer_);
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
  AttemptDelegate* delegate_;  // the round's; no_round() once dismissed
  Inbox* inbox_;               // may be null
  uv_loop_t loop_{};
  uv_async_t inbox_async_{};
  std::chrono::milliseconds kill_after_{0};
  std::optional<std::string> stop_reason_;
  uv_signal_t sigchld_{};
  uv_timer_t kill_timer_{};
  uv_timer_t refill_timer_{};   // --warm-start: interpreters for the next attempt
  uv_timer_t monitor_timer_{};  // --monitor-interval: the delegate's tick
  uv_timer_t park_timer_{};     // --inprocess-restart: whether the workers parked
  const bool inprocess_;        // --inprocess-restart with a control block
  std::optional<health::Fault> fault_;
  FaultStacks fault_stacks_;  // the fault's stacks, and the wait for them
  RescueWindow rescue_{&loop_, group_, config_.shutdown_signal};  // after a failure
  HandledSignals signals_{config_.signals_to_handle, config_.graceful_shutdown_timeout, *this};
  bool stopping_ = false;
  bool agreed_stop_ = false;  // stopping_ at an agreed step (request_stop, tell_stop true)
  bool done_ = false;
  bool parked_ = false;      // done_, with every running worker parked
  bool dismissing_ = false;  // parked workers told to exit
  bool torn_down_ = false;
  Outcome outcome_ = Outcome::kSucceeded;
  std::vector<WorkerExit> failures_;
  WorkerStreams streams_{&loop_, this};
  std::shared_ptr<spdlog::logger> log_ = util::logger("agent");
};

ParkedWorkers::ParkedWorkers(std::unique_ptr<Attempt> attempt) : attempt_(std::move(attempt)) {}

ParkedWorkers::~ParkedWorkers() {
  if (attempt_ && !attempt_->torn_down()) attempt_->dismiss("no round wants this node's workers");
}

size_t ParkedWorkers::count() const {
  return attempt_->workers().running();
}

namespace {

void collect(const Attempt& attempt, AttemptResult& result) {
  result.failures = attempt.failures();
  result.stop_signal = attempt.stop_signal();
  result.stop_reason = attempt.stop_reason();
  result.fault = attempt.fault();
  result.stacks = attempt.stacks();
}

}  // namespace

AttemptResult run_attempt(const AgentConfig& config, const NodeContext& node, const Assignment& a,
                          int attempt_index, AttemptDelegate& delegate, Inbox* inbox,
                          std::shared_ptr<ParkedWorkers> parked) {
  auto log = util::logger("agent");
  AttemptPlan plan = plan_attempt(config, node, a, attempt_index);
  AttemptResult result;
  result.error_files = plan.error_files;
  result.stack_files = plan.stack_files;
  const AttemptPlace place{a.restart_count, a.rank_offset};
  if (parked && node.control) {
    std::vector<control::RankEnv> changed;
    for (const auto& env : plan.env) changed.push_back(control::changed_from(node.base, env));
    if (auto st = publish_reform(*node.control, a.generation, a.world_size, changed); !st) {
      log->error("{}: the parked workers are dismissed, and every worker starts afresh",
                 st.message());
      parked.reset();
      node.control->reset(a.generation);
    }
  }
  if (parked && node.control) {
    // No hooks around a resumed attempt: its workers never stopped.
    Attempt& attempt = parked->attempt();
    result.outcome = attempt.resume(std::move(plan.specs), plan.logs, a, plan.dir, plan.stack_files,
                                    delegate, inbox);
    collect(attempt, result);
    if (attempt.parked()) result.parked = std::move(parked);
    record_workers_end(*node.events, place, result);
    return result;
  }
  if (!config.pre_train_command.empty() &&
      run_hook("pre-train", config.pre_train_command, node.base) != 0) {
    log->error("pre-train script failed: the workers of attempt {} do not start", attempt_index);
  } else {
    auto attempt = std::make_unique<Attempt>(config, node, a.restart_count, plan.dir,
                                             plan.stack_files, a.rank_offset, delegate, inbox);
    result.outcome = attempt->run(std::move(plan.specs), plan.logs, plan.dir);
    collect(*attempt, result);
    if (attempt->parked()) result.parked = std::make_shared<ParkedWorkers>(std::move(attempt));
    record_workers_end(*node.events, place, result);
  }
  // After the workers exit: parked ones have not.
  if (!config.post_train_command.empty() && !result.parked) {
    run_hook("post-train", config.post_train_command, node.base);
  }
  return result;
}

}  // namespace elasticrun::agent
