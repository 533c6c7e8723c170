#include "sim/stretch.hpp"

#include <algorithm>

namespace elasticrun::sim {

Stretch stretch(const Trace& trace, Millis length) {
  if (!trace.checkpoint_every) return {length, Millis(0), Millis(0), Millis(0)};
  const Millis every = *trace.checkpoint_every;
  const Millis cycle = every + trace.checkpoint_save;
  const int64_t cycles = length / cycle;
  const Millis rest = length - cycles * cycle;
  return {cycles * every + std::min(rest, every),
          cycles * trace.checkpoint_save + std::max(Millis(0), rest - every), cycles * every,
          cycles * cycle};
}

Millis length_to_train(const Trace& trace, Millis trained) {
  if (trained <= Millis(0)) return Millis(0);
  if (!trace.checkpoint_every) return trained;
  const Millis every = *trace.checkpoint_every;
  // Whole cycles before the last piece of training, which is (0, every].
  const int64_t cycles = (trained - Millis(1)) / every;
  return cycles * (every + trace.checkpoint_save) + (trained - cycles * every);
}

}  // namespace elasticrun::sim
