// Exactly-once data within an epoch across resizes: the C++ twin of the
// Python SDK's elasticrun.ElasticSampler (docs/sdk-python.md, "Exactly-once
// data"). For the same dataset length, seed, epoch and sequence of worlds
// both give every rank the same indices, and their states are the same six
// integers, so a checkpoint written by one can resume the other.
//
// The epoch's order is one permutation of [0, dataset_len), fixed by (seed,
// epoch) and not by the world size. The state is the position: samples of
// the epoch consumed job wide. A step takes the next global_batch samples of
// the permutation; rank r takes the contiguous slice [offset_r, offset_r +
// local_batch_r) of them. Only advance() moves the position.
#pragma once

#include <cstdint>
#include <vector>

#include "elasticrun/batch.hpp"
#include "elasticrun/errors.hpp"

namespace elasticrun::sdk {

// The epoch's order: a bijection of [0, n) keyed by (seed, epoch): a 6-round
// Feistel network on the smallest power of two >= n (at least 4),
// cycle-walked into range. Defined exactly in python/elasticrun/sampler.py
// (_Permutation); this is the same function.
class Permutation {
 public:
  Permutation(uint64_t n, uint64_t seed, uint64_t epoch, bool shuffle);
  // perm(i) for 0 <= i < n.
  uint64_t operator()(uint64_t i) const;
  // [perm(i) for i in [start, stop)].
  std::vector<uint64_t> take(uint64_t start, uint64_t stop) const;

 private:
  struct Round {
    uint64_t key;
    unsigned t, u;
    uint64_t t_mask, u_mask;
  };
  uint64_t n_;
  bool shuffle_;
  Round rounds_[6] = {};
};

class ElasticSampler {
 public:
  // The same on every rank and in the Python SDK: what a checkpoint holds.
  struct State {
    int64_t version = 1;
    uint64_t dataset_len = 0;
    uint64_t seed = 0;
    int64_t shuffle = 1;
    uint64_t epoch = 0;
    uint64_t position = 0;
    bool operator==(const State&) const = default;
  };

  explicit ElasticSampler(uint64_t dataset_len, uint64_t seed = 0, bool shuffle = true,
                          bool drop_last = false);

  // This rank and every rank's local batch (samples per optimizer step);
  // their sum is the global batch. The position is kept. ConfigError for a
  // world that does not add up.
  void set_world(int64_t rank, int64_t world_size, const std::vector<int64_t>& local_batches);
  void set_world(int64_t rank, int64_t world_size, int64_t local_batch_each);
  void set_world(int64_t rank, const BatchPlan& plan);

  // A different epoch starts at position 0; the same one keeps the position.
  void set_epoch(uint64_t epoch);

  uint64_t dataset_len() const { return n_; }
  uint64_t epoch() const { return epoch_; }
  uint64_t position() const { return position_; }
  bool drop_last() const { return drop_last_; }
  // The rest need set_world() first (else ConfigError).
  uint64_t global_batch() const;
  // Optimizer steps left in this epoch, the short last one included.
  uint64_t steps_left() const;
  // Samples, job wide, of the next step (less on a short last step, 0 at
  // the end of the epoch): for scaling the loss.
  uint64_t next_step_samples() const;
  // This rank's indices of the step steps_ahead after the position; empty
  // past the end of the epoch.
  std::vector<uint64_t> step_indices(uint64_t steps_ahead = 0) const;
  // The job finished `steps` more optimizer steps; ConfigError past the
  // epoch's end.
  void advance(uint64_t steps = 1);
  // This rank's indices for the rest of the epoch, a local batch per step
  // (Python's iter(sampler)); size() counts them.
  std::vector<uint64_t> indices() const;
  uint64_t size() const;

  State state() const;
  // Restores epoch and position; ConfigError for a state of another dataset
  // length, seed, shuffle setting or version.
  void load_state(const State& state);

 private:
  void need_world() const;
  // This rank's [lo, hi) within a step of `size` samples.
  std::pair<uint64_t, uint64_t> slice(uint64_t size) const;

  uint64_t n_;
  uint64_t seed_;
  bool shuffle_;
  bool drop_last_;
  uint64_t epoch_ = 0;
  uint64_t position_ = 0;
  Permutation perm_;
  int64_t rank_ = -1;
  std::vector<uint64_t> local_;
  std::vector<uint64_t> offsets_;
};

}  // namespace elasticrun::sdk
