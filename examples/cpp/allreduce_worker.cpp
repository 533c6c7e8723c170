// A C++ worker compiled against libtorch: the rendezvous PyTorch's env://
// init does, one gloo all_reduce, checked. It runs unchanged under torchrun
// and elasticrun (--no-python):
//
//   elasticrun --standalone --nproc-per-node 2 --no-python ./allreduce_worker
//   torchrun   --standalone --nproc-per-node 2 --no-python ./allreduce_worker
//
// Each rank contributes rank + 1, so every rank must end with
// world_size * (world_size + 1) / 2. Prints "rank R/W allreduce=X ok"; exits 1
// with a message on stderr otherwise.

#include <ATen/ops/full.h>
#include <c10/util/Exception.h>

#include <cstdint>
#include <exception>
#include <iostream>
#include <vector>

#include "process_group.hpp"

namespace {

int run() {
  const int rank = example::env_int("RANK");
  const int world_size = example::env_int("WORLD_SIZE");
  const int local_rank =
      example::env_int("LOCAL_RANK");  // a GPU worker would pick its device by it

  // Constructing the group is the rendezvous: it returns once every rank has
  // published its address in the store and the full mesh is connected.
  auto pg = example::gloo_group(rank, world_size);

  std::vector<at::Tensor> tensors{at::full({1}, rank + 1, at::kLong)};
  pg->allreduce(tensors)->wait();  // throws if a peer fails or times out

  const std::int64_t got = tensors[0].item<std::int64_t>();
  const std::int64_t want = std::int64_t{world_size} * (world_size + 1) / 2;
  if (got != want) {
    std::cerr << "rank " << rank << "/" << world_size << " (local rank " << local_rank
              << "): allreduce gave " << got << ", expected " << want << "\n";
    return 1;
  }
  std::cout << "rank " << rank << "/" << world_size << " allreduce=" << got << " ok" << std::endl;
  return 0;
}

}  // namespace

int main() {
  try {
    return run();
  } catch (const c10::Error& e) {
    // what() would append a C++ backtrace of libtorch's internals.
    std::cerr << "allreduce_worker: " << e.what_without_backtrace() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "allreduce_worker: " << e.what() << "\n";
    return 1;
  }
}
