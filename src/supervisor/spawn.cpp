#include "supervisor/spawn.hpp"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <utility>

#include "util/cpu_list.hpp"

#if defined(__SANITIZE_THREAD__)
#define ELASTICRUN_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define ELASTICRUN_TSAN 1
#endif
#endif

// Where the child can run on the parent's memory (see ChildPlan): x86-64,
// whose raw system calls are written out below, and not under
// ThreadSanitizer, whose clone() interceptor treats every clone as a fork.
#if defined(__x86_64__) && !defined(ELASTICRUN_TSAN)
#define ELASTICRUN_SHARED_MEMORY_CHILD 1
#else
#define ELASTICRUN_SHARED_MEMORY_CHILD 0
#endif

// Code that runs in the child before exec: sanitizers must not instrument it
// (their bookkeeping lives in memory the parent is using at the same time),
// and no stack-protector check may call __stack_chk_fail, a libc function,
// on a stack that is not a thread's.
#define ELASTICRUN_CHILD_CODE \
  __attribute__((no_sanitize("address", "undefined"), no_stack_protector))

namespace elasticrun::supervisor {

// Everything the child needs between clone and exec, prepared by the parent.
//
// A forked child gets a copy of the parent's address space, and the exec
// that follows throws the copy away: for a launcher that starts eight
// workers at once, copying page tables and then taking copy-on-write faults
// in both processes was about half of its own CPU time in a restart. So on x86-64
// the child is cloned with CLONE_VM and runs on the parent's memory until
// its exec, on a stack of its own, while the parent goes on to the next
// worker (posix_spawn's CLONE_VFORK would stop the parent until the child
// runs, which on a busy node costs a scheduling delay per worker). Sharing
// the memory rules out more than a fork does: the child calls no library
// function, only the system calls below, which return errors instead of
// setting errno (the parent thread's errno, here). It reads this plan, writes
// only its stack and script_argv, and the parent frees neither before the
// child has exec'd or exited (PendingSpawn's report pipe tells).
struct ChildPlan {
  std::vector<std::string> strings;  // the copies that argv, envp and the rest point into
  std::vector<char*> argv;
  std::vector<char*> envp;
  // execvpe's search, done by the parent: the paths to try in order.
  std::vector<char*> candidates;
  bool searched = false;  // candidates come from $PATH (execvpe's error rules apply)
  int exec_error = 0;     // when set, the exec step fails with it at once
  // {"/bin/sh", <candidate>, argv[1...], nullptr}: execvpe's fallback for a
  // file the kernel cannot execute (a script without "#!").
  std::vector<char*> script_argv;
  // The arrays above as the child sees them: it calls no library code, not
  // even std::vector's accessors.
  char** child_argv = nullptr;
  char** child_envp = nullptr;
  char** child_candidates = nullptr;
  char** child_script_argv = nullptr;
  const char* cwd = nullptr;
  int fds[3] = {-1, -1, -1};
  int extra_fd = -1;  // becomes the child's fd 3
  int report_fd = -1;
  int cgroup_fd = -1;  // cgroup.procs to write "0" to, or -1
  int parent_death_signal = 0;
  // sched_setaffinity's mask: bit c of word c / 64 is CPU c. Empty: no call.
  std::vector<unsigned long> affinity;
  const unsigned long* child_affinity = nullptr;
  long affinity_bytes = 0;
  pid_t parent = -1;
  long max_fd = 65536;
  char* stack = nullptr;
  size_t stack_size = 0;

  ChildPlan() = default;
  ChildPlan(const ChildPlan&) = delete;
  ChildPlan& operator=(const ChildPlan&) = delete;
  ~ChildPlan() {
    if (stack) ::munmap(stack, stack_size);
  }
};

void PendingSpawn::PlanDeleter::operator()(ChildPlan* plan) const {
  delete plan;
}

namespace {

// Between clone and exec the child makes system calls and nothing else (see
// ChildPlan). Errors go to the parent as (step, errno).
struct ChildError {
  int step;
  int err;
};

enum Step : int {
  kCgroup = 1,
  kSetpgid,
  kSignals,
  kDeathSignal,
  kOrphaned,
  kAffinity,
  kDup,
  kChdir,
  kExec
};

const char* step_name(int step) {
  switch (step) {
    case kCgroup:
      return "joining its cgroup";
    case kSetpgid:
      return "setsid";
    case kSignals:
      return "resetting signals";
    case kDeathSignal:
      return "prctl(PR_SET_PDEATHSIG)";
    case kOrphaned:
      return "checking the parent";
    case kAffinity:
      return "sched_setaffinity";
    case kDup:
      return "redirecting standard streams";
    case kChdir:
      return "chdir";
    default:
      return "exec";
  }
}

// A system call that returns -errno on failure and touches no memory of
// the process but its arguments.
#if ELASTICRUN_SHARED_MEMORY_CHILD
[[gnu::always_inline]] ELASTICRUN_CHILD_CODE inline long sys(long n, long a = 0, long b = 0,
                                                             long c = 0, long d = 0) {
  long ret;
  register long r10 __asm__("r10") = d;
  __asm__ volatile("syscall"
                   : "=a"(ret)
                   : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10)
                   : "rcx", "r11", "memory");
  return ret;
}
#else
// With fork the child has its own errno, so libc's wrapper does.
ELASTICRUN_CHILD_CODE long sys(long n, long a = 0, long b = 0, long c = 0, long d = 0) {
  const long ret = ::syscall(n, a, b, c, d);
  return ret < 0 ? -errno : ret;
}
#endif

[[noreturn]] ELASTICRUN_CHILD_CODE void child_fail(const ChildPlan& p, int step, long err) {
  ChildError e{step, static_cast<int>(-err)};
  sys(SYS_write, p.report_fd, reinterpret_cast<long>(&e), sizeof(e));
  for (;;) sys(SYS_exit_group, 127);
}

ELASTICRUN_CHILD_CODE void close_other_fds(const ChildPlan& p) {
  // close_range(2) is Linux 5.9+; fall back to a loop on older kernels.
  // The report pipe is above the first descriptor kept open (start_spawn).
  const unsigned first = p.extra_fd >= 0 ? 4 : 3;
  const unsigned keep = static_cast<unsigned>(p.report_fd);
  if (keep > first) sys(SYS_close_range, first, keep - 1, 0);
  if (sys(SYS_close_range, keep + 1, ~0u, 0) == 0) return;
  for (long fd = first; fd < p.max_fd; ++fd) {
    if (fd != static_cast<long>(keep)) sys(SYS_close, fd);
  }
}

// execvpe(3), minus its allocation and errno: the parent has made the list
// of paths; the rules for which errors end the search are glibc's.
[[noreturn]] ELASTICRUN_CHILD_CODE void child_exec(ChildPlan& p) {
  if (p.exec_error != 0) child_fail(p, kExec, -p.exec_error);
  long err = -ENOENT;
  bool eacces = false;
  for (char** path = p.child_candidates; *path != nullptr; ++path) {
    err = sys(SYS_execve, reinterpret_cast<long>(*path), reinterpret_cast<long>(p.child_argv),
              reinterpret_cast<long>(p.child_envp));
    if (err == -ENOEXEC) {
      p.child_script_argv[1] = *path;
      err = sys(SYS_execve, reinterpret_cast<long>(p.child_script_argv[0]),
                reinterpret_cast<long>(p.child_script_argv), reinterpret_cast<long>(p.child_envp));
    }
    if (!p.searched) break;
    if (err == -EACCES) {
      eacces = true;
    } else if (err != -ENOENT && err != -ESTALE && err != -ENOTDIR && err != -ENODEV &&
               err != -ETIMEDOUT) {
      child_fail(p, kExec, err);
    }
  }
  child_fail(p, kExec, eacces ? -EACCES : err);
}

// The child, from clone (or fork) to exec. Never returns.
ELASTICRUN_CHILD_CODE int child_main(void* arg) {
  ChildPlan& p = *static_cast<ChildPlan*>(arg);
  // Into the attempt's cgroup before anything else: whatever the program
  // forks from here on, setsid or not, starts in it and stays there.
  if (p.cgroup_fd >= 0) {
    static constexpr char kSelf[] = "0";
    if (long r = sys(SYS_write, p.cgroup_fd, reinterpret_cast<long>(kSelf), 1); r < 0) {
      child_fail(p, kCgroup, r);
    }
  }
  // A session of its own, as torchrun's start_new_session: its own process
  // group (pgid = pid) and no controlling terminal, so a Ctrl-C reaches
  // the agent only and the agent decides what the workers get.
  if (long r = sys(SYS_setsid); r < 0) child_fail(p, kSetpgid, r);
  // The kernel's struct sigaction, all zero: SIG_DFL, no flags, empty mask,
  // whatever the architecture's layout. The kernel's signal set is
  // (NSIG - 1) bits; glibc's NSIG counts signal 0. Static, so that no
  // compiler fills it with a call to memset (clang does at -O0).
  static constexpr unsigned long zeros[8] = {};
  constexpr long kSigsetBytes = (NSIG - 1) / 8;
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig == SIGKILL || sig == SIGSTOP) continue;
    sys(SYS_rt_sigaction, sig, reinterpret_cast<long>(zeros), 0, kSigsetBytes);
  }
  if (long r = sys(SYS_rt_sigprocmask, SIG_SETMASK, reinterpret_cast<long>(zeros), 0, kSigsetBytes);
      r < 0) {
    child_fail(p, kSignals, r);
  }
  if (p.parent_death_signal != 0) {
    if (long r = sys(SYS_prctl, PR_SET_PDEATHSIG, p.parent_death_signal); r < 0) {
      child_fail(p, kDeathSignal, r);
    }
    // The parent may have died between clone and prctl: then nobody will
    // signal us, so act as if it had.
    if (sys(SYS_getppid) != p.parent) child_fail(p, kOrphaned, -ESRCH);
  }
  // pid 0: this thread, the only one; the program's threads inherit it.
  if (p.affinity_bytes != 0) {
    if (long r = sys(SYS_sched_setaffinity, 0, p.affinity_bytes,
                     reinterpret_cast<long>(p.child_affinity));
        r < 0) {
      child_fail(p, kAffinity, r);
    }
  }
  for (int target = 0; target < 3; ++target) {
    const int fd = p.fds[target];
    if (fd < 0 || fd == target) continue;
    if (long r = sys(SYS_dup3, fd, target, 0); r < 0) child_fail(p, kDup, r);
  }
  if (p.extra_fd >= 0) {
    if (long r = sys(SYS_dup3, p.extra_fd, 3, 0); r < 0) child_fail(p, kDup, r);
  }
  close_other_fds(p);
  if (p.cwd != nullptr) {
    if (long r = sys(SYS_chdir, reinterpret_cast<long>(p.cwd)); r < 0) child_fail(p, kChdir, r);
  }
  child_exec(p);
}

// glibc's execvpe without a '/' in the name: each entry of $PATH (or
// confstr's "/bin:/usr/bin"), an empty entry meaning the current directory.
void plan_search(ChildPlan& p, const std::string& file, std::vector<std::string>& paths) {
  if (file.empty()) {
    p.exec_error = ENOENT;
    return;
  }
  if (file.find('/') != std::string::npos) {
    paths.push_back(file);
    return;
  }
  // No length check of file: glibc's cannot fire (it measures the name with
  // strnlen capped at NAME_MAX), and a longer name gets ENAMETOOLONG from
  // the kernel, which ends the search as in execvpe.
  p.searched = true;
  const char* env_path = std::getenv("PATH");
  const std::string_view path = env_path ? env_path : "/bin:/usr/bin";
  const size_t path_len = std::min(path.size(), static_cast<size_t>(PATH_MAX - 1)) + 1;
  for (size_t start = 0;;) {
    size_t end = path.find(':', start);
    if (end == std::string_view::npos) end = path.size();
    const std::string_view dir = path.substr(start, end - start);
    if (dir.size() < path_len) {
      paths.push_back(dir.empty() ? file : std::string(dir) + "/" + file);
    }
    if (end == path.size()) break;
    start = end + 1;
  }
}

std::unique_ptr<ChildPlan, PendingSpawn::PlanDeleter> make_plan(const SpawnSpec& spec) {
  std::unique_ptr<ChildPlan, PendingSpawn::PlanDeleter> p(new ChildPlan);
  std::vector<std::string> paths;
  plan_search(*p, spec.argv[0], paths);
  // Everything the child reads is copied: the caller may let spec go before
  // the child has exec'd. Pointers are taken once no string moves any more.
  auto& s = p->strings;
  s.reserve(spec.argv.size() + spec.env.size() + paths.size() + 2);
  s.insert(s.end(), spec.argv.begin(), spec.argv.end());
  s.insert(s.end(), spec.env.begin(), spec.env.end());
  s.insert(s.end(), paths.begin(), paths.end());
  s.emplace_back("/bin/sh");
  s.push_back(spec.cwd);
  size_t i = 0;
  for (size_t n = 0; n < spec.argv.size(); ++n) p->argv.push_back(s[i++].data());
  p->argv.push_back(nullptr);
  for (size_t n = 0; n < spec.env.size(); ++n) p->envp.push_back(s[i++].data());
  p->envp.push_back(nullptr);
  for (size_t n = 0; n < paths.size(); ++n) p->candidates.push_back(s[i++].data());
  p->candidates.push_back(nullptr);
  p->script_argv.push_back(s[i++].data());
  p->script_argv.push_back(nullptr);  // the candidate, filled in by the child
  p->script_argv.insert(p->script_argv.end(), p->argv.begin() + 1, p->argv.end());
  if (!spec.cwd.empty()) p->cwd = s[i].data();
  p->child_argv = p->argv.data();
  p->child_envp = p->envp.data();
  p->child_candidates = p->candidates.data();
  p->child_script_argv = p->script_argv.data();
  p->fds[0] = spec.stdin_fd;
  p->fds[1] = spec.stdout_fd;
  p->fds[2] = spec.stderr_fd;
  p->extra_fd = spec.extra_fd;
  p->cgroup_fd = spec.cgroup_fd;
  p->parent_death_signal = spec.parent_death_signal;
  if (!spec.cpu_affinity.empty()) {
    // Just long enough for the highest CPU: the kernel zero-fills a shorter
    // mask than its own and ignores the excess of a longer one.
    constexpr size_t kBits = 8 * sizeof(unsigned long);
    const int highest = *std::max_element(spec.cpu_affinity.begin(), spec.cpu_affinity.end());
    p->affinity.assign(static_cast<size_t>(highest) / kBits + 1, 0);
    for (int cpu : spec.cpu_affinity) {
      const auto c = static_cast<size_t>(cpu);
      p->affinity[c / kBits] |= 1UL << (c % kBits);
    }
    p->child_affinity = p->affinity.data();
    p->affinity_bytes = static_cast<long>(p->affinity.size() * sizeof(unsigned long));
  }
  p->parent = ::getpid();
  const long open_max = ::sysconf(_SC_OPEN_MAX);
  if (open_max > 0 && open_max < p->max_fd) p->max_fd = open_max;
  return p;
}

// Starts the child on plan; returns its pid or -errno.
pid_t start_child(ChildPlan& plan) {
#if ELASTICRUN_SHARED_MEMORY_CHILD
  // The child's stack, with an unmapped page below it so that an overflow
  // faults instead of writing over the parent's memory.
  constexpr size_t kStack = 64 * 1024;
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  void* base =
      ::mmap(nullptr, kStack + page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
  if (base == MAP_FAILED) return -errno;
  plan.stack = static_cast<char*>(base);
  plan.stack_size = kStack + page;
  if (::mprotect(plan.stack + page, kStack, PROT_READ | PROT_WRITE) != 0) return -errno;
  const pid_t pid = ::clone(child_main, plan.stack + plan.stack_size, CLONE_VM | SIGCHLD, &plan);
  return pid < 0 ? -errno : pid;
#else
  const pid_t pid = ::fork();
  if (pid == 0) child_main(&plan);
  return pid < 0 ? -errno : pid;
#endif
}

}  // namespace

PendingSpawn::PendingSpawn(PendingSpawn&& other) noexcept
    : pid(other.pid),
      report_fd(std::exchange(other.report_fd, -1)),
      program(std::move(other.program)),
      plan(std::move(other.plan)) {}

PendingSpawn& PendingSpawn::operator=(PendingSpawn&& other) noexcept {
  if (this != &other) {
    wait_for_exec();
    pid = other.pid;
    report_fd = std::exchange(other.report_fd, -1);
    program = std::move(other.program);
    plan = std::move(other.plan);
  }
  return *this;
}

PendingSpawn::~PendingSpawn() {
  wait_for_exec();
}

void PendingSpawn::wait_for_exec() {
  if (report_fd < 0) return;
  // Abandoned before finish_spawn: the child may still be running on the
  // plan. The pipe reaches EOF only once the child has left our memory: its
  // exec closes the write end after switching to the new program's, and an
  // exit closes it after releasing ours.
  char ignored[sizeof(ChildError)];
  for (;;) {
    const ssize_t n = ::read(report_fd, ignored, sizeof(ignored));
    if (n == 0 || (n < 0 && errno != EINTR)) break;
  }
  ::close(report_fd);
  report_fd = -1;
}

util::Result<pid_t> spawn(const SpawnSpec& spec) {
  auto pending = start_spawn(spec);
  if (!pending.is_ok()) return pending.status();
  return finish_spawn(pending.value());
}

util::Result<PendingSpawn> start_spawn(const SpawnSpec& spec) {
  if (spec.argv.empty()) return util::Status(EINVAL, "spawn: empty command");
  // Below 4 it would be overwritten by the standard streams' redirects or be
  // fd 3 itself, which dup3 cannot clear close-on-exec on.
  if (spec.extra_fd >= 0 && spec.extra_fd < 4) {
    return util::Status(EINVAL, "spawn: the descriptor for fd 3 must be above 3");
  }
  for (int cpu : spec.cpu_affinity) {
    if (cpu < 0 || cpu >= util::kMaxCpu) {
      return util::Status(EINVAL, "spawn: CPU " + std::to_string(cpu) + " out of range");
    }
  }
  auto plan = make_plan(spec);
  int report[2];
  if (::pipe2(report, O_CLOEXEC) != 0) return util::Status(errno, "spawn: pipe2");
  // An agent started with 0, 1 or 2 closed gets them back here. The child's
  // redirects would then replace the write end: the parent would read EOF
  // as an exec, lose the error, and free the plan the child still runs on.
  // With a descriptor for the child's fd 3, fd 3 is taken as well.
  const int lowest = spec.extra_fd >= 0 ? 4 : 3;
  if (report[1] < lowest) {
    const int moved = ::fcntl(report[1], F_DUPFD_CLOEXEC, lowest);
    const int err = errno;
    ::close(report[1]);
    if (moved < 0) {
      ::close(report[0]);
      return util::Status(err, "spawn: fcntl(F_DUPFD_CLOEXEC)");
    }
    report[1] = moved;
  }
  plan->report_fd = report[1];

  // Block every signal across the clone so that no handler of ours runs in
  // the child before it resets dispositions, and the parent's process table
  // update below is not interrupted by SIGCHLD handling. glibc keeps its
  // SIGCANCEL and SIGSETXID unblocked whatever we ask; their handlers return
  // at once for a signal the process did not send itself, which the child
  // never does, and the child resets them with the rest.
  sigset_t all, old;
  ::sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &old);
  const pid_t pid = start_child(*plan);
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  ::close(report[1]);
  if (pid < 0) {
    ::close(report[0]);
    return util::Status(static_cast<int>(-pid), "spawn " + spec.argv[0] + ": fork");
  }
  // No setpgid from this side: it would make the child a group leader and
  // its setsid() fail. The group exists once finish_spawn() returns.
  PendingSpawn pending;
  pending.pid = pid;
  pending.report_fd = report[0];
  pending.program = spec.argv[0];
  pending.plan = std::move(plan);
  return pending;
}

util::Result<pid_t> finish_spawn(PendingSpawn& pending) {
  const pid_t pid = pending.pid;
  ChildError e{};
  ssize_t n;
  do {
    n = ::read(pending.report_fd, &e, sizeof(e));
  } while (n < 0 && errno == EINTR);
  ::close(pending.report_fd);
  pending.report_fd = -1;
  if (n == static_cast<ssize_t>(sizeof(e))) {
    // The child is exiting with 127 right after its report: collect it here so
    // that a failed spawn leaves no zombie for the caller to account for, and
    // so that it is off its stack before the plan goes.
    while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
    pending.plan.reset();
    return util::Status(e.err, "spawn " + pending.program + ": " + step_name(e.step));
  }
  // EOF: the child has exec'd (the write end closes once it runs the new
  // program's memory) or died; either way it no longer reads the plan.
  pending.plan.reset();
  return pid;
}

util::Status become_subreaper() {
  if (::prctl(PR_SET_CHILD_SUBREAPER, 1) != 0)
    return util::Status(errno, "prctl(PR_SET_CHILD_SUBREAPER)");
  return util::Status::ok();
}

}  // namespace elasticrun::supervisor
