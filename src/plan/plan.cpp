#include "plan/plan.hpp"

#include <cmath>
#include <cstdio>

#include "elasticrun/errors.hpp"

namespace elasticrun::plan {
namespace {

// The bisection's upper end: it keeps the arithmetic in range, and no GPU
// holds a micro-batch of 2^30 sequences.
constexpr int64_t kMicroBatchCap = int64_t{1} << 30;

std::string gib(double bytes) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.1f GiB", bytes / (1024.0 * 1024 * 1024));
  return buffer;
}

// The largest of the five terms, for the message when nothing fits.
std::string largest_term(const Breakdown& b) {
  std::pair<double, const char*> best{b.weights, "weights"};
  for (const auto& term : {std::pair{b.gradients, "gradients"},
                           {b.optimizer, "optimizer states"},
                           {b.activations, "activations"},
                           {b.temporaries, "temporaries"}}) {
    if (term.first > best.first) best = term;
  }
  return std::string(best.second) + " " + gib(best.first);
}

// The largest divisor of n that is at most limit (limit >= 1).
int64_t largest_divisor_at_most(int64_t n, int64_t limit) {
  int64_t best = 1;
  for (int64_t d = 1; d * d <= n; ++d) {
    if (n % d != 0) continue;
    if (d <= limit && d > best) best = d;
    if (n / d <= limit && n / d > best) best = n / d;
  }
  return best;
}

void check(const PlanRequest& r) {
  validate(r.setup);
  if (r.world_sizes.empty()) throw ConfigError("no world sizes to plan for");
  if (!(r.gpu_memory_bytes > 0)) throw ConfigError("the GPU memory must be above 0");
  if (!(r.margin >= 0 && r.margin < 1)) throw ConfigError("the margin must be in [0, 1)");
  if (r.global_batch && *r.global_batch < 1) throw ConfigError("the global batch must be >= 1");
  if (r.max_accum < 1) throw ConfigError("the accumulation limit must be at least 1");
  if (r.micro_batch && *r.micro_batch < 1) throw ConfigError("the micro-batch must be >= 1");
  if (r.gpus_per_node < 0) throw ConfigError("the GPUs per node must be at least 1");
  for (const int64_t w : r.world_sizes) {
    if (w < 1) throw ConfigError("world sizes must be at least 1");
    if (r.gpus_per_node > 0 && w % r.gpus_per_node != 0) {
      throw ConfigError("world size " + std::to_string(w) + " is not a whole number of " +
                        std::to_string(r.gpus_per_node) + "-GPU nodes");
    }
  }
}

SizePlan plan_size(const PlanRequest& r, int64_t ranks, double budget) {
  SizePlan s;
  s.ranks = ranks;
  if (r.gpus_per_node > 0) s.nodes = ranks / r.gpus_per_node;
  s.shard_degree = shard_degree(r.setup, ranks);
  const std::string at = "at " + std::to_string(ranks) + " ranks";
  if (r.setup.sharding != Sharding::ddp && r.setup.shard_group > 0 && ranks % s.shard_degree != 0) {
    s.warnings.push_back(at + ": the ranks do not split into shard groups of " +
                         std::to_string(s.shard_degree));
  }
  s.largest_fit = largest_micro_batch(r.setup, ranks, budget);
  if (s.largest_fit == 0 && !r.micro_batch) {
    s.peak = per_rank_memory(r.setup, ranks, 1);
    s.warnings.push_back(at + ": nothing fits: micro-batch 1 needs " + gib(s.peak.total()) +
                         " per rank, over the budget of " + gib(budget) +
                         " (largest term: " + largest_term(s.peak) + ")");
    return s;
  }
  if (r.micro_batch) {
    s.micro_batch = *r.micro_batch;
    if (s.micro_batch > s.largest_fit) {
      s.warnings.push_back(at + ": micro-batch " + std::to_string(s.micro_batch) +
                           " does not fit (the largest that does is " +
                           std::to_string(s.largest_fit) + ")");
    }
    if (r.global_batch) {
      const int64_t step = ranks * s.micro_batch;
      s.accumulation = (*r.global_batch + step - 1) / step;
      s.keeps_global_batch = *r.global_batch % step == 0;
      if (!s.keeps_global_batch) {
        s.warnings.push_back(at + ": micro-batch " + std::to_string(s.micro_batch) +
                             " does not divide the global batch; accumulation rounded up to " +
                             std::to_string(*s.accumulation));
      }
    }
  } else if (!r.global_batch) {
    s.micro_batch = s.largest_fit;
  } else if (*r.global_batch % ranks == 0) {
    const int64_t per_rank = *r.global_batch / ranks;
    s.micro_batch = largest_divisor_at_most(per_rank, s.largest_fit);
    s.accumulation = per_rank / s.micro_batch;
    s.keeps_global_batch = true;
    if (*s.accumulation > r.max_accum) {
      s.warnings.push_back(at + ": " + std::to_string(*s.accumulation) +
                           " accumulation steps, more than the SDK's limit of " +
                           std::to_string(r.max_accum));
    }
  } else {
    // No micro-batch common to all ranks makes the global batch: round the
    // accumulation up, so the step holds at least the global batch.
    const int64_t per_rank = (*r.global_batch + ranks - 1) / ranks;
    s.micro_batch = std::min(s.largest_fit, per_rank);
    s.accumulation = (per_rank + s.micro_batch - 1) / s.micro_batch;
    s.warnings.push_back(at + ": the global batch " + std::to_string(*r.global_batch) +
                         " is not a multiple of the ranks; " + std::to_string(ranks) + " x " +
                         std::to_string(s.micro_batch) + " x " + std::to_string(*s.accumulation) +
                         " = " + std::to_string(ranks * s.micro_batch * *s.accumulation));
  }
  s.peak = per_rank_memory(r.setup, ranks, s.micro_batch);
  return s;
}

}  // namespace

int64_t largest_micro_batch(const TrainingSetup& setup, int64_t world_size, double budget) {
  // The peak never falls as the micro-batch grows (every term is constant
  // or grows with it), so bisect: fits(lo) holds, fits(hi) does not.
  auto fits = [&](int64_t m) { return per_rank_memory(setup, world_size, m).total() <= budget; };
  if (!fits(1)) return 0;
  if (fits(kMicroBatchCap)) return kMicroBatchCap;
  int64_t lo = 1;
  int64_t hi = kMicroBatchCap;
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    (fits(mid) ? lo : hi) = mid;
  }
  return lo;
}

Plan make_plan(const PlanRequest& r) {
  check(r);
  Plan plan;
  plan.request = r;
  plan.budget_bytes = r.gpu_memory_bytes * (1 - r.margin);
  plan.recompute_overhead = recompute_overhead(r.setup);
  bool any = false;
  for (const int64_t w : r.world_sizes) {
    plan.sizes.push_back(plan_size(r, w, plan.budget_bytes));
    any = any || plan.sizes.back().largest_fit > 0;
  }
  if (!any) {
    plan.warnings.push_back(
        "nothing fits at any world size: shard more (fsdp), checkpoint activations, shorten the "
        "sequence or use more GPU memory");
  }
  return plan;
}

}  // namespace elasticrun::plan
