// What a C++ worker does to join its job's process group, as PyTorch's
// env:// init does: torchrun's environment, the agent's store (or rank 0's
// own without an agent), a ProcessGroupGloo on it. Shared by the examples.
#pragma once

#include <string>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

namespace example {

// $name, or a runtime_error that says to run under a launcher.
std::string env(const char* name);
int env_int(const char* name);

// The gloo group of RANK among WORLD_SIZE ranks; constructing it is the
// rendezvous, so it returns once every rank has joined.
c10::intrusive_ptr<c10d::ProcessGroupGloo> gloo_group(int rank, int world_size);

}  // namespace example
