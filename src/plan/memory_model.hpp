// The memory model of `elasticctl plan` (docs/planner.md): the bytes one rank
// of a data-parallel job holds at its peak, for a Llama-like decoder (GQA
// attention, SwiGLU MLP, RMSNorm), from the model's shape, the sequence
// length, the precision recipe, the optimizer, the sharding and activation
// checkpointing. Every term is a formula documented in docs/planner.md, not
// a table of measurements; the tests recompute each by hand.
//
// Pure: no I/O, no clock. Bad setups throw ConfigError.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace elasticrun::plan {

// A Llama-like decoder. head_dim = hidden / heads; the k and v projections
// have kv_heads * head_dim outputs each (grouped-query attention).
struct ModelShape {
  int64_t layers = 0;
  int64_t hidden = 0;
  int64_t heads = 0;
  int64_t kv_heads = 0;  // 0: as many as heads (multi-head attention)
  int64_t vocab = 0;
  int64_t ffn_hidden = 0;        // the SwiGLU MLP's intermediate size
  bool tied_embeddings = false;  // the output head reuses the embedding matrix
  // The parameter count to hold states for, when it differs from what the
  // shape implies (a model with biases, extra norms); every per-layer and
  // per-unit count below is scaled by parameters / shape_parameters so the
  // parts still add up to it. Unset: the shape's count.
  std::optional<int64_t> parameters;
};

enum class Precision { fp32, bf16, fp16, fp8, mxfp8, nvfp4 };
enum class Optimizer { adam, sgd };
// ddp: everything replicated. zero1: optimizer states sharded (PyTorch's
// ZeroRedundancyOptimizer over DDP). zero2: also gradients and the primary
// parameters, whose compute copy is gathered for a whole forward and
// backward (FSDP's SHARD_GRAD_OP). zero3 and fsdp (the same thing): the
// compute copy gathered one unit at a time. hsdp: fsdp within a shard group,
// replicated across groups.
enum class Sharding { ddp, zero1, zero2, zero3, fsdp, hsdp };
// none; full: each layer keeps only its input and is recomputed in the
// backward; selective: the core attention is recomputed (Korthikanti et al.).
enum class Checkpointing { none, full, selective };

// How cross-entropy over the vocabulary is computed. eager: PyTorch's
// F.cross_entropy on the logits cast to fp32 (the fp32 log-probabilities
// saved; their gradient and the logits' gradient in fp32 at the loss's
// backward). fused: an in-place kernel on the compute-dtype logits (TE's
// parallel_cross_entropy, Megatron's): the logits saved, the gradient written
// over them. chunked: the head and the loss computed a chunk of tokens at a
// time (Liger's fused linear cross-entropy): no logits kept.
enum class Loss { eager, fused, chunked };

struct TrainingSetup {
  ModelShape model;
  int64_t seq_len = 0;
  Precision precision = Precision::bf16;
  // Transformer Engine's quantised initialisation (fp8 recipes only): the
  // linear layers' primary weights exist only quantised; the optimizer keeps
  // an fp32 master copy of them.
  bool quantized_init = false;
  Optimizer optimizer = Optimizer::adam;
  Sharding sharding = Sharding::ddp;
  // Ranks one parameter's shards spread over; 0: the whole world. Required
  // for hsdp; ignored for ddp.
  int64_t shard_group = 0;
  Checkpointing checkpointing = Checkpointing::none;
  Loss loss = Loss::eager;
};

// Peak bytes held by one rank, by what they hold. The peak is taken as every
// term resident at once: the start of a micro-batch's backward when the
// gradients of earlier micro-batches are still accumulating. Under zero3,
// fsdp and hsdp the temporaries are the fuller of two moments that never
// overlap, the loss's backward and a unit's, so the total grows with the
// micro-batch but not always at the same rate.
struct Breakdown {
  double weights = 0;      // the primary parameters (and TE's quantised cache under DDP)
  double gradients = 0;    // the accumulated gradients
  double optimizer = 0;    // Adam's moments or SGD's momentum, and fp32 masters
  double activations = 0;  // tensors saved for the backward, loss included
  double temporaries = 0;  // gathered units, communication buffers, the loss's gradients

  double total() const { return weights + gradients + optimizer + activations + temporaries; }
};

// One FSDP unit (what is gathered at once, as torchtitan wraps: each layer,
// the embedding, the final norm with the head): its parameters, and how
// many of them are in the layers' quantisable matrices.
struct Unit {
  double params = 0;
  double linear = 0;
};

// Parameter counts the terms are made of, after the scaling that
// ModelShape::parameters asks for.
struct ParameterCounts {
  double total = 0;
  double linear = 0;  // the layers' q, k, v, o, gate, up and down matrices
  double matmul = 0;  // every matrix used in a matmul: linear plus the output head
  Unit layer;         // one decoder layer (its matrices and two norms)
  Unit embedding;     // the embedding's unit; none (0) when tied: it is in head
  Unit head;          // the final norm and the head (and the embedding, when tied)
  Unit largest_unit;  // the largest of the layer, the embedding and the head
};

// Throws ConfigError naming the first bad field.
void validate(const TrainingSetup& setup);

// The parameters the shape implies (the formula in docs/planner.md).
int64_t shape_parameters(const ModelShape& model);
ParameterCounts parameter_counts(const ModelShape& model);

// Ranks one parameter is sharded over at this world size (1 for DDP).
int64_t shard_degree(const TrainingSetup& setup, int64_t world_size);

// The breakdown for one rank of world_size ranks training micro_batch
// sequences of setup.seq_len tokens per micro-step. validate()s first.
Breakdown per_rank_memory(const TrainingSetup& setup, int64_t world_size, int64_t micro_batch);

// The extra compute activation checkpointing costs, as a fraction of a step
// without it (matmul FLOPs: the recomputed forward over forward + backward).
double recompute_overhead(const TrainingSetup& setup);

}  // namespace elasticrun::plan
