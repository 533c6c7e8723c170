// --warm-start: Python worker interpreters started ahead of time.
//
// A restart of a PyTorch job spends most of its time before the training
// script's first line: the interpreter starts and imports torch (seconds;
// most of a restart on a loaded node). The pool keeps one interpreter per
// local rank that has done that already, running src/agent/warm_bootstrap.py
// and waiting on a Unix socket (its fd 3). Starting a worker then hands the
// script's argv, environment, working directory and log descriptors to an
// idle interpreter, which runs the script as `python -u` would have; the
// pool starts the next ones in the background for the restart after.
//
// With --numa-binding each interpreter starts with the CPU affinity of the
// worker it is for, before it imports anything: OpenMP (libgomp) sizes its
// thread pool, and with it torch.get_num_threads(), by the CPUs a process may
// use when it loads, so an interpreter bound only when it takes its worker
// would run that worker with the whole machine's thread count. A worker is
// handed only to an interpreter of its own affinity.
//
// Lifetimes: an idle interpreter belongs to the pool; once activated it is a
// worker like any other (the attempt's WorkerGroup adopts its pid). The pool
// holds a pidfd of each idle one, so killing and reaping it never touches a
// recycled pid (an attempt's reap may already have collected one that died).
// Idle interpreters die with the agent (parent-death signal) and are killed
// when the pool goes.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "supervisor/spawn.hpp"
#include "util/logging.hpp"

namespace elasticrun::agent {

struct WarmStartConfig {
  bool enabled = false;
  std::string python;  // the interpreter, as the workers' argv[0]
  // How the worker's command runs the script: "script" (python -u FILE),
  // "module" (python -u -m NAME) or "run_path" (--run-path).
  std::string mode = "script";
  // Index in a worker's argv where its sys.argv begins (the file or module).
  size_t argv_offset = 2;
  std::vector<std::string> imports = {"torch", "torch._dynamo"};
};

class WarmPool {
 public:
  // env: the interpreters' environment while they import (the workers' base
  // environment; each activation replaces it with the worker's own).
  // cpu_sets: empty, or the CPU affinity of each of the `size` interpreters
  // to keep (--numa-binding: local rank i's set at i).
  WarmPool(WarmStartConfig config, std::map<std::string, std::string> env, int size,
           std::vector<std::vector<int>> cpu_sets = {});
  ~WarmPool();
  WarmPool(const WarmPool&) = delete;
  WarmPool& operator=(const WarmPool&) = delete;

  // Starts interpreters until `size` are idle, one for each CPU set. A
  // failure to start one turns the pool off (workers then start cold) with
  // one warning.
  void refill();

  // Hands spec (a worker's command, environment, cwd and stdout/stderr
  // descriptors) to an idle interpreter and returns its pid: the worker.
  // With spec.cgroup_fd, the interpreter joins that cgroup before it learns
  // its script, so nothing the script starts is outside it.
  // 0 when there is none of spec's CPU affinity, or spec is not a Python
  // worker of this job, or every such idle interpreter had died: start spec
  // as usual then.
  pid_t activate(const supervisor::SpawnSpec& spec);

  // A full-job restart: the idle interpreters are killed and fresh ones
  // started, so that nothing an earlier attempt's interpreters held
  // carries over.
  void renew();

  // Waits until every idle interpreter has finished its imports (or died:
  // it is dropped), at most `timeout`; returns how many are ready. A node
  // joining a running job waits for this first, so that the job does not
  // stop for it until its workers can start at once.
  size_t wait_ready(std::chrono::milliseconds timeout);

  size_t idle() const { return idle_.size(); }
  // The idle interpreters: children of the agent that are not workers (yet).
  std::vector<pid_t> idle_pids() const;

 private:
  struct Interpreter {
    pid_t pid = -1;
    int pidfd = -1;
    int channel = -1;
    bool ready = false;     // it wrote "R": its imports are done
    std::vector<int> cpus;  // its CPU affinity; empty: the agent's
  };
  bool start_one(const std::vector<int>& cpus);
  bool send(const Interpreter& w, const supervisor::SpawnSpec& spec);
  void discard(Interpreter& w);

  WarmStartConfig config_;
  std::vector<std::string> envp_;
  std::vector<std::vector<int>> slots_;  // the CPU set of each interpreter to keep
  bool enabled_;
  std::deque<Interpreter> idle_;
  std::shared_ptr<spdlog::logger> log_ = util::logger("agent");
};

// The bootstrap the interpreters run (src/agent/warm_bootstrap.py).
const std::string& warm_bootstrap_source();

}  // namespace elasticrun::agent
