// sdk_tool: answers queries to the C++ SDK's batch planner, permutation and
// elastic sampler, so the integration suite can compare them with the
// Python SDK's (test_sdk_cpp_equivalence.py). Reads one JSON array of
// queries on stdin, prints one JSON array of answers:
//
//   {"op": "plan", "g": G, "w": W, "sizes": [..], "max_accum": K}
//       -> {"micro_batches": [..], "accum_steps": n, "describe": "..."} | {"error": "..."}
//   {"op": "admissible", "g": G, "sizes": [..], "candidates": [..], "max_accum": K}
//       -> {"sizes": [..]} | {"error": "..."}
//   {"op": "flag", "g": G, "sizes": [..], "nproc": P, "nodes": [..], "max_accum": K,
//    "overrides": {"<nodes>": {"microBatchSize": m, "learningRate": x, ..}, ..}}
//       -> {"flag": "--replica-discrete-values ..."} | {"error": "..."}
//   {"op": "sizes", "override": {"maxMicroBatchSize": m, ..}, "default": [..]}
//       -> {"sizes": [..]} | {"error": "..."}   (sdk::micro_batch_sizes)
//   {"op": "overrides", "path": P}  (no "path": $ELASTICRUN_CONFIG_FILE)
//       -> {"overrides": {"<nodes>": {"learningRate": x, "microBatchSize": m,
//                                     "minMicroBatchSize": m, "maxMicroBatchSize": m}, ..}}
//          (only the keys the file gives) | {"error": "..."}
//   {"op": "perm", "n": N, "seed": S, "epoch": E, "shuffle": b, "start": a, "stop": b}
//       -> {"values": [..]}
//   {"op": "sampler", "n": N, "seed": S, "shuffle": b, "drop_last": b, "script": [..]}
//       -> {"out": [..]}, one entry per script command:
//          ["world", rank, world, [local batches]] -> null
//          ["epoch", e] / ["advance", k] / ["load", {state}] -> null
//          ["step", ahead] -> [indices]     ["indices"] -> [indices]
//          ["len"] -> n   ["left"] -> steps_left   ["samples"] -> next_step_samples
//          ["state"] -> {state}
//       a command that throws answers {"error": "..."} and the script goes on.
//
// Exit status: 0, or 2 for input that is not such an array.
#include <cstdint>
#include <cstdio>
#include <exception>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "elasticrun/batch.hpp"
#include "elasticrun/sampler.hpp"

namespace {

using elasticrun::sdk::ElasticSampler;
using nlohmann::json;
namespace sdk = elasticrun::sdk;

json state_json(const ElasticSampler::State& s) {
  return {{"version", s.version}, {"dataset_len", s.dataset_len},
          {"seed", s.seed},       {"shuffle", s.shuffle},
          {"epoch", s.epoch},     {"position", s.position}};
}

sdk::Override override_from(const json& value) {
  sdk::Override o;
  if (value.contains("learningRate")) o.learning_rate = value.at("learningRate").get<double>();
  const auto size = [&](const char* key, std::optional<int64_t>& slot) {
    if (value.contains(key)) slot = value.at(key).get<int64_t>();
  };
  size("microBatchSize", o.micro_batch_size);
  size("minMicroBatchSize", o.min_micro_batch_size);
  size("maxMicroBatchSize", o.max_micro_batch_size);
  return o;
}

sdk::Overrides overrides_from(const json& j) {
  sdk::Overrides out;
  for (const auto& [key, value] : j.items()) out[std::stoll(key)] = override_from(value);
  return out;
}

json overrides_json(const sdk::Overrides& overrides) {
  json out = json::object();
  for (const auto& [nodes, o] : overrides) {
    json entry = json::object();
    if (o.learning_rate) entry["learningRate"] = *o.learning_rate;
    if (o.micro_batch_size) entry["microBatchSize"] = *o.micro_batch_size;
    if (o.min_micro_batch_size) entry["minMicroBatchSize"] = *o.min_micro_batch_size;
    if (o.max_micro_batch_size) entry["maxMicroBatchSize"] = *o.max_micro_batch_size;
    out[std::to_string(nodes)] = entry;
  }
  return out;
}

json run_command(ElasticSampler& sampler, const json& cmd) {
  const std::string name = cmd.at(0);
  if (name == "world") {
    sampler.set_world(cmd.at(1), cmd.at(2), cmd.at(3).get<std::vector<int64_t>>());
    return nullptr;
  }
  if (name == "epoch") {
    sampler.set_epoch(cmd.at(1));
    return nullptr;
  }
  if (name == "advance") {
    sampler.advance(cmd.at(1));
    return nullptr;
  }
  if (name == "load") {
    const json& s = cmd.at(1);
    sampler.load_state({s.at("version"), s.at("dataset_len"), s.at("seed"), s.at("shuffle"),
                        s.at("epoch"), s.at("position")});
    return nullptr;
  }
  if (name == "step") return sampler.step_indices(cmd.at(1));
  if (name == "indices") return sampler.indices();
  if (name == "len") return sampler.size();
  if (name == "left") return sampler.steps_left();
  if (name == "samples") return sampler.next_step_samples();
  if (name == "state") return state_json(sampler.state());
  throw std::invalid_argument("unknown sampler command " + name);
}

json answer(const json& q) {
  const std::string op = q.at("op");
  try {
    if (op == "plan") {
      const auto plan = sdk::plan_batches(q.at("g"), q.at("w"), q.at("sizes"), q.at("max_accum"));
      return {{"micro_batches", plan.micro_batches},
              {"accum_steps", plan.accum_steps},
              {"describe", plan.describe()}};
    }
    if (op == "admissible") {
      return {{"sizes", sdk::admissible_world_sizes(q.at("g"), q.at("sizes"), q.at("candidates"),
                                                    q.at("max_accum"))}};
    }
    if (op == "flag") {
      return {{"flag",
               sdk::discrete_values_flag(q.at("g"), q.at("sizes"), q.at("nproc"), q.at("nodes"),
                                         q.at("max_accum"),
                                         overrides_from(q.value("overrides", json::object())))}};
    }
    if (op == "sizes") {
      return {{"sizes", sdk::micro_batch_sizes(override_from(q.at("override")),
                                               q.at("default").get<std::vector<int64_t>>())}};
    }
    if (op == "overrides") {
      return {{"overrides", overrides_json(q.contains("path") ? sdk::load_overrides(q.at("path"))
                                                              : sdk::load_overrides())}};
    }
    if (op == "perm") {
      const sdk::Permutation perm(q.at("n"), q.at("seed"), q.at("epoch"), q.at("shuffle"));
      return {{"values", perm.take(q.at("start"), q.at("stop"))}};
    }
  } catch (const elasticrun::Error& e) {
    return {{"error", e.what()}};
  }
  if (op == "sampler") {
    ElasticSampler sampler(q.at("n"), q.at("seed"), q.at("shuffle"), q.at("drop_last"));
    json out = json::array();
    for (const json& cmd : q.at("script")) {
      try {
        out.push_back(run_command(sampler, cmd));
      } catch (const elasticrun::Error& e) {
        out.push_back({{"error", e.what()}});
      }
    }
    return {{"out", out}};
  }
  throw std::invalid_argument("unknown op " + op);
}

}  // namespace

int main() {
  try {
    const std::string input{std::istreambuf_iterator<char>(std::cin),
                            std::istreambuf_iterator<char>()};
    const json queries = json::parse(input);
    json answers = json::array();
    for (const json& q : queries) answers.push_back(answer(q));
    std::cout << answers.dump() << "\n";
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sdk_tool: %s\n", e.what());
    return 2;
  }
}
