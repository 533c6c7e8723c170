// The batch planner (include/elasticrun/batch.hpp): a port of
// python/elasticrun/batch.py, step for step, so both pick the same plan.
#include "elasticrun/batch.hpp"

#include <algorithm>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "cli/job_config.hpp"

namespace elasticrun::sdk {

namespace {

using Sizes = std::vector<int64_t>;  // ascending, distinct, >= 1

std::string list_text(const Sizes& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + std::to_string(v[i]);
  return out + "]";
}

// Python's _sizes_text: runs of three or more consecutive sizes as
// first..last, so that a range of a million sizes is not a million numbers
// long.
std::string sizes_text(const Sizes& v) {
  std::string out;
  auto add = [&out](const std::string& part) { out += (out.empty() ? "" : ", ") + part; };
  for (size_t i = 0; i < v.size();) {
    size_t j = i;
    while (j + 1 < v.size() && v[j + 1] == v[j] + 1) ++j;
    if (j - i >= 2) {
      add(std::to_string(v[i]) + ".." + std::to_string(v[j]));
    } else {
      for (size_t k = i; k <= j; ++k) add(std::to_string(v[k]));
    }
    i = j + 1;
  }
  return "[" + out + "]";
}

int64_t positive(int64_t value, const char* what) {
  if (value < 1) {
    throw ConfigError(std::string(what) + " must be at least 1, got " + std::to_string(value));
  }
  return value;
}

Sizes sorted_sizes(const std::vector<int64_t>& micro_batch_sizes) {
  std::set<int64_t> unique;
  for (int64_t m : micro_batch_sizes) unique.insert(positive(m, "a micro-batch size"));
  if (unique.empty()) throw ConfigError("micro_batch_sizes is empty");
  return {unique.begin(), unique.end()};
}

// The fewest values from coins (ascending, repeats allowed) summing to
// amount. With d the largest coin, some optimal choice has fewer than d
// others (among d values a nonempty subset sums to a multiple of d, and
// fewer d-coins replace it), so the others sum to at most (d-1)^2: a table
// that far, then d-coins for the rest.
std::optional<Sizes> fewest_coins(int64_t amount, const Sizes& coins) {
  if (coins.empty()) return std::nullopt;
  const int64_t d = coins.back();
  const size_t n_small = coins.size() - 1;
  const int64_t limit = n_small > 0 ? (d - 1) * (d - 1) : 0;
  // best[v]: fewest coins other than the largest summing to v (-1: none);
  // last[v]: one coin of such a choice.
  std::vector<int64_t> best(static_cast<size_t>(limit + 1), -1);
  std::vector<int64_t> last(static_cast<size_t>(limit + 1), 0);
  best[0] = 0;
  for (int64_t v = 1; v <= limit; ++v) {
    for (size_t i = 0; i < n_small; ++i) {
      const int64_t c = coins[i];
      if (c > v) break;
      const int64_t prev = best[static_cast<size_t>(v - c)];
      auto& b = best[static_cast<size_t>(v)];
      if (prev >= 0 && (b < 0 || prev + 1 < b)) {
        b = prev + 1;
        last[static_cast<size_t>(v)] = c;
      }
    }
  }
  std::optional<std::pair<int64_t, int64_t>> choice;  // (count, v)
  for (int64_t v = amount % d; v <= std::min(amount, limit); v += d) {
    if (best[static_cast<size_t>(v)] >= 0) {
      const int64_t count = best[static_cast<size_t>(v)] + (amount - v) / d;
      if (!choice || count < choice->first) choice = std::make_pair(count, v);
    }
  }
  if (!choice) return std::nullopt;
  int64_t v = choice->second;
  Sizes out(static_cast<size_t>((amount - v) / d), d);
  while (v != 0) {
    out.push_back(last[static_cast<size_t>(v)]);
    v -= last[static_cast<size_t>(v)];
  }
  return out;
}

// w sizes (descending) summing to total, by the rules of plan_batches.
std::optional<Sizes> most_even_split(int64_t total, int64_t w, const Sizes& sizes) {
  if (!(w * sizes.front() <= total && total <= w * sizes.back())) return std::nullopt;
  // a: the largest size not above the mean, b: the smallest not below it.
  // Every split has its smallest size <= a and its largest >= b, so when a
  // and b alone make the sum nothing is more even, and nothing is larger.
  const int64_t a = *std::prev(std::upper_bound(sizes.begin(), sizes.end(), total / w));
  const int64_t b = *std::lower_bound(sizes.begin(), sizes.end(), (total + w - 1) / w);
  const auto uw = static_cast<size_t>(w);
  if (a == b) return Sizes(uw, a);
  const int64_t at_b = (total - w * a) / (b - a);
  if ((total - w * a) % (b - a) == 0) {
    Sizes out(static_cast<size_t>(at_b), b);
    out.resize(uw, a);
    return out;
  }
  // The sizes have gaps and a, b miss the sum: try every (smallest,
  // largest) pair, most even first, then larger first.
  std::vector<std::tuple<int64_t, int64_t, int64_t, int64_t>> pairs;
  for (int64_t lo : sizes) {
    for (int64_t hi : sizes) {
      if (lo < hi && w * lo <= total && total <= w * hi) pairs.emplace_back(hi - lo, -lo, lo, hi);
    }
  }
  std::sort(pairs.begin(), pairs.end());
  for (const auto& [spread, neg_lo, lo, hi] : pairs) {
    Sizes steps;
    for (int64_t s : sizes) {
      if (lo < s && s <= hi) steps.push_back(s - lo);
    }
    auto coins = fewest_coins(total - w * lo, steps);
    if (coins && coins->size() <= uw) {
      Sizes out;
      for (int64_t c : *coins) out.push_back(lo + c);
      std::sort(out.rbegin(), out.rend());
      out.resize(uw, lo);
      return out;
    }
  }
  return std::nullopt;
}

std::optional<BatchPlan> find_plan(int64_t g, int64_t w, const Sizes& sizes, int64_t accum_limit) {
  for (int64_t accum = 1; accum <= accum_limit; ++accum) {
    if (accum * w * sizes.front() > g) break;  // more accumulation only needs more samples
    if (g % accum == 0) {
      if (auto micro = most_even_split(g / accum, w, sizes)) {
        return BatchPlan{g, std::move(*micro), accum};
      }
    }
  }
  return std::nullopt;
}

std::string why_not(int64_t g, int64_t w, const Sizes& sizes, int64_t accum_limit) {
  const std::string head = "no plan for global batch " + std::to_string(g) + " on " +
                           std::to_string(w) + " ranks with micro-batch sizes " +
                           sizes_text(sizes) + " and at most " + std::to_string(accum_limit) +
                           " accumulation steps: ";
  if (w * sizes.front() > g) {
    return head + std::to_string(w) + " ranks at the smallest micro-batch (" +
           std::to_string(sizes.front()) + ") already take " + std::to_string(w * sizes.front()) +
           " samples per step";
  }
  return head + "no common accumulation count k divides " + std::to_string(g) + " so that " +
         std::to_string(g) + "/k is a sum of " + std::to_string(w) +
         " allowed micro-batch sizes; try more sizes, another world size "
         "(admissible_world_sizes) or a larger max_accum";
}

std::string plural(int64_t n, const char* word) {
  return std::to_string(n) + " " + word + (n != 1 ? "s" : "");
}

}  // namespace

std::vector<int64_t> BatchPlan::local_batches() const {
  std::vector<int64_t> out;
  for (int64_t m : micro_batches) out.push_back(m * accum_steps);
  return out;
}

int64_t BatchPlan::micro_batch(int rank) const {
  if (rank < 0 || rank >= world_size()) {
    throw ConfigError("rank " + std::to_string(rank) + " is outside a world of " +
                      std::to_string(world_size()) + " ranks");
  }
  return micro_batches[static_cast<size_t>(rank)];
}

int64_t BatchPlan::local_batch(int rank) const {
  return micro_batch(rank) * accum_steps;
}

std::string BatchPlan::describe() const {
  std::vector<std::pair<int64_t, int64_t>> runs;  // (micro, ranks), in rank order
  for (int64_t m : micro_batches) {
    if (!runs.empty() && runs.back().first == m) {
      ++runs.back().second;
    } else {
      runs.emplace_back(m, 1);
    }
  }
  std::string split;
  for (const auto& [m, n] : runs) {
    split += (split.empty() ? "" : " + ") + plural(n, "rank") + " x " + std::to_string(m);
  }
  return "global batch " + std::to_string(global_batch) + " on " + plural(world_size(), "rank") +
         " = " + split + ", " + plural(accum_steps, "accumulation step");
}

BatchPlan plan_batches(int64_t global_batch, int64_t world_size,
                       const std::vector<int64_t>& micro_batch_sizes, int64_t max_accum) {
  const int64_t g = positive(global_batch, "global_batch");
  const int64_t w = positive(world_size, "world_size");
  const Sizes sizes = sorted_sizes(micro_batch_sizes);
  const int64_t accum_limit = positive(max_accum, "max_accum");
  auto plan = find_plan(g, w, sizes, accum_limit);
  if (!plan) throw ConfigError(why_not(g, w, sizes, accum_limit));
  return std::move(*plan);
}

std::vector<int64_t> admissible_world_sizes(int64_t global_batch,
                                            const std::vector<int64_t>& micro_batch_sizes,
                                            const std::vector<int64_t>& candidates,
                                            int64_t max_accum) {
  const int64_t g = positive(global_batch, "global_batch");
  const Sizes sizes = sorted_sizes(micro_batch_sizes);
  const int64_t accum_limit = positive(max_accum, "max_accum");
  std::set<int64_t> worlds;
  for (int64_t w : candidates) worlds.insert(positive(w, "a candidate world size"));
  std::vector<int64_t> out;
  for (int64_t w : worlds) {
    if (find_plan(g, w, sizes, accum_limit)) out.push_back(w);
  }
  return out;
}

std::vector<int64_t> micro_batch_sizes(const Override& override,
                                       const std::vector<int64_t>& fallback) {
  // Python's checks, in its order, with its messages.
  const auto& low = override.min_micro_batch_size;
  const auto& high = override.max_micro_batch_size;
  if (override.micro_batch_size) {
    if (low || high) {
      throw ConfigError(
          "an override gives microBatchSize (one size) or "
          "minMicroBatchSize/maxMicroBatchSize (a range), not both");
    }
    return {*override.micro_batch_size};  // plan_batches refuses one below 1
  }
  if (!high) {
    if (low) throw ConfigError("minMicroBatchSize needs maxMicroBatchSize");
    return fallback;
  }
  const int64_t top = positive(*high, "maxMicroBatchSize");
  const int64_t bottom = low ? positive(*low, "minMicroBatchSize") : 1;
  if (top > cli::kMaxMicroBatchRange) {
    throw ConfigError("maxMicroBatchSize must be at most " +
                      std::to_string(cli::kMaxMicroBatchRange) + ", got " + std::to_string(top));
  }
  if (bottom > top) {
    throw ConfigError("minMicroBatchSize " + std::to_string(bottom) +
                      " is above maxMicroBatchSize " + std::to_string(top));
  }
  std::vector<int64_t> out;
  for (int64_t m = bottom; m <= top; ++m) out.push_back(m);
  return out;
}

std::string discrete_values_flag(int64_t global_batch,
                                 const std::vector<int64_t>& micro_batch_sizes,
                                 int64_t nproc_per_node, const std::vector<int64_t>& nodes,
                                 int64_t max_accum, const Overrides& overrides) {
  // Arguments are checked in Python's order, so a call with several bad ones
  // is refused with the same message in both languages.
  const int64_t g = positive(global_batch, "global_batch");
  const int64_t per_node = positive(nproc_per_node, "nproc_per_node");
  const Sizes default_sizes = sorted_sizes(micro_batch_sizes);
  const int64_t accum_limit = positive(max_accum, "max_accum");
  std::set<int64_t> unique;
  for (int64_t n : nodes) unique.insert(positive(n, "a node count"));
  const Sizes counts(unique.begin(), unique.end());
  std::string admitted;
  for (int64_t n : counts) {
    const auto it = overrides.find(n);
    const Sizes sizes = it == overrides.end()
                            ? default_sizes
                            : sorted_sizes(sdk::micro_batch_sizes(it->second, default_sizes));
    if (find_plan(g, n * per_node, sizes, accum_limit)) {
      admitted += (admitted.empty() ? "" : ",") + std::to_string(n);
    }
  }
  if (admitted.empty()) {
    throw ConfigError("no node count in " + list_text(counts) + " admits global batch " +
                      std::to_string(g) + " with " + std::to_string(per_node) +
                      " ranks per node, micro-batch sizes " + list_text(default_sizes) +
                      " and at most " + std::to_string(accum_limit) + " accumulation steps");
  }
  return "--replica-discrete-values " + admitted;
}

}  // namespace elasticrun::sdk
