#include "process_group.hpp"

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

namespace example {
namespace {

// Long enough for a slow peer to start on a loaded machine; short enough
// that a peer that never comes fails the job instead of hanging it for
// PyTorch's default 30 minutes.
constexpr std::chrono::minutes kTimeout{5};

}  // namespace

std::string env(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') {
    throw std::runtime_error(std::string("environment variable ") + name +
                             " is not set: run this under torchrun or elasticrun");
  }
  return value;
}

int env_int(const char* name) {
  const std::string value = env(name);
  try {
    return std::stoi(value);
  } catch (const std::exception&) {
    throw std::runtime_error(std::string(name) + "=" + value + " is not an integer");
  }
}

// The store every rank of the job shares, found as torch.distributed's env://
// init finds it and keyed as init_process_group keys its default group, plus
// a prefix per attempt under an agent.
namespace {

c10::intrusive_ptr<c10d::Store> connect_store(int rank, int world_size) {
  const std::string addr = env("MASTER_ADDR");
  const int port = env_int("MASTER_PORT");
  if (port < 0 || port > 65535) {
    throw std::runtime_error("MASTER_PORT=" + std::to_string(port) + " is not a port");
  }

  c10d::TCPStoreOptions opts;
  opts.port = static_cast<std::uint16_t>(port);
  opts.numWorkers = world_size;  // each rank checks in; the server waits for all
  opts.timeout = kTimeout;

  // Under a launcher's agent, the agent already serves the store at
  // MASTER_ADDR:MASTER_PORT and every rank is a client. Otherwise (a
  // hand-made job) rank 0 hosts it, as env:// does.
  const char* use_agent_store = std::getenv("TORCHELASTIC_USE_AGENT_STORE");
  const bool agent_store = use_agent_store != nullptr && std::string(use_agent_store) == "True";
  opts.isServer = !agent_store && rank == 0;
  opts.multiTenant = !agent_store;
  auto store = c10::make_intrusive<c10d::TCPStore>(addr, opts);

  c10::intrusive_ptr<c10d::Store> keyed = store;
  if (agent_store) {
    // The agent's store can outlive an attempt (elasticrun's static jobs
    // keep one for the whole run), and a restarted rank must not read the
    // gloo addresses the ranks of a failed attempt left there. Keying by
    // attempt, as PyTorch's env:// used to (2.0, for one), keeps attempts
    // apart; PyTorch 2.15's env:// adds no prefix of its own.
    keyed = c10::make_intrusive<c10d::PrefixStore>(
        "/worker/attempt_" + env("TORCHELASTIC_RESTART_COUNT"), keyed);
  }
  // init_process_group's own prefix, so other users of the store (RPC, the
  // launcher) never collide with the process group's keys.
  return c10::make_intrusive<c10d::PrefixStore>("default_pg", keyed);
}

// A gloo transport device: on the interface GLOO_SOCKET_IFNAME names, as in
// Python, else on the address this host's name resolves to (loopback if it
// resolves to nothing).
std::shared_ptr<::gloo::transport::Device> gloo_device() {
  if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"); ifname && *ifname) {
    return c10d::ProcessGroupGloo::createDeviceForInterface(ifname);
  }
  return c10d::ProcessGroupGloo::createDefaultDevice();
}

}  // namespace

c10::intrusive_ptr<c10d::ProcessGroupGloo> gloo_group(int rank, int world_size) {
  auto opts = c10d::ProcessGroupGloo::Options::create(kTimeout);
  opts->devices.push_back(gloo_device());
  return c10::make_intrusive<c10d::ProcessGroupGloo>(connect_store(rank, world_size), rank,
                                                     world_size, opts);
}

}  // namespace example
