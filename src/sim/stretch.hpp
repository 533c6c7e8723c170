// What one stretch of training at one size leaves behind under the trace's
// periodic checkpoints: time trained, time saving, and what the last
// completed checkpoint holds. The simulator's accounting and its series
// both read it.
#pragma once

#include "sim/duration.hpp"
#include "sim/trace.hpp"

namespace elasticrun::sim {

struct Stretch {
  Millis trained{0};
  Millis checkpointing{0};  // periodic saves stalling training
  Millis durable{0};        // what the last completed checkpoint holds
  Millis durable_at{0};     // when that checkpoint completed, from the start
};

// `length` of running from the checkpoint just loaded: with
// checkpoint_every, cycles of checkpoint_every training then
// checkpoint_save saving; without, all training and nothing durable.
Stretch stretch(const Trace& trace, Millis length);

// The shortest length of running from the checkpoint just loaded after
// which `trained` of training is done: stretch()'s inverse (a save falls
// after the training it follows, so a stretch ending exactly at a
// checkpoint's start does not pay it).
Millis length_to_train(const Trace& trace, Millis trained);

}  // namespace elasticrun::sim
