// event_probe: the cost of elasticrun::sdk::elastic_event_detected() in a C++
// worker attached to a real control block (bench/event_bench.py drives it).
//
//   event_probe CALLS     with ELASTICRUN_CONTROL_FILE and LOCAL_RANK set
//
// Prints one JSON line: {"calls", "ns_per_call", "detected"}.
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "elasticrun/worker.hpp"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: event_probe CALLS\n");
    return 2;
  }
  const long calls = std::atol(argv[1]);
  if (calls <= 0 || !elasticrun::sdk::attach()) {
    std::fprintf(stderr, "event_probe: CALLS must be positive and a control block attached\n");
    return 1;
  }
  elasticrun::sdk::step(1);
  long detected = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (long i = 0; i < calls; ++i) detected += elasticrun::sdk::elastic_event_detected() ? 1 : 0;
  const auto t1 = std::chrono::steady_clock::now();
  const double ns = std::chrono::duration<double, std::nano>(t1 - t0).count();
  std::printf("{\"calls\": %ld, \"ns_per_call\": %.3f, \"detected\": %ld}\n", calls, ns / calls,
              detected);
  return 0;
}
