// The elastic sampler (include/elasticrun/sampler.hpp): a port of
// python/elasticrun/sampler.py; the permutation is bit for bit the same.
#include "elasticrun/sampler.hpp"

#include <bit>
#include <string>
#include <utility>

namespace elasticrun::sdk {

namespace {

// SplitMix64's output function.
uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

std::string num(uint64_t v) {
  return std::to_string(v);
}

// Products of a size and an offset can pass 2^64 for huge datasets, where
// Python's integers simply grow.
__extension__ typedef unsigned __int128 u128;

}  // namespace

Permutation::Permutation(uint64_t n, uint64_t seed, uint64_t epoch, bool shuffle)
    : n_(n), shuffle_(shuffle && n > 1) {
  if (!shuffle_) return;
  const unsigned bits = std::max(2u, static_cast<unsigned>(std::bit_width(n - 1)));
  const unsigned half = bits / 2;
  const uint64_t base = mix64(mix64(seed) + epoch);  // both mod 2^64, as in Python
  for (unsigned i = 0; i < 6; ++i) {
    Round& r = rounds_[i];
    r.t = i % 2 == 0 ? half : bits - half;
    r.u = bits - r.t;
    r.key = mix64(base + (i + 1) * 0x9E3779B97F4A7C15ULL);
    r.t_mask = (uint64_t{1} << r.t) - 1;
    r.u_mask = r.u >= 64 ? ~uint64_t{0} : (uint64_t{1} << r.u) - 1;
  }
}

uint64_t Permutation::operator()(uint64_t i) const {
  if (!shuffle_) return i;
  uint64_t x = i;
  do {  // cycle-walk: fewer than 2 passes on average (2^bits < 2n)
    for (const Round& r : rounds_) {
      const uint64_t low = x & r.u_mask;
      x = (low << r.t) | ((x >> r.u) ^ (mix64(r.key ^ low) & r.t_mask));
    }
  } while (x >= n_);
  return x;
}

std::vector<uint64_t> Permutation::take(uint64_t start, uint64_t stop) const {
  std::vector<uint64_t> out;
  if (stop > start) out.reserve(stop - start);
  for (uint64_t i = start; i < stop; ++i) out.push_back((*this)(i));
  return out;
}

ElasticSampler::ElasticSampler(uint64_t dataset_len, uint64_t seed, bool shuffle, bool drop_last)
    : n_(dataset_len),
      seed_(seed),
      shuffle_(shuffle),
      drop_last_(drop_last),
      perm_(dataset_len, seed, 0, shuffle) {}

void ElasticSampler::set_world(int64_t rank, int64_t world_size,
                               const std::vector<int64_t>& local_batches) {
  if (world_size < 1) throw ConfigError("world_size must be at least 1");
  std::string listed = "[";
  bool below_one = false;
  for (size_t i = 0; i < local_batches.size(); ++i) {
    if (local_batches[i] < 0) {
      throw ConfigError("a local batch must not be negative, got " +
                        std::to_string(local_batches[i]));
    }
    below_one = below_one || local_batches[i] < 1;
    listed += (i ? ", " : "") + std::to_string(local_batches[i]);
  }
  if (static_cast<int64_t>(local_batches.size()) != world_size) {
    throw ConfigError(std::to_string(local_batches.size()) + " local batches for a world of " +
                      std::to_string(world_size) + " ranks");
  }
  if (below_one) throw ConfigError("every local batch must be at least 1, got " + listed + "]");
  if (rank < 0) throw ConfigError("rank must not be negative, got " + std::to_string(rank));
  if (rank >= world_size) {
    throw ConfigError("rank " + std::to_string(rank) + " is outside a world of " +
                      std::to_string(world_size) + " ranks");
  }
  local_.clear();
  offsets_.clear();
  uint64_t total = 0;
  for (int64_t b : local_batches) {
    offsets_.push_back(total);
    local_.push_back(static_cast<uint64_t>(b));
    total += static_cast<uint64_t>(b);
  }
  rank_ = rank;
}

void ElasticSampler::set_world(int64_t rank, int64_t world_size, int64_t local_batch_each) {
  if (world_size < 1) throw ConfigError("world_size must be at least 1");
  set_world(rank, world_size,
            std::vector<int64_t>(static_cast<size_t>(world_size), local_batch_each));
}

void ElasticSampler::set_world(int64_t rank, const BatchPlan& plan) {
  set_world(rank, plan.world_size(), plan.local_batches());
}

void ElasticSampler::set_epoch(uint64_t epoch) {
  if (epoch != epoch_) {
    epoch_ = epoch;
    position_ = 0;
    perm_ = Permutation(n_, seed_, epoch, shuffle_);
  }
}

void ElasticSampler::need_world() const {
  if (rank_ < 0) throw ConfigError("call set_world(rank, world_size, local_batches) first");
}

uint64_t ElasticSampler::global_batch() const {
  need_world();
  return offsets_.back() + local_.back();
}

uint64_t ElasticSampler::steps_left() const {
  const uint64_t g = global_batch();
  const uint64_t rest = n_ - position_;
  return rest / g + (rest % g != 0 && !drop_last_ ? 1 : 0);
}

uint64_t ElasticSampler::next_step_samples() const {
  if (steps_left() == 0) return 0;
  return std::min(global_batch(), n_ - position_);
}

std::pair<uint64_t, uint64_t> ElasticSampler::slice(uint64_t size) const {
  const uint64_t g = global_batch();
  const auto r = static_cast<size_t>(rank_);
  const uint64_t off = offsets_[r], local = local_[r];
  if (size == g) return {off, off + local};
  const auto lo = static_cast<uint64_t>(static_cast<u128>(size) * off / g);
  const auto hi = static_cast<uint64_t>(static_cast<u128>(size) * (off + local) / g);
  return {lo, hi};
}

std::vector<uint64_t> ElasticSampler::step_indices(uint64_t steps_ahead) const {
  if (steps_ahead >= steps_left()) return {};
  const uint64_t g = global_batch();
  const uint64_t start = position_ + steps_ahead * g;
  const auto [lo, hi] = slice(std::min(g, n_ - start));
  return perm_.take(start + lo, start + hi);
}

void ElasticSampler::advance(uint64_t steps) {
  const uint64_t left = steps_left();
  if (steps > left) {
    throw ConfigError("cannot advance " + num(steps) + " steps: epoch " + num(epoch_) + " has " +
                      num(left) + " left (position " + num(position_) + " of " + num(n_) + ")");
  }
  const u128 moved = static_cast<u128>(position_) + static_cast<u128>(steps) * global_batch();
  position_ = moved > n_ ? n_ : static_cast<uint64_t>(moved);
}

std::vector<uint64_t> ElasticSampler::indices() const {
  std::vector<uint64_t> out;
  const uint64_t steps = steps_left();
  for (uint64_t k = 0; k < steps; ++k) {
    const auto step = step_indices(k);
    out.insert(out.end(), step.begin(), step.end());
  }
  return out;
}

uint64_t ElasticSampler::size() const {
  const uint64_t g = global_batch();
  const uint64_t rest = n_ - position_;
  uint64_t count = rest / g * local_[static_cast<size_t>(rank_)];
  if (rest % g != 0 && !drop_last_) {
    const auto [lo, hi] = slice(rest % g);
    count += hi - lo;
  }
  return count;
}

ElasticSampler::State ElasticSampler::state() const {
  return State{1, n_, seed_, shuffle_ ? 1 : 0, epoch_, position_};
}

void ElasticSampler::load_state(const State& s) {
  if (s.version != 1) {
    throw ConfigError("sampler state version " + std::to_string(s.version) + "; this SDK reads 1");
  }
  auto refuse = [](const char* key, const std::string& theirs, const std::string& mine) {
    throw ConfigError(std::string("sampler state has ") + key + "=" + theirs + ", this sampler " +
                      key + "=" + mine);
  };
  if (s.dataset_len != n_) refuse("dataset_len", num(s.dataset_len), num(n_));
  if (s.seed != seed_) refuse("seed", num(s.seed), num(seed_));
  if (s.shuffle != (shuffle_ ? 1 : 0)) {
    refuse("shuffle", std::to_string(s.shuffle), shuffle_ ? "1" : "0");
  }
  if (s.position > n_) {
    throw ConfigError("sampler state has epoch " + num(s.epoch) + ", position " + num(s.position) +
                      " (dataset_len " + num(n_) + ")");
  }
  set_epoch(s.epoch);
  position_ = s.position;
}

}  // namespace elasticrun::sdk
