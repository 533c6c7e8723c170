// The agents' side of a memory-tier restore, for bench/memory_bench.py:
//
//   memory_probe serve    makes a tier (memory/tier.hpp), prints
//                         {"dir": ..., "port": ...}, waits for a line on
//                         stdin (the bench wrote a snapshot into the dir),
//                         adopts it (the manifest's CRC32Cs), prints
//                         {"adopt_ms": ...}, and serves it until stdin ends.
//   memory_probe fetch PORT NAME
//                         makes a tier, fetches snapshot NAME from
//                         127.0.0.1:PORT into it (memory/peer.hpp: every
//                         file checked), prints {"dir": ..., "fetch_ms": ...}
//                         and keeps the tier until stdin ends.
//
// Both remove their tier when they exit, as an agent does.
#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>

#include "memory/peer.hpp"
#include "memory/tier.hpp"

namespace mem = elasticrun::memory;
using Clock = std::chrono::steady_clock;

namespace {

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

void wait_for_eof() {
  std::string line;
  while (std::getline(std::cin, line)) {
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  const auto base = mem::Tier::default_base("/tmp");
  if (mode == "serve" && argc == 2) {
    auto tier = mem::Tier::create(base, std::nullopt);
    mem::PeerServer server("127.0.0.1", *tier);
    std::printf("{\"dir\": \"%s\", \"port\": %d}\n", tier->path().c_str(), server.port());
    std::fflush(stdout);
    std::string line;
    if (!std::getline(std::cin, line)) return 0;
    const auto t0 = Clock::now();
    const auto held = tier->adopt();
    std::printf("{\"adopt_ms\": %.3f, \"snapshots\": %zu}\n", ms_since(t0), held.snapshots.size());
    std::fflush(stdout);
    wait_for_eof();
    return 0;
  }
  if (mode == "fetch" && argc == 4) {
    auto tier = mem::Tier::create(base, std::nullopt);
    const auto t0 = Clock::now();
    const auto st = mem::fetch_snapshot("127.0.0.1", std::stoi(argv[2]), argv[3], *tier);
    if (!st) {
      std::fprintf(stderr, "memory_probe: %s\n", st.message().c_str());
      return 1;
    }
    std::printf("{\"dir\": \"%s\", \"fetch_ms\": %.3f}\n", tier->path().c_str(), ms_since(t0));
    std::fflush(stdout);
    wait_for_eof();
    return 0;
  }
  std::fprintf(stderr, "usage: memory_probe serve | memory_probe fetch PORT NAME\n");
  return 2;
}
