// sdk_elastic_worker --dir DIR [--step-ms MS]: the C++ twin of
// test/integration/workers/elastic_sdk_worker.py, for elasticrun --no-python.
//
// It resumes from the highest step in DIR/ckpt.* (every rank saves the same
// step), steps in lockstep with the other ranks through the job's store
// (MASTER_ADDR:MASTER_PORT; the Python worker all-reduces instead, this one
// links no libtorch), publishes each step with elasticrun::sdk::step, and
// when elastic_event_detected() says the job is being resized it "saves"
// (writes its step), records the stop and exits 0. It stops for good when
// DIR/finish exists on any rank (agreed through the store). Events go to
// DIR/events.jsonl in the Python worker's format (elastic_job.py reads it).
//
// Under elasticrun --inprocess-restart (elasticrun::sdk::inprocess) it does
// not exit at a resize or a failed round: it records "park", parks, and
// goes on in the next round from the step it holds; a joining rank takes
// the highest step of the round's ranks.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "elasticrun/inprocess.hpp"
#include "elasticrun/store_client.hpp"
#include "elasticrun/worker.hpp"

namespace {

namespace fs = std::filesystem;
namespace sdk = elasticrun::sdk;
using nlohmann::json;

// A finishing rank adds this on top of its 1, so the sum says both how many
// ranks arrived (modulo) and whether any wants to finish.
constexpr int64_t kFinishVote = int64_t{1} << 20;

std::string env(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr) throw elasticrun::ConfigError(std::string(name) + " is not set");
  return v;
}

void record(const fs::path& dir, json fields) {
  const std::string line = fields.dump() + "\n";
  // One O_APPEND write per line: lines of different ranks never interleave.
  const int fd =
      ::open((dir / "events.jsonl").c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error("cannot open " + (dir / "events.jsonl").string());
  const ssize_t n = ::write(fd, line.data(), line.size());
  ::close(fd);
  if (n != static_cast<ssize_t>(line.size())) throw std::runtime_error("short write of an event");
}

int64_t resume_step(const fs::path& dir) {
  int64_t best = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().filename().string().rfind("ckpt.", 0) != 0) continue;
    std::ifstream in(entry.path());
    int64_t step = 0;
    if (in >> step) best = std::max(best, step);
  }
  return best;
}

// One round's worth of the job: true when the job is finished, false when
// the round stopped for a resize.
// `step` is the state: the last whole step, also when a collective throws.
bool train_round(const fs::path& dir, int step_ms, const json& who, int64_t& step,
                 elasticrun::StoreClient& store, bool reforms) {
  const int64_t start = step;
  const int world = who["world"].get<int>();
  auto event = [&](const char* name, int64_t at) {
    json j = who;
    j["event"] = name;
    j["step"] = at;
    return j;
  };
  while (true) {
    const bool finish = fs::exists(dir / "finish");
    // The round's store is fresh each round: step keys never collide.
    const std::string key = "sdk_worker/step/" + std::to_string(step + 1);
    const int64_t arrived = store.add(key, finish ? 1 + kFinishVote : 1);
    if (arrived % kFinishVote == world) store.set(key + "/all", std::to_string(arrived));
    store.wait({key + "/all"});
    const bool any_finish = std::stoll(store.get(key + "/all")) >= kFinishVote;
    ++step;
    sdk::step(step, 1.0 / static_cast<double>(step));
    if (step == start + 5) record(dir, event("steady", step));
    if (any_finish) {
      record(dir, event("finish", step));
      return true;
    }
    if (sdk::elastic_event_detected()) {
      json j = event(reforms ? "park" : "stop", step);
      j["signal"] = sdk::signal_received();
      const sdk::Info i = sdk::info();
      j["reason"] = i.reason.value_or("");
      j["event_kind"] = i.event_kind.value_or("");
      if (!reforms) {
        sdk::stopped();
        std::ofstream(dir / ("ckpt.rank" + who["rank"].dump() + ".gen" + who["gen"].dump()))
            << step;
        sdk::saved();
      }
      record(dir, j);
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(step_ms));
  }
}

// --inprocess: the highest step any rank of the round holds (a joiner holds
// what its directory has), through the round's store.
int64_t share_step(elasticrun::StoreClient& store, int rank, int world, int64_t mine) {
  store.set("sdk_worker/state/" + std::to_string(rank), std::to_string(mine));
  int64_t best = mine;
  for (int r = 0; r < world; ++r) {
    const std::string key = "sdk_worker/state/" + std::to_string(r);
    store.wait({key});
    best = std::max<int64_t>(best, std::stoll(store.get(key)));
  }
  return best;
}

int run(const fs::path& dir, int step_ms) {
  sdk::attach();
  // Under --inprocess-restart the process goes on across rounds: the
  // round's store connection is its process group, the step its state.
  const bool reforms = sdk::inprocess::enable();
  int64_t step = resume_step(dir);
  while (true) {
    const int rank = std::stoi(env("RANK"));
    const int world = std::stoi(env("WORLD_SIZE"));
    const json who = {{"rank", rank},
                      {"world", world},
                      {"gen", std::stoll(env("ELASTICRUN_GENERATION"))},
                      {"agent", static_cast<int64_t>(::getppid())},
                      {"pid", static_cast<int64_t>(::getpid())},
                      {"lang", "c++"}};
    bool finished = false;
    try {
      auto store = elasticrun::StoreClient::connect(
          env("MASTER_ADDR"), static_cast<uint16_t>(std::stoi(env("MASTER_PORT"))));
      if (reforms) step = share_step(store, rank, world, step);
      json start = who;
      start["event"] = "start";
      start["step"] = step;
      record(dir, start);
      finished = train_round(dir, step_ms, who, step, store, reforms);
    } catch (const std::exception&) {
      // A peer gone: the round's store goes with the round.
      if (!reforms || !sdk::inprocess::round_failed()) throw;
    }
    if (!reforms || finished) return 0;
    if (sdk::inprocess::park() == sdk::inprocess::Next::kExit) return 0;
  }
}

}  // namespace

int main(int argc, char** argv) {
  fs::path dir;
  int step_ms = 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--dir") {
      dir = argv[i + 1];
    } else if (flag == "--step-ms") {
      step_ms = std::atoi(argv[i + 1]);
    } else {
      std::fprintf(stderr, "usage: sdk_elastic_worker --dir DIR [--step-ms MS]\n");
      return 2;
    }
  }
  if (dir.empty()) {
    std::fprintf(stderr, "usage: sdk_elastic_worker --dir DIR [--step-ms MS]\n");
    return 2;
  }
  try {
    return run(dir, step_ms);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sdk_elastic_worker: %s\n", e.what());
    return 1;
  }
}
