#include "plan/names.hpp"

#include <array>
#include <utility>

#include "elasticrun/errors.hpp"

namespace elasticrun::plan {
namespace {

template <class E, size_t N>
using Table = std::array<std::pair<E, const char*>, N>;

constexpr Table<Precision, 6> kPrecisions{{{Precision::fp32, "fp32"},
                                           {Precision::bf16, "bf16"},
                                           {Precision::fp16, "fp16"},
                                           {Precision::fp8, "fp8"},
                                           {Precision::mxfp8, "mxfp8"},
                                           {Precision::nvfp4, "nvfp4"}}};
constexpr Table<Optimizer, 2> kOptimizers{{{Optimizer::adam, "adam"}, {Optimizer::sgd, "sgd"}}};
constexpr Table<Sharding, 6> kShardings{{{Sharding::ddp, "ddp"},
                                         {Sharding::zero1, "zero1"},
                                         {Sharding::zero2, "zero2"},
                                         {Sharding::zero3, "zero3"},
                                         {Sharding::fsdp, "fsdp"},
                                         {Sharding::hsdp, "hsdp"}}};
constexpr Table<Checkpointing, 3> kCheckpointings{{{Checkpointing::none, "none"},
                                                   {Checkpointing::full, "full"},
                                                   {Checkpointing::selective, "selective"}}};
constexpr Table<Loss, 3> kLosses{
    {{Loss::eager, "eager"}, {Loss::fused, "fused"}, {Loss::chunked, "chunked"}}};

template <class E, size_t N>
std::string name_of(const Table<E, N>& table, E value) {
  for (const auto& [e, name] : table) {
    if (e == value) return name;
  }
  return "?";
}

template <class E, size_t N>
std::vector<std::string> names_of(const Table<E, N>& table) {
  std::vector<std::string> out;
  for (const auto& entry : table) out.emplace_back(entry.second);
  return out;
}

template <class E, size_t N>
E parse(const Table<E, N>& table, const std::string& name, const char* what) {
  std::string known;
  for (const auto& [e, n] : table) {
    if (name == n) return e;
    known += known.empty() ? n : std::string(", ") + n;
  }
  throw ConfigError(std::string("unknown ") + what + " '" + name + "' (known: " + known + ")");
}

}  // namespace

std::string to_string(Precision p) {
  return name_of(kPrecisions, p);
}
std::string to_string(Optimizer o) {
  return name_of(kOptimizers, o);
}
std::string to_string(Sharding s) {
  return name_of(kShardings, s);
}
std::string to_string(Checkpointing c) {
  return name_of(kCheckpointings, c);
}
std::string to_string(Loss l) {
  return name_of(kLosses, l);
}

Precision parse_precision(const std::string& n) {
  return parse(kPrecisions, n, "precision");
}
Optimizer parse_optimizer(const std::string& n) {
  return parse(kOptimizers, n, "optimizer");
}
Sharding parse_sharding(const std::string& n) {
  return parse(kShardings, n, "sharding");
}
Checkpointing parse_checkpointing(const std::string& n) {
  return parse(kCheckpointings, n, "activation checkpointing");
}
Loss parse_loss(const std::string& n) {
  return parse(kLosses, n, "loss");
}

std::vector<std::string> precision_names() {
  return names_of(kPrecisions);
}
std::vector<std::string> optimizer_names() {
  return names_of(kOptimizers);
}
std::vector<std::string> sharding_names() {
  return names_of(kShardings);
}
std::vector<std::string> checkpointing_names() {
  return names_of(kCheckpointings);
}
std::vector<std::string> loss_names() {
  return names_of(kLosses);
}

}  // namespace elasticrun::plan
