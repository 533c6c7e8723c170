#include "agent/worker_env.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>

#include "elasticrun/errors.hpp"

extern char** environ;

namespace elasticrun::agent {
namespace {

// Python's str.split(","): empty fields are kept ("" is one empty field).
std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  for (;;) {
    size_t comma = s.find(',', start);
    out.push_back(s.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) return out;
    start = comma + 1;
  }
}

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t");
  size_t e = s.find_last_not_of(" \t");
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

// torchrun's --virtual-local-rank: LOCAL_RANK=0 and one visible GPU, taken
// from the agent's own HIP_/CUDA_VISIBLE_DEVICES list when it has one.
void set_virtual_local_rank(std::map<std::string, std::string>& env,
                            const std::map<std::string, std::string>& base, int local_rank) {
  env["LOCAL_RANK"] = "0";
  auto hip = base.find("HIP_VISIBLE_DEVICES");
  const bool use_hip = hip != base.end() && !hip->second.empty();
  const char* name = use_hip ? "HIP_VISIBLE_DEVICES" : "CUDA_VISIBLE_DEVICES";
  auto parent = base.find(name);
  std::string gpu = std::to_string(local_rank);
  if (parent != base.end()) {
    auto list = split_commas(parent->second);
    if (local_rank >= static_cast<int>(list.size())) {
      throw ConfigError("local rank " + std::to_string(local_rank) + " exceeds the GPUs in " +
                        name + "=" + parent->second + " (--virtual-local-rank)");
    }
    gpu = trim(list[static_cast<size_t>(local_rank)]);
  }
  env["CUDA_VISIBLE_DEVICES"] = gpu;
  if (use_hip) env["HIP_VISIBLE_DEVICES"] = gpu;
}

}  // namespace

std::map<std::string, std::string> worker_env(const std::map<std::string, std::string>& base,
                                              const Assignment& a, const WorkerEnvOptions& o,
                                              int local_rank) {
  std::map<std::string, std::string> env = base;
  const int rank = a.rank_offset + local_rank;
  env["RANK"] = std::to_string(rank);
  env["GROUP_RANK"] = std::to_string(a.group_rank);
  // One role per job (torchrun's launcher never makes more), so role ranks
  // are global ranks.
  env["ROLE_RANK"] = std::to_string(rank);
  env["ROLE_NAME"] = o.role;
  env["LOCAL_WORLD_SIZE"] = std::to_string(a.local_world_size);
  env["WORLD_SIZE"] = std::to_string(a.world_size);
  env["GROUP_WORLD_SIZE"] = std::to_string(a.group_world_size);
  env["ROLE_WORLD_SIZE"] = std::to_string(a.world_size);
  env["MASTER_ADDR"] = a.master_addr;
  env["MASTER_PORT"] = std::to_string(a.master_port);
  env["TORCHELASTIC_RESTART_COUNT"] = std::to_string(a.restart_count);
  env["TORCHELASTIC_MAX_RESTARTS"] = std::to_string(o.max_restarts);
  env["TORCHELASTIC_RUN_ID"] = o.run_id;
  // Python's str(bool), which PyTorch compares against "True".
  env["TORCHELASTIC_USE_AGENT_STORE"] = a.use_agent_store ? "True" : "False";
  // Ours: the rendezvous round (generation) of a dynamic job; workers of one
  // round all see the same value, and it grows with every scale event.
  if (a.generation > 0) env["ELASTICRUN_GENERATION"] = std::to_string(a.generation);
  env.emplace("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1");
  if (o.hang_seconds) {
    const auto whole = static_cast<long long>(std::ceil(*o.hang_seconds));
    env["ELASTICRUN_HANG_TIMEOUT"] = std::to_string(whole);
    // NCCL's monitor kills a process whose watchdog thread is stuck (an abort
    // that hangs): never sooner than the agent would have acted, never below
    // its own floor of a minute.
    env.emplace("TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC", std::to_string(std::max(60LL, whole)));
  }
  if (o.virtual_local_rank) {
    set_virtual_local_rank(env, base, local_rank);
  } else {
    env["LOCAL_RANK"] = std::to_string(local_rank);
  }
  if (static_cast<size_t>(local_rank) < o.error_files.size()) {
    env["TORCHELASTIC_ERROR_FILE"] = o.error_files[static_cast<size_t>(local_rank)];
  }
  if (static_cast<size_t>(local_rank) < o.stack_files.size() && o.stack_signal > 0) {
    env["ELASTICRUN_STACK_FILE"] = o.stack_files[static_cast<size_t>(local_rank)];
    env["ELASTICRUN_STACK_SIGNAL"] = std::to_string(o.stack_signal);
  }
  return env;
}

std::string substitute_template(const std::string& text,
                                const std::map<std::string, std::string>& vars) {
  auto ident_start = [](char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; };
  auto ident_char = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  std::string out;
  size_t i = 0;
  while (i < text.size()) {
    if (text[i] != '$' || i + 1 >= text.size()) {
      out += text[i++];
      continue;
    }
    const char next = text[i + 1];
    if (next == '$') {
      out += '$';
      i += 2;
      continue;
    }
    size_t start = i + 1, end = start;
    bool braced = next == '{';
    if (braced) ++start;
    end = start;
    if (end < text.size() && ident_start(text[end])) {
      while (end < text.size() && ident_char(text[end])) ++end;
    }
    const std::string name = text.substr(start, end - start);
    const bool closed = !braced || (end < text.size() && text[end] == '}');
    auto it = vars.find(name);
    if (!name.empty() && closed && it != vars.end()) {
      out += it->second;
      i = braced ? end + 1 : end;
    } else {
      out += '$';
      ++i;
    }
  }
  return out;
}

std::vector<std::string> to_envp(const std::map<std::string, std::string>& env) {
  std::vector<std::string> out;
  out.reserve(env.size());
  for (const auto& [k, v] : env) out.push_back(k + "=" + v);
  return out;
}

std::map<std::string, std::string> current_environment() {
  std::map<std::string, std::string> env;
  for (char** e = environ; e && *e; ++e) {
    std::string kv(*e);
    auto eq = kv.find('=');
    if (eq == std::string::npos) continue;
    env.emplace(kv.substr(0, eq), kv.substr(eq + 1));
  }
  return env;
}

}  // namespace elasticrun::agent
