// What the simulator's unit tests (sim_*_test.cpp) share: a trace's text run
// under one policy, and a trace the parser must refuse.
#pragma once

#include <catch2/catch.hpp>
#include <cstdint>
#include <string>

#include "elasticrun/errors.hpp"
#include "sim/simulator.hpp"
#include "sim/timeline.hpp"
#include "sim/trace.hpp"

namespace elasticrun::sim::test {

// `text` parsed as "t.trace" and played under `policy` with `seed`'s events.
inline RunResult run(const std::string& text, const std::string& policy, uint64_t seed = 0) {
  const Trace t = parse_trace(text, "t.trace");
  return simulate(t, expand(t, seed), policy);
}

// parse_trace refuses `text` with a ConfigError whose message names `where`
// (the file and line) and says `what`.
inline void check_parse_error(const std::string& text, const std::string& where,
                              const std::string& what) {
  INFO(text);
  CHECK_THROWS_AS(parse_trace(text, "t.trace"), ConfigError);
  CHECK_THROWS_WITH(parse_trace(text, "t.trace"),
                    Catch::Matchers::Contains(where) && Catch::Matchers::Contains(what));
}

}  // namespace elasticrun::sim::test
