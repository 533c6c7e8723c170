// Bytes per element that each precision recipe stores, by role
// (docs/planner.md, "Precision recipes"). The quantised recipes are
// Transformer Engine's: fp8 with a per-tensor scale (Hopper), mxfp8 with one
// E8M0 scale byte per 32 elements, nvfp4 with 4-bit values and one E4M3
// scale byte per 16 elements; their per-tensor fp32 scales are a few bytes a
// tensor and left out.
#pragma once

#include "plan/memory_model.hpp"

namespace elasticrun::plan {

inline bool is_quantized(Precision p) {
  return p == Precision::fp8 || p == Precision::mxfp8 || p == Precision::nvfp4;
}

// Activations, gathered weights and the loss's logits: fp32, else 16-bit
// (the quantised recipes compute everything but the matmuls in bf16).
inline double compute_bytes(Precision p) {
  return p == Precision::fp32 ? 4.0 : 2.0;
}

// One quantised copy of a tensor, values and block scales.
inline double quantized_copy_bytes(Precision p) {
  switch (p) {
    case Precision::fp8:
      return 1.0;
    case Precision::mxfp8:
      return 1.0 + 1.0 / 32;
    case Precision::nvfp4:
      return 0.5 + 1.0 / 16;
    default:
      return compute_bytes(p);
  }
}

// A linear layer's input as saved for the weight gradient: the columnwise
// quantised copy only, in the quantised recipes (TE quantises it once in the
// forward and keeps what the wgrad GEMM reads).
inline double saved_linear_input_bytes(Precision p) {
  return quantized_copy_bytes(p);
}

// A weight matrix held quantised: the rowwise copy the forward reads and the
// columnwise (transposed) copy the data-gradient GEMM reads.
inline double stored_weight_bytes(Precision p) {
  return is_quantized(p) ? 2 * quantized_copy_bytes(p) : compute_bytes(p);
}

}  // namespace elasticrun::plan
