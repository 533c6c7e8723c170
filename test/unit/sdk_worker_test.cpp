// The C++ worker SDK (include/elasticrun/worker.hpp) against a control block
// the test creates as the agent does (control::ControlBlock::create).
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <map>
#include <optional>
#include <string>

#include "control/assignment.hpp"
#include "control/control_block.hpp"
#include "elasticrun/inprocess.hpp"
#include "elasticrun/worker.hpp"
#include "sdk/testing.hpp"
#include "temp_dir.hpp"

namespace sdk = elasticrun::sdk;
using elasticrun::control::ControlBlock;
using elasticrun::control::EventKind;
using elasticrun::test::TempDir;

namespace {

// Sets the worker's environment for one test and puts the old one back,
// with a fresh SDK session on both sides (as a new process would have).
using Vars = std::map<std::string, std::string>;

class WorkerEnv {
 public:
  explicit WorkerEnv(const Vars& vars) {
    for (const char* name :
         {"ELASTICRUN_CONTROL_FILE", "LOCAL_RANK", "RANK", "WORLD_SIZE",
          "TORCHELASTIC_RESTART_COUNT", "HYPERPOD_SIGNAL_COORDINATION", "ELASTICRUN_GENERATION"}) {
      if (const char* old = ::getenv(name))
        saved_[name] = old;
      else
        saved_[name] = std::nullopt;
      ::unsetenv(name);
    }
    for (const auto& [name, value] : vars) ::setenv(name.c_str(), value.c_str(), 1);
    sdk::detail::reset_session_for_testing();
  }
  ~WorkerEnv() {
    for (const auto& [name, value] : saved_) {
      if (value)
        ::setenv(name.c_str(), value->c_str(), 1);
      else
        ::unsetenv(name.c_str());
    }
    sdk::detail::reset_session_for_testing();
  }

 private:
  std::map<std::string, std::optional<std::string>> saved_;
};

ControlBlock create_block(const std::string& path, int slots) {
  auto r = ControlBlock::create(path, slots);
  INFO((r ? std::string() : r.status().message()));
  REQUIRE(r);
  return std::move(r).value();
}

ControlBlock::Event scale_up(uint64_t generation, int64_t stop_step) {
  ControlBlock::Event e;
  e.generation = generation;
  e.kind = EventKind::scale_up;
  e.stop_step = stop_step;
  e.next_world_size = 16;
  e.reason = "node-9 joined";
  return e;
}

int g_own_handler_calls = 0;
extern "C" void own_handler(int) {
  ++g_own_handler_calls;
}

}  // namespace

TEST_CASE("an attached worker is marked ATTACHED and publishes its steps and metrics", "[sdk]") {
  TempDir dir("sdk-worker");
  ControlBlock agent = create_block(dir / "control", 4);
  WorkerEnv env(Vars{{"ELASTICRUN_CONTROL_FILE", dir / "control"}, {"LOCAL_RANK", "2"}});

  CHECK_FALSE(agent.attached(2));
  CHECK(sdk::attach());
  CHECK(sdk::attach());  // idempotent
  CHECK(agent.attached(2));
  CHECK_FALSE(agent.attached(0));

  const uint64_t before = ControlBlock::now_realtime_ns();
  sdk::step(40, 0.5, 1234.5);
  sdk::step(41);  // keeps the last metrics
  auto slot = agent.read_slot(2);
  CHECK(slot.step == 41);
  CHECK(slot.loss == 0.5);
  CHECK(slot.tokens_per_s == 1234.5);
  CHECK(slot.flags == elasticrun::control::kFlagAttached);
  CHECK(slot.pid == static_cast<uint32_t>(::getpid()));
  CHECK(slot.timestamp_ns >= before);
  CHECK(agent.max_step() == 41);

  sdk::report(0.25);  // the current step, a new loss, the old rate
  slot = agent.read_slot(2);
  CHECK(slot.step == 41);
  CHECK(slot.loss == 0.25);
  CHECK(slot.tokens_per_s == 1234.5);
  sdk::heartbeat(42);
  CHECK(agent.read_slot(2).step == 42);
  CHECK(agent.read_slot(2).loss == 0.25);

  sdk::stopped();
  CHECK(agent.read_slot(2).flags ==
        (elasticrun::control::kFlagAttached | elasticrun::control::kFlagStopped));
  sdk::saved();
  CHECK(agent.read_slot(2).flags ==
        (elasticrun::control::kFlagAttached | elasticrun::control::kFlagStopped |
         elasticrun::control::kFlagSaved));
  CHECK(agent.read_slot(2).step == 42);  // flags keep the step
}

TEST_CASE("the health monitors' inputs: a sticky non-finite loss, compute times, sections",
          "[sdk]") {
  namespace control = elasticrun::control;
  TempDir dir("sdk-worker");
  ControlBlock agent = create_block(dir / "control", 1);
  WorkerEnv env(Vars{{"ELASTICRUN_CONTROL_FILE", dir / "control"}, {"LOCAL_RANK", "0"}});
  sdk::attach();
  sdk::step(1, std::nan(""));
  sdk::step(2, 0.5);  // a finite loss does not hide the NaN before it
  CHECK((agent.read_slot(0).flags & control::kFlagLossNonFinite) != 0);
  { sdk::Compute c; }
  sdk::step(3);
  CHECK(agent.read_slot(0).compute_us >= 1);
  {
    sdk::Section eval("evaluation", 90.2);
    auto slot = agent.read_slot(0);
    CHECK((slot.flags & control::kFlagInSection) != 0);
    CHECK(slot.section == "evaluati");  // cut to the slot's 8 bytes
    CHECK(slot.section_limit_s == 91);
    {
      sdk::Section save("save");
      CHECK(agent.read_slot(0).section == "save");
      CHECK(agent.read_slot(0).section_limit_s == 0);
    }
    CHECK(agent.read_slot(0).section == "evaluati");
  }
  CHECK((agent.read_slot(0).flags & control::kFlagInSection) == 0);
  CHECK(agent.read_slot(0).step == 3);
}

TEST_CASE("a fixed job's block carries no scale events for elastic_event_detected", "[sdk]") {
  TempDir dir("sdk-worker");
  ControlBlock agent = create_block(dir / "control", 1);
  agent.set_agent_flags(elasticrun::control::kAgentFixed);
  WorkerEnv env(Vars{{"ELASTICRUN_CONTROL_FILE", dir / "control"}, {"LOCAL_RANK", "0"}});
  sdk::attach();
  agent.publish_event(scale_up(0, 5));
  sdk::step(10);
  CHECK_FALSE(sdk::elastic_event_detected());
}

TEST_CASE("a worker stops once its step reaches the stop step the agent agreed", "[sdk]") {
  TempDir dir("sdk-worker");
  ControlBlock agent = create_block(dir / "control", 2);
  WorkerEnv env(Vars{{"ELASTICRUN_CONTROL_FILE", dir / "control"}, {"LOCAL_RANK", "1"}});
  REQUIRE(sdk::attach());

  CHECK_FALSE(sdk::elastic_event_detected());  // no step yet, no event
  for (int64_t n = 0; n < 4; ++n) {
    sdk::step(n);
    CHECK_FALSE(sdk::elastic_event_detected());
  }
  // Published, but the nodes have not agreed on a stop step yet.
  agent.publish_event(scale_up(5, -1));
  CHECK_FALSE(sdk::elastic_event_detected());
  agent.set_stop_step(6);
  sdk::step(4);
  CHECK_FALSE(sdk::elastic_event_detected());
  sdk::step(5);
  CHECK_FALSE(sdk::elastic_event_detected());
  CHECK(sdk::elastic_event_detected(6));  // an explicit step instead of the last one
  sdk::step(6);
  CHECK(sdk::elastic_event_detected());
  CHECK_FALSE(sdk::elastic_event_detected(5));

  const sdk::Info i = sdk::info();
  CHECK(i.generation == 5u);
  CHECK(i.event_seq == 1u);
  CHECK(i.event_kind == "scale_up");
  CHECK(i.stop_step == 6);
  CHECK(i.next_world_size == 16);
  CHECK(i.reason == "node-9 joined");
  CHECK(i.last_step == 6);
  CHECK(i.local_rank == 1);
  CHECK(i.attached);
  CHECK(i.control_file == dir / "control");

  // The next round's block: no event any more (the cached copy is dropped).
  agent.reset(6);
  CHECK_FALSE(sdk::elastic_event_detected());
  CHECK(sdk::info().generation == 6u);
  CHECK(sdk::info().event_kind == "none");
  CHECK(sdk::info().stop_step == -1);
}

TEST_CASE("info reads rank, world size and restart count from torchrun's environment", "[sdk]") {
  WorkerEnv env(Vars{{"RANK", "5"},
                     {"WORLD_SIZE", "8"},
                     {"LOCAL_RANK", "1"},
                     {"TORCHELASTIC_RESTART_COUNT", "3"}});
  const sdk::Info i = sdk::info();
  CHECK(i.rank == 5);
  CHECK(i.world_size == 8);
  CHECK(i.restart_count == 3);
  CHECK(i.local_rank == 1);
  CHECK_FALSE(i.control_file);
  CHECK_FALSE(i.generation);
  CHECK_FALSE(i.reason);
  CHECK_FALSE(i.last_step);
}

TEST_CASE("without a control file a signal is received but never an event", "[sdk]") {
  WorkerEnv env(Vars{{"LOCAL_RANK", "0"}});
  CHECK_FALSE(sdk::attach());
  sdk::step(10);
  REQUIRE(::raise(SIGUSR1) == 0);  // the worker survives it
  CHECK(sdk::signal_received());
  CHECK_FALSE(sdk::elastic_event_detected());
  CHECK(sdk::info().signal_received);
  CHECK_FALSE(sdk::info().generation);
  sdk::stopped();  // no block: nothing to tell, and no error
  sdk::saved();
}

TEST_CASE("distributed signal coordination asks the coordinator, else the local flag", "[sdk]") {
  WorkerEnv env(Vars{{"HYPERPOD_SIGNAL_COORDINATION", "distributed"}});
  sdk::attach();
  CHECK_FALSE(sdk::elastic_event_detected());  // no group: this rank's own flag
  REQUIRE(::raise(SIGUSR1) == 0);
  CHECK(sdk::elastic_event_detected());

  std::optional<bool> asked;
  sdk::set_signal_coordinator([&](bool local) {
    asked = local;
    return true;  // another rank got the signal
  });
  CHECK(sdk::elastic_event_detected());
  CHECK(asked == true);
}

TEST_CASE("a distributed coordinator learns of no signal when none arrived", "[sdk]") {
  WorkerEnv env(Vars{{"HYPERPOD_SIGNAL_COORDINATION", "distributed"}});
  sdk::attach();
  std::optional<bool> asked;
  sdk::set_signal_coordinator([&](bool local) {
    asked = local;
    return local;
  });
  CHECK_FALSE(sdk::elastic_event_detected());
  CHECK(asked == false);
}

TEST_CASE("a SIGUSR1 handler the program installed before attach still runs", "[sdk]") {
  // Before any other test here installs ours, or it would be the previous one.
  struct sigaction old {};
  REQUIRE(::sigaction(SIGUSR1, nullptr, &old) == 0);
  struct sigaction own {};
  own.sa_handler = &own_handler;
  sigemptyset(&own.sa_mask);
  REQUIRE(::sigaction(SIGUSR1, &own, nullptr) == 0);
  {
    WorkerEnv env(Vars{});
    sdk::attach();
    g_own_handler_calls = 0;
    REQUIRE(::raise(SIGUSR1) == 0);
    CHECK(sdk::signal_received());
    CHECK(g_own_handler_calls == 1);
  }
  // Back to the disposition before the test (the SDK's handler, when an
  // earlier test attached) for the tests after it.
  REQUIRE(::sigaction(SIGUSR1, &old, nullptr) == 0);
}

TEST_CASE("a LOCAL_RANK outside the block and a file that is no block are refused", "[sdk]") {
  TempDir dir("sdk-worker");
  ControlBlock agent = create_block(dir / "control", 2);
  {
    WorkerEnv env(Vars{{"ELASTICRUN_CONTROL_FILE", dir / "control"}, {"LOCAL_RANK", "2"}});
    CHECK_THROWS_AS(sdk::attach(), elasticrun::ConfigError);
    CHECK_THROWS_WITH(sdk::step(1), Catch::Contains("slot 2 of 2 (is LOCAL_RANK right?)"));
  }
  {
    WorkerEnv env(Vars{{"ELASTICRUN_CONTROL_FILE", dir / "missing"}});
    CHECK_THROWS_WITH(sdk::elastic_event_detected(), Catch::Contains(dir / "missing"));
  }
  {
    WorkerEnv env(Vars{{"LOCAL_RANK", "one"}});
    CHECK_THROWS_WITH(sdk::attach(), "LOCAL_RANK=one is not an integer");
  }
}

TEST_CASE("in-process re-formation is on only for an elastic job under --inprocess-restart",
          "[sdk][inprocess]") {
  TempDir dir("sdk-worker");
  ControlBlock agent = create_block(dir / "control", 1);
  WorkerEnv env(Vars{{"ELASTICRUN_CONTROL_FILE", dir / "control"}, {"LOCAL_RANK", "0"}});
  REQUIRE(sdk::attach());
  CHECK_FALSE(sdk::inprocess::enable());  // no flag
  CHECK_THROWS_AS(sdk::inprocess::park(), elasticrun::Error);
  agent.set_agent_flags(elasticrun::control::kAgentInprocess | elasticrun::control::kAgentFixed);
  CHECK_FALSE(sdk::inprocess::enable());  // a fixed job
  agent.set_agent_flags(elasticrun::control::kAgentInprocess);
  CHECK(sdk::inprocess::enable());
  CHECK((agent.read_slot(0).flags & elasticrun::control::kFlagInprocess) != 0);
}

TEST_CASE("a parked worker takes the next round's variables, or exits when dismissed",
          "[sdk][inprocess]") {
  TempDir dir("sdk-worker");
  ControlBlock agent = create_block(dir / "control", 2);
  agent.set_agent_flags(elasticrun::control::kAgentInprocess);
  WorkerEnv env(Vars{{"ELASTICRUN_CONTROL_FILE", dir / "control"},
                     {"LOCAL_RANK", "1"},
                     {"RANK", "1"},
                     {"ELASTICRUN_GENERATION", "3"}});
  REQUIRE(sdk::attach());
  REQUIRE(sdk::inprocess::enable());

  // A failure of this round is the agent's word; an event of another round is not.
  CHECK_FALSE(sdk::inprocess::round_failed(std::chrono::milliseconds(0)));
  ControlBlock::Event failed;
  failed.generation = 2;
  failed.kind = EventKind::restart;
  agent.publish_event(failed);
  CHECK_FALSE(sdk::inprocess::round_failed(std::chrono::milliseconds(0)));
  failed.generation = 3;
  agent.publish_event(failed);
  CHECK(sdk::inprocess::round_failed(std::chrono::milliseconds(0)));

  // The agent writes the file, then the event (agent/parking.cpp does both).
  REQUIRE(elasticrun::control::write_assignment(
      elasticrun::control::assignment_path(dir / "control"), 4,
      {{{"RANK", "0"}}, {{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"ELASTICRUN_GENERATION", "4"}}}));
  ControlBlock::Event reform;
  reform.generation = 4;
  reform.kind = EventKind::reform;
  agent.publish_event(reform);
  CHECK(sdk::inprocess::park() == sdk::inprocess::Next::kRound);
  CHECK(std::string(::getenv("RANK")) == "3");
  CHECK(std::string(::getenv("WORLD_SIZE")) == "4");
  CHECK((agent.read_slot(1).flags & elasticrun::control::kFlagParked) == 0);

  ControlBlock::Event shutdown;
  shutdown.generation = 4;
  shutdown.kind = EventKind::shutdown;
  agent.publish_event(shutdown);
  CHECK(sdk::inprocess::park() == sdk::inprocess::Next::kExit);
  CHECK((agent.read_slot(1).flags & elasticrun::control::kFlagParked) != 0);
}
