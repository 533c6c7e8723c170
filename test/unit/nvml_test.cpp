// NVML as GPU health reads it (agent/nvml), against the fake library of
// test/tools/fake_nvml.cpp: loading, readings, XID events, and what a
// missing function or an unsupported query disables.
#include "agent/nvml.hpp"

#include <dlfcn.h>
#include <stdlib.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <nlohmann/json.hpp>

#include "process_helpers.hpp"
#include "temp_dir.hpp"

using namespace elasticrun;
using agent::Nvml;
using Catch::Matchers::Contains;
using nlohmann::json;

namespace {

const std::string kGpu0 = "0000:1b:00.0";
const std::string kGpu1 = "0000:9a:00.0";

// The fake's state file for the life of a test, in $FAKE_NVML_STATE.
class FakeState {
 public:
  explicit FakeState(json state) {
    set(std::move(state));
    ::setenv("FAKE_NVML_STATE", path_.c_str(), 1);
  }
  ~FakeState() { ::unsetenv("FAKE_NVML_STATE"); }
  void set(const json& state) const {
    test::write_text(path_ + ".tmp", state.dump());
    std::filesystem::rename(path_ + ".tmp", path_);
  }

 private:
  test::TempDir dir_{"elasticrun-nvml"};
  std::string path_ = dir_ / "state.json";
};

json two_healthy_gpus() {
  json gpu = {{"ecc_uncorrected", 0},
              {"retired_pages_pending", false},
              {"remap_pending", false},
              {"remap_failed", false},
              {"xids", json::array()}};
  return {{"gpus", {{kGpu0, gpu}, {kGpu1, gpu}}}};
}

// How often the loaded fake saw a call (its own counter, by symbol).
int calls(const char* library, const char* fn) {
  void* lib = ::dlopen(library, RTLD_NOW | RTLD_NOLOAD);
  REQUIRE(lib);
  void* sym = ::dlsym(lib, "fake_nvml_calls");
  REQUIRE(sym);
  int (*count)(const char*) = nullptr;
  std::memcpy(&count, &sym, sizeof count);
  const int n = count(fn);
  ::dlclose(lib);  // RTLD_NOLOAD took a reference of its own
  return n;
}

std::unique_ptr<Nvml> open(const char* library = FAKE_NVML_LIBRARY) {
  std::string why;
  auto nvml = Nvml::open(library, &why);
  INFO(why);
  REQUIRE(nvml);
  return nvml;
}

}  // namespace

TEST_CASE("a library that cannot be loaded or initialised says why", "[nvml]") {
  std::string why;
  CHECK_FALSE(Nvml::open("/nonexistent/libnvidia-ml.so.1", &why));
  CHECK_THAT(why, Contains("cannot load NVML: /nonexistent/libnvidia-ml.so.1"));
  {
    // Without its state file the fake answers as NVML without a driver.
    CHECK_FALSE(Nvml::open(FAKE_NVML_LIBRARY, &why));
    CHECK_THAT(why, Contains("nvmlInit_v2 failed: Driver Not Loaded (9)"));
  }
  FakeState state(json{{"init", 9}});
  CHECK_FALSE(Nvml::open(FAKE_NVML_LIBRARY, &why));
  CHECK_THAT(why, Contains("Driver Not Loaded"));
}

TEST_CASE("each GPU is read for its ECC count, pending retirements and remaps, and XIDs",
          "[nvml]") {
  json s = two_healthy_gpus();
  FakeState state(s);
  auto nvml = open();
  const auto problems = nvml->attach({kGpu0, kGpu1, "0000:ff:00.0"});
  REQUIRE(problems.size() == 3);
  CHECK(problems[0].empty());
  CHECK(problems[1].empty());
  CHECK_THAT(problems[2], Contains("NVML does not find it: Not Found"));
  CHECK(nvml->readable() == "XID events, uncorrectable ECC errors, retired pages, remapped rows");

  auto r = nvml->read();
  REQUIRE(r.size() == 2);
  CHECK(r[0].ecc_uncorrected == 0u);
  CHECK(r[0].retired_pages_pending == false);
  CHECK(r[0].remap_pending == false);
  CHECK(r[0].remap_failed == false);
  CHECK(r[0].xids.empty());
  CHECK_FALSE(r[0].lost);

  s["gpus"][kGpu1]["ecc_uncorrected"] = 2;
  s["gpus"][kGpu1]["remap_pending"] = true;
  s["gpus"][kGpu1]["xids"] = {63, 79};
  s["gpus"][kGpu0]["retired_pages_pending"] = true;
  state.set(s);
  r = nvml->read();
  CHECK(r[0].retired_pages_pending == true);
  CHECK(r[0].xids.empty());
  CHECK(r[1].ecc_uncorrected == 2u);
  CHECK(r[1].remap_pending == true);
  CHECK(r[1].xids == std::vector<uint64_t>{63, 79});
  // Each event once.
  r = nvml->read();
  CHECK(r[1].xids.empty());
  // Drained without waiting, once per read until none is left.
  CHECK(calls(FAKE_NVML_LIBRARY, "nvmlEventSetWait_v2") == 1 + 3 + 1);
}

TEST_CASE("a query a GPU does not support is not asked again, and the others go on", "[nvml]") {
  json s = two_healthy_gpus();
  s["gpus"][kGpu0]["unsupported"] = {"retired", "events"};
  s["gpus"][kGpu1]["unsupported"] = {"retired"};
  FakeState state(s);
  auto nvml = open();
  nvml->attach({kGpu0, kGpu1});
  auto r = nvml->read();
  CHECK_FALSE(r[0].retired_pages_pending);
  CHECK(r[0].ecc_uncorrected == 0u);
  const int asked = calls(FAKE_NVML_LIBRARY, "nvmlDeviceGetRetiredPagesPendingStatus");
  CHECK(asked == 2);
  r = nvml->read();
  CHECK(calls(FAKE_NVML_LIBRARY, "nvmlDeviceGetRetiredPagesPendingStatus") == asked);
  CHECK(nvml->readable() == "XID events, uncorrectable ECC errors, remapped rows");
  // GPU 0 registered no events: its XIDs are not seen, GPU 1's are.
  s["gpus"][kGpu0]["xids"] = json::array({48});
  s["gpus"][kGpu1]["xids"] = json::array({74});
  state.set(s);
  r = nvml->read();
  CHECK(r[0].xids.empty());
  CHECK(r[1].xids == std::vector<uint64_t>{74});
}

TEST_CASE("a lost GPU is reported lost and still asked", "[nvml]") {
  json s = two_healthy_gpus();
  FakeState state(s);
  auto nvml = open();
  nvml->attach({kGpu0, kGpu1});
  s["gpus"][kGpu0]["lost"] = true;
  state.set(s);
  for (int i = 0; i < 2; ++i) {
    const auto r = nvml->read();
    CHECK(r[0].lost);
    CHECK_FALSE(r[0].ecc_uncorrected);
    CHECK_FALSE(r[1].lost);
  }
  s["gpus"][kGpu0]["lost"] = false;
  state.set(s);
  CHECK(nvml->read()[0].ecc_uncorrected == 0u);
}

TEST_CASE("an NVML without the newer functions reads what it has", "[nvml]") {
  json s = two_healthy_gpus();
  s["gpus"][kGpu0]["xids"] = json::array({79});
  s["gpus"][kGpu0]["ecc_uncorrected"] = 5;
  FakeState state(s);
  auto nvml = open(FAKE_NVML_OLD_LIBRARY);
  const auto problems = nvml->attach({kGpu0, kGpu1});
  CHECK(problems[0].empty());
  CHECK(nvml->readable() == "uncorrectable ECC errors, retired pages");
  const auto r = nvml->read();
  CHECK(r[0].ecc_uncorrected == 5u);
  CHECK(r[0].retired_pages_pending == false);
  CHECK_FALSE(r[0].remap_pending);
  CHECK(r[0].xids.empty());
}

TEST_CASE("closing shuts NVML down and frees its event set", "[nvml]") {
  FakeState state(two_healthy_gpus());
  {
    auto nvml = open();
    nvml->attach({kGpu0});
    CHECK(calls(FAKE_NVML_LIBRARY, "nvmlShutdown") == 0);
  }
  CHECK(calls(FAKE_NVML_LIBRARY, "nvmlShutdown") == 1);
  CHECK(calls(FAKE_NVML_LIBRARY, "nvmlEventSetFree") == 1);
}
