// The node's GPU health (agent/gpu_watch): readings on a thread of their
// own, judged when the loop polls; the start line that says what is
// watched or why GPU health is skipped, over a fake driver tree and the
// fake NVML (test/tools/fake_nvml.cpp).
#include "agent/gpu_watch.hpp"

#include <spdlog/sinks/ostream_sink.h>
#include <stdlib.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <deque>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "fake_sysfs.hpp"
#include "process_helpers.hpp"
#include "util/logging.hpp"

using namespace elasticrun;
using namespace std::chrono_literals;
using agent::GpuSource;
using agent::GpuWatch;
using Catch::Matchers::Contains;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

const std::string kGpu0 = "0000:1b:00.0";
const std::string kGpu1 = "0000:9a:00.0";

// What the health logger writes while it lives.
class CapturedLog {
 public:
  CapturedLog() : sink_(std::make_shared<spdlog::sinks::ostream_sink_mt>(out_)) {
    util::logger("health")->sinks().push_back(sink_);
  }
  ~CapturedLog() {
    auto& sinks = util::logger("health")->sinks();
    sinks.erase(std::find(sinks.begin(), sinks.end(), sink_));
  }
  std::string text() {
    sink_->flush();
    return out_.str();
  }

 private:
  std::ostringstream out_;
  std::shared_ptr<spdlog::sinks::ostream_sink_mt> sink_;
};

// Hands out the readings a test queues, one set per read; healthy ones
// when none is queued. Read on the watch's thread.
struct ScriptedGpus final : GpuSource {
  struct Script {
    std::mutex mu;
    std::deque<std::vector<health::GpuReading>> queued;
    std::atomic<int> reads{0};
    std::atomic<bool> block{false};    // read() waits while set
    std::atomic<bool> blocked{false};  // a read is waiting
    std::atomic<bool> gone{false};     // the source was destroyed
  };
  explicit ScriptedGpus(std::shared_ptr<Script> s) : script(std::move(s)) {}
  ~ScriptedGpus() override { script->gone = true; }
  std::vector<health::GpuReading> read() override {
    while (script->block) {
      script->blocked = true;
      std::this_thread::sleep_for(1ms);
    }
    ++script->reads;
    std::lock_guard lock(script->mu);
    if (script->queued.empty()) return std::vector<health::GpuReading>(2);
    auto r = std::move(script->queued.front());
    script->queued.pop_front();
    return r;
  }
  std::shared_ptr<Script> script;
};

std::vector<health::GpuDevice> two_gpus() {
  return {{kGpu0, 0}, {kGpu1, 1}};
}

health::GpuSnapshot healthy_now() {
  return {Clock::now(), std::vector<health::GpuReading>(2)};
}

// A fake driver tree with two GPUs and the fake NVML's state for them.
struct FakeNode {
  test::FakeSysfs sysfs;
  test::TempDir dir{"elasticrun-gpu-watch"};
  std::string state = dir / "state.json";
  agent::GpuHealthConfig config;

  FakeNode() {
    sysfs.gpu(kGpu0, 0);
    sysfs.gpu(kGpu1, 0);
    config.root = sysfs.root().string();
    config.library = FAKE_NVML_LIBRARY;
    config.interval = 10ms;
    json gpu = {{"ecc_uncorrected", 0}, {"xids", json::array()}};
    set({{"gpus", {{kGpu0, gpu}, {kGpu1, gpu}}}});
    ::setenv("FAKE_NVML_STATE", state.c_str(), 1);
  }
  ~FakeNode() { ::unsetenv("FAKE_NVML_STATE"); }
  void set(const json& s) const {
    test::write_text(state + ".tmp", s.dump());
    std::filesystem::rename(state + ".tmp", state);
  }
};

}  // namespace

TEST_CASE("the watch judges what its thread reads when the loop polls", "[gpu]") {
  auto script = std::make_shared<ScriptedGpus::Script>();
  GpuWatch watch(std::make_unique<ScriptedGpus>(script), two_gpus(), 5ms, healthy_now());
  watch.begin_attempt(Clock::now());
  std::vector<health::GpuReading> xid(2);
  xid[1].xids = {79};
  {
    std::lock_guard lock(script->mu);
    script->queued.push_back(xid);
  }
  std::optional<health::Fault> fault;
  REQUIRE(test::eventually([&] { return (fault = watch.poll()).has_value(); }));
  CHECK(fault->kind == health::FaultKind::kGpu);
  CHECK_THAT(fault->message, Contains("GPU 0000:9a:00.0 (CUDA 1) reported XID 79"));
  // One fault per attempt; the next attempt may have its own.
  const int seen = script->reads;
  REQUIRE(test::eventually([&] { return script->reads > seen + 2; }));
  CHECK_FALSE(watch.poll());
}

TEST_CASE("the watch logs its notes, and an XID read before the attempt is one of them", "[gpu]") {
  CapturedLog log;
  auto script = std::make_shared<ScriptedGpus::Script>();
  health::GpuSnapshot first = healthy_now();
  first.taken -= 1s;
  first.readings[0].xids = {94};
  first.readings[1].remap_pending = true;
  GpuWatch watch(std::make_unique<ScriptedGpus>(script), two_gpus(), 5ms, first);
  watch.begin_attempt(Clock::now());
  CHECK_FALSE(watch.poll());
  const std::string text = log.text();
  CHECK_THAT(text, Contains("GPU health: GPU 0000:1b:00.0 (CUDA 0) reported XID 94"));
  CHECK_THAT(text, Contains("before this attempt began"));
  CHECK_THAT(text, Contains("GPU health: GPU 0000:9a:00.0 (CUDA 1): remapped rows are pending"));
}

TEST_CASE("a read that never returns does not hold up the watch's end", "[gpu]") {
  CapturedLog log;
  auto script = std::make_shared<ScriptedGpus::Script>();
  {
    GpuWatch watch(std::make_unique<ScriptedGpus>(script), two_gpus(), 1ms, healthy_now());
    script->block = true;
    REQUIRE(test::eventually([&] { return script->blocked.load(); }));
  }
  CHECK_THAT(log.text(), Contains("an NVML call has not returned"));
  CHECK_FALSE(script->gone);
  // Once the read returns, the thread ends and frees what it used.
  script->block = false;
  CHECK(test::eventually([&] { return script->gone.load(); }));
}

TEST_CASE("the start line names the GPUs watched and what is read", "[gpu]") {
  CapturedLog log;
  FakeNode node;
  auto watch = agent::start_gpu_watch(node.config, {});
  REQUIRE(watch);
  CHECK(watch->gpus().size() == 2);
  CHECK_THAT(log.text(),
             Contains("GPU health: watching GPU 0000:1b:00.0 (CUDA 0), GPU 0000:9a:00.0 (CUDA 1) "
                      "through NVML every 0.01 s: XID events, uncorrectable ECC errors, retired "
                      "pages, remapped rows"));
  // An XID the driver raises during the attempt is its fault.
  watch->begin_attempt(Clock::now());
  json gpu = {{"ecc_uncorrected", 0}, {"xids", json::array()}};
  node.set(
      {{"gpus", {{kGpu0, gpu}, {kGpu1, {{"ecc_uncorrected", 0}, {"xids", json::array({79})}}}}}});
  std::optional<health::Fault> fault;
  REQUIRE(test::eventually([&] { return (fault = watch->poll()).has_value(); }));
  CHECK_THAT(fault->message, Contains("GPU 0000:9a:00.0 (CUDA 1) reported XID 79"));
}

TEST_CASE("only the GPUs the workers see are watched, numbered as they number them", "[gpu]") {
  CapturedLog log;
  FakeNode node;
  auto watch = agent::start_gpu_watch(node.config, {{"CUDA_VISIBLE_DEVICES", "1"}});
  REQUIRE(watch);
  REQUIRE(watch->gpus().size() == 1);
  CHECK(watch->gpus()[0].pci_address == kGpu1);
  CHECK(watch->gpus()[0].cuda_index == 0);
  CHECK_THAT(log.text(), Contains("watching GPU 0000:9a:00.0 (CUDA 0) through NVML"));
}

TEST_CASE("where GPU health cannot run, one line says why and nothing is watched", "[gpu]") {
  CapturedLog log;
  FakeNode node;
  std::string expected;
  SECTION("no driver") {
    test::FakeSysfs empty;
    node.config.root = empty.root().string();
    CHECK_FALSE(agent::start_gpu_watch(node.config, {}));
    expected = "GPU health is skipped: no NVIDIA GPU here (no " +
               (empty.root() / "proc/driver/nvidia/gpus").string() + ")";
  }
  SECTION("every GPU hidden") {
    CHECK_FALSE(agent::start_gpu_watch(node.config, {{"CUDA_VISIBLE_DEVICES", ""}}));
    expected = "GPU health is skipped: the workers see no NVIDIA GPU (CUDA_VISIBLE_DEVICES)";
  }
  SECTION("no NVML") {
    node.config.library = "/nonexistent/libnvidia-ml.so.1";
    CHECK_FALSE(agent::start_gpu_watch(node.config, {}));
    expected = "GPU health is skipped: cannot load NVML: /nonexistent/libnvidia-ml.so.1";
  }
  SECTION("NVML without a driver") {
    node.set({{"init", 9}});
    CHECK_FALSE(agent::start_gpu_watch(node.config, {}));
    expected = "GPU health is skipped: nvmlInit_v2 failed: Driver Not Loaded (9)";
  }
  SECTION("NVML knows none of the GPUs") {
    node.set({{"gpus", json::object()}});
    CHECK_FALSE(agent::start_gpu_watch(node.config, {}));
    expected =
        "GPU health is skipped: NVML reads none of the workers' GPUs: GPU 0000:1b:00.0 (CUDA 0): "
        "NVML does not find it";
  }
  SECTION("MIG instances") {
    CHECK_FALSE(agent::start_gpu_watch(node.config, {{"CUDA_VISIBLE_DEVICES", "MIG-1234"}}));
    expected = "GPU health is skipped: CUDA_VISIBLE_DEVICES names MIG instances";
  }
  const std::string text = log.text();
  CHECK_THAT(text, Contains(expected));
  // One line, at info.
  CHECK(std::count(text.begin(), text.end(), '\n') == 1);
  CHECK_THAT(text, Contains("[info]"));
}

TEST_CASE("--gpu-health off watches nothing and says nothing", "[gpu]") {
  CapturedLog log;
  FakeNode node;
  node.config.enabled = false;
  CHECK_FALSE(agent::start_gpu_watch(node.config, {}));
  CHECK(log.text().empty());
}
