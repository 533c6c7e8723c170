// The worker SDK's calls (include/elasticrun/worker.hpp) over this process's
// session: the mapped control block, the last step, whether SIGUSR1 came.
// Behaviour follows python/elasticrun/__init__.py call for call.
#include "elasticrun/worker.hpp"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "control/control_block.hpp"
#include "sdk/session.hpp"
#include "sdk/testing.hpp"

namespace elasticrun::sdk {

namespace {

using control::ControlBlock;

constexpr const char* kControlFileEnv = "ELASTICRUN_CONTROL_FILE";
constexpr const char* kCoordinationEnv = "HYPERPOD_SIGNAL_COORDINATION";

// Written by the signal handler, read by anyone: lock-free by requirement.
std::atomic<bool> g_signalled{false};
static_assert(std::atomic<bool>::is_always_lock_free);
// The SIGUSR1 disposition before attach(); the handler calls it too, so a
// program's own handler keeps working. Written before our handler is
// installed, read only by it.
struct sigaction g_previous {};

extern "C" void on_sigusr1(int sig, siginfo_t* info, void* context) {
  // Only a flag: the training loop acts on it at a step boundary.
  g_signalled.store(true, std::memory_order_relaxed);
  if (g_previous.sa_flags & SA_SIGINFO) {
    if (g_previous.sa_sigaction != nullptr) g_previous.sa_sigaction(sig, info, context);
  } else if (g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != SIG_IGN &&
             g_previous.sa_handler != nullptr) {
    g_previous.sa_handler(sig);
  }
}

bool our_handler(const struct sigaction& action) {
  return (action.sa_flags & SA_SIGINFO) && action.sa_sigaction == &on_sigusr1;
}

void install_handler() {
  struct sigaction current {};
  if (::sigaction(SIGUSR1, nullptr, &current) != 0) {
    throw Error(std::string("sigaction(SIGUSR1): ") + std::strerror(errno));
  }
  // A second session in one process (tests) finds our own handler: chaining
  // to it would recurse.
  if (our_handler(current)) return;
  g_previous = current;
  struct sigaction mine {};
  mine.sa_sigaction = &on_sigusr1;
  mine.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&mine.sa_mask);
  if (::sigaction(SIGUSR1, &mine, nullptr) != 0) {
    throw Error(std::string("sigaction(SIGUSR1): ") + std::strerror(errno));
  }
}

std::optional<std::string> env_string(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

// int(os.environ[name]) as the Python SDK reads it: surrounding blanks
// allowed, anything else that is not an integer refused.
std::optional<int> env_int(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr) return std::nullopt;
  std::string_view s(value);
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\n'))
    s.remove_suffix(1);
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  int out = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size()) {
    throw ConfigError(std::string(name) + "=" + value + " is not an integer");
  }
  return out;
}

class Session {
 public:
  Session()
      : control_file_(env_string(kControlFileEnv)),
        local_rank_(env_int("LOCAL_RANK").value_or(0)) {}

  // The block, mapped on first use; nullptr without a control file.
  ControlBlock* block() {
    if (!block_ && control_file_) {
      auto opened = ControlBlock::open(*control_file_);
      if (!opened) throw Error("elasticrun worker SDK: " + opened.status().message());
      if (local_rank_ < 0 || local_rank_ >= opened.value().num_slots()) {
        throw ConfigError("control block " + *control_file_ + ": slot " +
                          std::to_string(local_rank_) + " of " +
                          std::to_string(opened.value().num_slots()) + " (is LOCAL_RANK right?)");
      }
      block_.emplace(std::move(opened).value());
      pid_ = static_cast<uint32_t>(::getpid());
    }
    return block_ ? &*block_ : nullptr;
  }

  // The header's event; while its seqlock has not moved since the last
  // read, the cached copy (one 8-byte load, no copy of the reason).
  const ControlBlock::Event& event() {
    const uint64_t seq = block_->header_seq();
    if (!have_event_ || seq != cached_seq_) {
      // Cached under the number loaded before the read: if the event
      // changed meanwhile, the number did too, and the next call reads again.
      cached_event_ = block_->read_event();
      cached_seq_ = seq;
      have_event_ = true;
    }
    return cached_event_;
  }

  // Slot fields: the step and metrics given, the rest kept from our slot.
  void write_slot(int64_t n, std::optional<double> loss, std::optional<double> tokens_per_s) {
    // We are the slot's only writer: its current values need no lock.
    ControlBlock::SlotView view = block_->read_slot(local_rank_);
    view.step = n;
    view.timestamp_ns = ControlBlock::now_realtime_ns();
    if (loss) {
      view.loss = *loss;
      // Sticky: the agent samples, and the next finite loss must not hide it.
      if (!std::isfinite(*loss)) view.flags |= control::kFlagLossNonFinite;
    }
    if (tokens_per_s) view.tokens_per_s = *tokens_per_s;
    if (compute_ns) {
      view.compute_us = static_cast<uint32_t>(
          std::clamp<int64_t>(*compute_ns / 1000, 1, std::numeric_limits<uint32_t>::max()));
      compute_ns.reset();
    }
    view.pid = pid_;
    block_->write_slot(local_rank_, view);
  }

  // The innermost open section into the slot, or none.
  void write_section() {
    ControlBlock::SlotView view = block_->read_slot(local_rank_);
    if (sections.empty()) {
      view.flags &= ~control::kFlagInSection;
      view.section.clear();
      view.section_limit_s = 0;
    } else {
      view.flags |= control::kFlagInSection;
      view.section = sections.back().first;
      view.section_limit_s = sections.back().second;
    }
    view.pid = pid_;
    block_->write_slot(local_rank_, view);
  }

  // A fixed job's block (static, standalone) carries no scale events.
  bool fixed() { return (block_->agent_flags() & control::kAgentFixed) != 0; }

  void set_flag(uint32_t flag) { change_flags(flag, 0); }

  void change_flags(uint32_t set, uint32_t clear) {
    ControlBlock::SlotView view = block_->read_slot(local_rank_);
    view.flags = (view.flags | set) & ~clear;
    view.pid = pid_;
    block_->write_slot(local_rank_, view);
  }

  const std::optional<std::string>& control_file() const { return control_file_; }
  int local_rank() const { return local_rank_; }
  bool attached = false;
  std::optional<int64_t> last_step;
  std::function<bool(bool)> coordinator;
  std::optional<int64_t> compute_ns;                       // the last Compute scope's
  std::vector<std::pair<std::string, uint32_t>> sections;  // open ones, innermost last

 private:
  std::optional<std::string> control_file_;
  int local_rank_;
  std::optional<ControlBlock> block_;
  uint32_t pid_ = 0;
  bool have_event_ = false;
  uint64_t cached_seq_ = 0;
  ControlBlock::Event cached_event_;
};

std::mutex g_session_mu;  // guards creation and reset; the calls are single-threaded by contract
std::unique_ptr<Session> g_session;

// An uncontended lock stays in user space: no system call on the hot path.
Session& session() {
  std::lock_guard lock(g_session_mu);
  if (!g_session) g_session = std::make_unique<Session>();
  return *g_session;
}

}  // namespace

bool attach() {
  Session& s = session();
  if (!s.attached) {
    // The handler first: once ATTACHED is visible the agent may signal, and
    // SIGUSR1's default action kills.
    install_handler();
    if (s.block() != nullptr) s.set_flag(control::kFlagAttached);
    s.attached = true;
  }
  return s.block() != nullptr;
}

void step(int64_t n, std::optional<double> loss, std::optional<double> tokens_per_s) {
  Session& s = session();
  s.last_step = n;
  if (s.block() != nullptr) s.write_slot(n, loss, tokens_per_s);
}

bool signal_received() {
  return g_signalled.load(std::memory_order_relaxed);
}

namespace {
int64_t monotonic_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

Compute::Compute() : start_ns_(monotonic_ns()) {}

Compute::~Compute() {
  session().compute_ns = monotonic_ns() - start_ns_;
}

Section::Section(std::string name, std::optional<double> timeout_s) {
  Session& s = session();
  const uint32_t limit =
      timeout_s ? static_cast<uint32_t>(std::clamp(std::ceil(*timeout_s), 1.0, 4294967295.0)) : 0;
  s.sections.emplace_back(std::move(name), limit);
  if (s.block() != nullptr) s.write_section();
}

Section::~Section() {
  Session& s = session();
  if (!s.sections.empty()) s.sections.pop_back();
  // Destructors never throw; a block that cannot be written now could not
  // have been opened by the constructor either.
  try {
    if (s.block() != nullptr) s.write_section();
  } catch (const std::exception&) {
  }
}

namespace {

bool detected(Session& s, std::optional<int64_t> at) {
  if (s.block() != nullptr && !s.fixed()) {
    const ControlBlock::Event& e = s.event();
    if (e.kind == control::EventKind::none || e.stop_step < 0) return false;
    const std::optional<int64_t> current = at ? at : s.last_step;
    return current.has_value() && *current >= e.stop_step;
  }
  const char* mode = std::getenv(kCoordinationEnv);
  if (mode != nullptr && std::strcmp(mode, "distributed") == 0) {
    const bool flag = signal_received();
    // Without a process group there is nobody to agree with.
    return s.coordinator ? s.coordinator(flag) : flag;
  }
  return false;
}

}  // namespace

bool elastic_event_detected() {
  return detected(session(), std::nullopt);
}

bool elastic_event_detected(int64_t step) {
  return detected(session(), step);
}

Info info() {
  Session& s = session();
  Info out;
  out.rank = env_int("RANK");
  out.world_size = env_int("WORLD_SIZE");
  out.restart_count = env_int("TORCHELASTIC_RESTART_COUNT").value_or(0);
  out.control_file = s.control_file();
  out.local_rank = s.local_rank();
  out.attached = s.attached;
  out.signal_received = signal_received();
  out.last_step = s.last_step;
  if (s.block() != nullptr) {
    const ControlBlock::Event& e = s.event();
    out.generation = e.generation;
    out.event_seq = e.event_seq;
    out.event_kind = control::to_string(e.kind);
    out.stop_step = e.stop_step;
    out.next_world_size = e.next_world_size;
    out.deadline_unix_ms = e.deadline_unix_ms;
    out.reason = e.reason;
  }
  return out;
}

void heartbeat(int64_t n) {
  step(n);
}

void report(std::optional<double> loss, std::optional<double> tokens_per_s) {
  Session& s = session();
  step(s.last_step.value_or(-1), loss, tokens_per_s);
}

void stopped() {
  Session& s = session();
  if (s.block() != nullptr) s.set_flag(control::kFlagStopped);
}

void saved() {
  Session& s = session();
  if (s.block() != nullptr) s.set_flag(control::kFlagSaved);
}

void set_signal_coordinator(std::function<bool(bool)> coordinator) {
  session().coordinator = std::move(coordinator);
}

namespace detail {

control::ControlBlock* session_block() {
  return session().block();
}

int session_local_rank() {
  return session().local_rank();
}

void change_slot_flags(uint32_t set, uint32_t clear) {
  Session& s = session();
  if (s.block() != nullptr) s.change_flags(set, clear);
}

void reset_session_for_testing() {
  std::lock_guard lock(g_session_mu);
  g_session.reset();
  g_signalled.store(false, std::memory_order_relaxed);
}

}  // namespace detail

}  // namespace elasticrun::sdk
