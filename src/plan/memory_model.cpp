// The formula of docs/planner.md, term by term; the names below are its
// symbols (h hidden, f ffn_hidden, a heads, kvd = kv_heads * head_dim, V
// vocab, L layers, d shard degree).
#include "plan/memory_model.hpp"

#include <algorithm>
#include <vector>

#include "elasticrun/errors.hpp"
#include "plan/names.hpp"
#include "plan/precision_bytes.hpp"

namespace elasticrun::plan {
namespace {

bool shards_optimizer(Sharding s) {
  return s != Sharding::ddp;
}
bool shards_gradients(Sharding s) {
  return s != Sharding::ddp && s != Sharding::zero1;
}
// The primary (fp32 or quantised) parameters; zero2 gathers their compute
// copy once for the whole step, the others one unit at a time.
bool shards_parameters(Sharding s) {
  return s != Sharding::ddp && s != Sharding::zero1;
}

double kv_dim(const ModelShape& m) {
  const int64_t kv = m.kv_heads > 0 ? m.kv_heads : m.heads;
  return static_cast<double>(kv * (m.hidden / m.heads));
}

// Bytes one token leaves saved in one decoder layer without checkpointing.
double layer_bytes_per_token(const TrainingSetup& s) {
  const ModelShape& m = s.model;
  const auto h = static_cast<double>(m.hidden);
  const auto f = static_cast<double>(m.ffn_hidden);
  const double c = compute_bytes(s.precision);
  const bool fused = is_quantized(s.precision);  // the recipe implies TE's fused modules
  const double norm = (fused ? 1 : 2) * h * c;   // input (and, eager, the normalised input)
  const double linear_inputs = (3 * h + f) * saved_linear_input_bytes(s.precision);
  const double attention = (2 * h + 2 * kv_dim(m)) * c + 4.0 * static_cast<double>(m.heads);
  const double swiglu = (fused ? 2 : 3) * f * c;  // gate, up (and, eager, silu(gate))
  return 2 * norm + linear_inputs + attention + swiglu;
}

// What the core attention keeps for its own backward: its output and the
// fp32 log-sum-exp per head. Selective checkpointing recomputes them.
double core_attention_bytes_per_token(const TrainingSetup& s) {
  return static_cast<double>(s.model.hidden) * compute_bytes(s.precision) +
         4.0 * static_cast<double>(s.model.heads);
}

// What the loss keeps for the backward, per token: eager, the fp32
// log-probabilities; fused, the logits in the compute dtype; chunked, nothing.
double loss_saved_bytes_per_token(const TrainingSetup& s) {
  const auto vocab = static_cast<double>(s.model.vocab);
  switch (s.loss) {
    case Loss::eager:
      return 4 * vocab;
    case Loss::fused:
      return compute_bytes(s.precision) * vocab;
    case Loss::chunked:
      return 0;
  }
  return 0;
}

// What the loss's backward adds while it runs: with the eager loss, the
// fp32 gradients of the log-probabilities and of the logits, both alive
// while log_softmax's backward runs; the others write in place or by chunk.
double loss_temporary_bytes_per_token(const TrainingSetup& s) {
  return s.loss == Loss::eager ? 8.0 * static_cast<double>(s.model.vocab) : 0.0;
}

// The final norm, the output head's input and what the loss saves.
double head_bytes_per_token(const TrainingSetup& s) {
  const auto h = static_cast<double>(s.model.hidden);
  const double c = compute_bytes(s.precision);
  return (is_quantized(s.precision) ? 1 : 2) * h * c + h * c + loss_saved_bytes_per_token(s);
}

double activation_bytes_per_token(const TrainingSetup& s) {
  const auto layers = static_cast<double>(s.model.layers);
  const double layer = layer_bytes_per_token(s);
  double blocks = 0;
  switch (s.checkpointing) {
    case Checkpointing::none:
      blocks = layers * layer;
      break;
    case Checkpointing::selective:
      blocks = layers * (layer - core_attention_bytes_per_token(s));
      break;
    case Checkpointing::full: {
      // Each layer's input, and one layer recomputed during its backward.
      // The last layer is recomputed after the head's and the loss's
      // backward freed what they held, so it adds only what it exceeds them by.
      const double after_loss = head_bytes_per_token(s) + loss_temporary_bytes_per_token(s);
      blocks = layers * static_cast<double>(s.model.hidden) * compute_bytes(s.precision) +
               std::max(0.0, layer - after_loss);
      break;
    }
  }
  return blocks + head_bytes_per_token(s);
}

// Bytes of one unit's gathered (unsharded) compute copy, with TE's
// quantised copy of its matrices when the recipe makes one per forward.
double gathered_bytes(const TrainingSetup& s, const Unit& u) {
  const double c = compute_bytes(s.precision);
  if (!is_quantized(s.precision)) return u.params * c;
  if (s.quantized_init)
    return (u.params - u.linear) * c + u.linear * stored_weight_bytes(s.precision);
  return u.params * c + u.linear * stored_weight_bytes(s.precision);
}

// What FSDP2 (zero3, fsdp, hsdp) holds beside the sharded states at the
// fullest moment of a unit's backward, over the units in backward order
// (docs/planner.md, "Temporaries"). While unit k computes: its gathered
// copy, its unsharded gradients in the compute dtype, the next unit's
// all-gather output (prefetched) and the previous unit's fp32
// reduce-scatter input (FSDP2 keeps it until k's own reduce-scatter). At
// k's reduce-scatter, k resharded: the prefetch, k's reduce-scatter input,
// and k's gradients until they are copied in, then the sharded output.
double fsdp_backward_bytes(const TrainingSetup& s, const ParameterCounts& p, double d) {
  const double c = compute_bytes(s.precision);
  const double r = 4;  // MixedPrecisionPolicy(reduce_dtype=torch.float32)
  const bool tied = s.model.tied_embeddings;
  // A tied embedding-and-head unit is used first and last in the forward:
  // gathered, with its gradient accumulating, from the head's backward to
  // the embedding's, and reduce-scattered last.
  const double held = tied ? gathered_bytes(s, p.head) + c * p.head.params : 0;
  std::vector<Unit> order;
  if (!tied) order.push_back(p.head);
  for (int64_t i = 0; i < s.model.layers; ++i) order.push_back(p.layer);
  if (!tied) order.push_back(p.embedding);

  double peak = 0;
  auto reduce = [&](const Unit& u) { return r * u.params + std::max(c, r / d) * u.params; };
  for (size_t k = 0; k < order.size(); ++k) {
    const Unit& u = order[k];
    const double prefetched = k + 1 < order.size() ? gathered_bytes(s, order[k + 1]) : 0;
    const double previous = k > 0 ? r * order[k - 1].params : 0;
    const double compute = gathered_bytes(s, u) + c * u.params + prefetched + previous;
    peak = std::max(peak, held + std::max(compute, prefetched + reduce(u)));
  }
  if (tied) peak = std::max(peak, reduce(p.head));
  return peak;
}

}  // namespace

void validate(const TrainingSetup& s) {
  const ModelShape& m = s.model;
  auto need = [](bool ok, const std::string& why) {
    if (!ok) throw ConfigError(why);
  };
  need(m.layers >= 1, "the model needs at least 1 layer");
  need(m.hidden >= 1, "the hidden size must be at least 1");
  need(m.heads >= 1, "the model needs at least 1 attention head");
  need(m.hidden % m.heads == 0, "the hidden size (" + std::to_string(m.hidden) +
                                    ") must be a multiple of the heads (" +
                                    std::to_string(m.heads) + ")");
  need(m.kv_heads >= 0 && m.kv_heads <= m.heads, "kv heads must be between 1 and the heads");
  need(m.kv_heads == 0 || m.heads % m.kv_heads == 0, "the heads (" + std::to_string(m.heads) +
                                                         ") must be a multiple of the kv heads (" +
                                                         std::to_string(m.kv_heads) + ")");
  need(m.vocab >= 1, "the vocabulary must have at least 1 entry");
  need(m.ffn_hidden >= 1, "the ffn hidden size must be at least 1");
  need(!m.parameters || *m.parameters >= 1, "the parameter count must be at least 1");
  need(s.seq_len >= 1, "the sequence length must be at least 1");
  need(!s.quantized_init || is_quantized(s.precision),
       "quantised initialisation needs an fp8, mxfp8 or nvfp4 recipe, not " +
           to_string(s.precision));
  need(s.shard_group >= 0, "the shard group must be at least 1 rank");
  need(s.sharding != Sharding::hsdp || s.shard_group >= 1,
       "hsdp needs a shard group (--shard-group N)");
  need(s.sharding != Sharding::ddp || s.shard_group == 0,
       "ddp shards nothing: a shard group applies to zero1, zero2, zero3, fsdp and hsdp");
}

int64_t shape_parameters(const ModelShape& m) {
  const int64_t h = m.hidden;
  const auto kvd = static_cast<int64_t>(kv_dim(m));
  const int64_t layer = 2 * h * h + 2 * h * kvd + 3 * h * m.ffn_hidden + 2 * h;
  const int64_t embeddings = (m.tied_embeddings ? 1 : 2) * m.vocab * h;
  return m.layers * layer + embeddings + h;
}

ParameterCounts parameter_counts(const ModelShape& m) {
  const auto h = static_cast<double>(m.hidden);
  const auto shape_total = static_cast<double>(shape_parameters(m));
  const double scale = m.parameters ? static_cast<double>(*m.parameters) / shape_total : 1.0;
  const double layer_linear =
      2 * h * h + 2 * h * kv_dim(m) + 3 * h * static_cast<double>(m.ffn_hidden);
  const double table = static_cast<double>(m.vocab) * h;
  ParameterCounts p;
  p.total = shape_total * scale;
  p.linear = static_cast<double>(m.layers) * layer_linear * scale;
  p.matmul = p.linear + table * scale;  // a tied head multiplies by the embedding matrix
  p.layer = Unit{(layer_linear + 2 * h) * scale, layer_linear * scale};
  // Units as torchtitan wraps them: each layer; the embedding; the final
  // norm with the head (one unit with the embedding when tied).
  p.embedding = Unit{m.tied_embeddings ? 0 : table * scale, 0};
  p.head = Unit{(table + h) * scale, 0};
  p.largest_unit = std::max({p.layer, p.embedding, p.head},
                            [](const Unit& a, const Unit& b) { return a.params < b.params; });
  return p;
}

int64_t shard_degree(const TrainingSetup& s, int64_t world_size) {
  if (s.sharding == Sharding::ddp) return 1;
  return s.shard_group > 0 ? std::min(s.shard_group, world_size) : world_size;
}

Breakdown per_rank_memory(const TrainingSetup& s, int64_t world_size, int64_t micro_batch) {
  validate(s);
  if (world_size < 1) throw ConfigError("the world size must be at least 1");
  if (micro_batch < 1) throw ConfigError("the micro-batch must be at least 1");
  const ParameterCounts p = parameter_counts(s.model);
  const auto d = static_cast<double>(shard_degree(s, world_size));
  const bool quantized = is_quantized(s.precision);
  // Parameters whose primary copy is quantised (TE's quantised init).
  const double q_params = s.quantized_init ? p.linear : 0;
  const double fp32_params = p.total - q_params;
  const double c = compute_bytes(s.precision);

  Breakdown b;
  const double primary = q_params * stored_weight_bytes(s.precision) + fp32_params * 4;
  b.weights = primary / (shards_parameters(s.sharding) ? d : 1);
  const double grads = q_params * 2 + fp32_params * 4;
  b.gradients = grads / (shards_gradients(s.sharding) ? d : 1);
  const double states = (s.optimizer == Optimizer::adam ? 8 : 4) * p.total + 4 * q_params;
  b.optimizer = states / (shards_optimizer(s.sharding) ? d : 1);

  const double tokens = static_cast<double>(micro_batch) * static_cast<double>(s.seq_len);
  b.activations = tokens * activation_bytes_per_token(s);
  b.temporaries = tokens * loss_temporary_bytes_per_token(s);

  if (s.sharding == Sharding::ddp || s.sharding == Sharding::zero1) {
    // Parameters replicated: the compute copies live for the whole step.
    if (quantized && !s.quantized_init) b.weights += p.linear * stored_weight_bytes(s.precision);
    if (c < 4) b.temporaries += (quantized ? p.matmul - p.linear : p.matmul) * c;
    b.temporaries += grads;  // DDP's buckets beside .grad (gradient_as_bucket_view=False)
  } else if (s.sharding == Sharding::zero2) {
    // Gathered in the forward and kept until the backward is done with them,
    // and one unit's unsharded gradients with the fp32 copy reduce-scattered.
    b.temporaries += gathered_bytes(s, Unit{p.total, p.linear}) + p.largest_unit.params * (c + 4);
  } else {
    // The loss's backward runs before any unit's: its gradients and the
    // head's unit (torchtitan keeps it gathered after the forward) are never
    // resident with the units' buffers, so the larger of the two moments.
    b.temporaries =
        std::max(b.temporaries + gathered_bytes(s, p.head), fsdp_backward_bytes(s, p, d));
  }
  return b;
}

double recompute_overhead(const TrainingSetup& s) {
  const ParameterCounts p = parameter_counts(s.model);
  // Causal core attention: QK^T and AV, 2 FLOPs per multiply-add, half the
  // positions masked: 2 * seq * hidden FLOPs per token and layer.
  const double attention = 2.0 * static_cast<double>(s.model.layers) *
                           static_cast<double>(s.seq_len) * static_cast<double>(s.model.hidden);
  const double forward = 2 * p.matmul + attention;
  switch (s.checkpointing) {
    case Checkpointing::none:
      return 0;
    case Checkpointing::selective:
      return attention / (3 * forward);
    case Checkpointing::full:
      return (2 * p.linear + attention) / (3 * forward);
  }
  return 0;
}

}  // namespace elasticrun::plan
