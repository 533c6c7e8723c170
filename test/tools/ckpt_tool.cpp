// ckpt_tool: saves and loads checkpoints of known tensors through
// elasticrun/checkpoint_torch.hpp, for test/integration/test_checkpoint_cpp.py.
//
//   ckpt_tool save   --root DIR --step N --world W [--keep K] [--scale S]
//                    [--extra JSON] [--kill-at-barrier B]
//   ckpt_tool load   --root DIR --world M
//   ckpt_tool resave --root DIR --to DIR2 --world M [--keep K]
//   ckpt_tool verify --root DIR
//
// save runs the W ranks as W threads of this process, each writing its
// even share of rows, joined by a std::barrier as the caller's barrier. With
// --kill-at-barrier B the process SIGKILLs itself when rank 0 reaches its
// B-th barrier (1: nothing written yet, 2: every shard written, not
// published, 3: published). load prints one JSON line with the step, then
// one per rank and tensor with the rows that rank loads and their values.
// resave is a job resumed at M ranks that saves at once: each of M rank
// threads loads its even share of rows of every tensor under --root (all of
// a replicated one) and saves what it loaded under --to, with the step and
// extra it read.
//
// The tensors of step n, row-major index i over the global tensor:
//   weight  float32 [10*S, 3]        n*1000 + i
//   ids     int64 [7]                n + i*i
//   half    bfloat16 [5, 2]          n + i
//   lr      float64 scalar           n + 0.5   (replicated)
//   table   int32 [4, 2, 3]          n + i     (replicated)
#include <ATen/core/Tensor.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/full.h>
#include <c10/util/Exception.h>

#include <barrier>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "elasticrun/checkpoint_torch.hpp"
#include "elasticrun/errors.hpp"

namespace {

namespace ck = elasticrun::ckpt;
using nlohmann::json;

struct Args {
  std::string command;
  std::map<std::string, std::string> flags;

  std::string get(const std::string& name, const std::string& fallback = "") const {
    const auto it = flags.find(name);
    if (it != flags.end()) return it->second;
    if (fallback.empty()) throw elasticrun::ConfigError("missing --" + name);
    return fallback;
  }
  std::int64_t num(const std::string& name, const std::string& fallback = "") const {
    return std::stoll(get(name, fallback));
  }
};

Args parse(int argc, char** argv) {
  if (argc < 2)
    throw elasticrun::ConfigError("usage: ckpt_tool save|load|resave|verify --root DIR ...");
  Args args{argv[1], {}};
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (!flag.starts_with("--")) throw elasticrun::ConfigError("unexpected argument " + flag);
    args.flags[flag.substr(2)] = argv[i + 1];
  }
  return args;
}

// The whole tensor `name` of step n, as every rank computes it.
at::Tensor global_tensor(const std::string& name, std::int64_t n, std::int64_t scale) {
  if (name == "weight") {
    return at::arange(10 * scale * 3, at::kFloat).add(n * 1000).reshape({10 * scale, 3});
  }
  if (name == "ids") return at::arange(7, at::kLong).pow(2).add(n);
  if (name == "half") return at::arange(10, at::kFloat).add(n).reshape({5, 2}).to(at::kBFloat16);
  if (name == "lr") return at::full({}, static_cast<double>(n) + 0.5, at::kDouble);
  return at::arange(24, at::kInt).add(n).reshape({4, 2, 3});  // table
}

const std::vector<std::string> kSharded{"weight", "ids", "half"};
const std::vector<std::string> kReplicated{"lr", "table"};

// Runs `world` ranks as threads of this process; each gets a Checkpointer
// under `root` whose barrier is one std::barrier for all. With kill_at > 0
// the process SIGKILLs itself when rank 0 reaches its kill_at-th barrier.
void run_ranks(const std::filesystem::path& root, int keep, int world, std::int64_t kill_at,
               const std::function<void(int rank, ck::Checkpointer&)>& body) {
  std::barrier sync(world);
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < world; ++rank) {
    ranks.emplace_back([&, rank] {
      try {
        std::int64_t calls = 0;
        ck::Checkpointer ckpt(root, keep, rank, world, [&, rank] {
          if (rank == 0 && ++calls == kill_at) std::raise(SIGKILL);
          sync.arrive_and_wait();
        });
        body(rank, ckpt);
      } catch (const std::exception& e) {
        // The other ranks would wait at the barrier forever.
        std::cerr << "ckpt_tool: rank " << rank << ": " << e.what() << std::endl;
        std::_Exit(1);
      }
    });
  }
  for (auto& t : ranks) t.join();
}

void print_saved(int rank, const std::filesystem::path& dir) {
  if (rank == 0) std::cout << json{{"saved", dir.filename().string()}}.dump() << std::endl;
}

int save(const Args& args) {
  const std::int64_t step = args.num("step");
  const int world = static_cast<int>(args.num("world"));
  const std::int64_t scale = args.num("scale", "1");
  const std::string extra = args.get("extra", "{}");
  run_ranks(args.get("root"), static_cast<int>(args.num("keep", "3")), world,
            args.num("kill-at-barrier", "0"), [&](int rank, ck::Checkpointer& ckpt) {
              std::vector<ck::TensorShard> shards;
              for (const auto& name : kSharded) {
                const at::Tensor full = global_tensor(name, step, scale);
                const auto [begin, end] = ck::even_rows(full.size(0), rank, world);
                shards.push_back(ck::sharded(name, full.slice(0, begin, end), full.size(0), begin));
              }
              for (const auto& name : kReplicated) {
                shards.push_back(ck::replicated(name, global_tensor(name, step, scale)));
              }
              print_saved(rank, ck::save(ckpt, step, shards, extra));
            });
  return 0;
}

json values(const at::Tensor& t) {
  const at::Tensor flat = t.to(at::kDouble).contiguous().reshape({-1});
  const double* p = flat.data_ptr<double>();
  return std::vector<double>(p, p + flat.numel());
}

// The checkpoint `latest` names; exits 3 when none has been published.
ck::Reader open_latest(const Args& args) {
  const auto dir = ck::latest(args.get("root"));
  if (!dir) {
    std::cerr << "ckpt_tool: no checkpoint under " << args.get("root") << std::endl;
    std::exit(3);
  }
  return ck::Reader(*dir);
}

int load(const Args& args) {
  const int world = static_cast<int>(args.num("world"));
  const ck::Reader reader = open_latest(args);
  std::cout << json{{"step", reader.step()},
                    {"saved_world_size", reader.world_size()},
                    {"extra", json::parse(reader.extra_json())}}
                   .dump()
            << std::endl;
  for (int rank = 0; rank < world; ++rank) {
    for (const auto& info : reader.tensors()) {
      at::Tensor t;
      std::int64_t begin = 0;
      std::int64_t end = info.rows();
      if (info.replicated) {
        t = ck::load(reader, info.name);
      } else {
        std::tie(begin, end) = ck::even_rows(info.rows(), rank, world);
        t = ck::load_rows(reader, info.name, begin, end);
      }
      std::cout << json{{"rank", rank},         {"name", info.name},
                        {"dtype", info.dtype},  {"shape", t.sizes().vec()},
                        {"rows", {begin, end}}, {"values", values(t)}}
                       .dump()
                << std::endl;
    }
  }
  return 0;
}

int resave(const Args& args) {
  const int world = static_cast<int>(args.num("world"));
  const ck::Reader reader = open_latest(args);
  run_ranks(args.get("to"), static_cast<int>(args.num("keep", "3")), world, 0,
            [&](int rank, ck::Checkpointer& ckpt) {
              std::vector<ck::TensorShard> shards;
              for (const auto& info : reader.tensors()) {
                if (info.replicated) {
                  shards.push_back(ck::replicated(info.name, ck::load(reader, info.name)));
                  continue;
                }
                const auto [begin, end] = ck::even_rows(info.rows(), rank, world);
                shards.push_back(ck::sharded(
                    info.name, ck::load_rows(reader, info.name, begin, end), info.rows(), begin));
              }
              print_saved(rank, ck::save(ckpt, reader.step(), shards, reader.extra_json()));
            });
  return 0;
}

int verify(const Args& args) {
  const ck::Reader reader = open_latest(args);
  reader.verify();
  std::cout << json{{"step", reader.step()}, {"verified", true}}.dump() << std::endl;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Args args = parse(argc, argv);
    if (args.command == "save") return save(args);
    if (args.command == "load") return load(args);
    if (args.command == "resave") return resave(args);
    if (args.command == "verify") return verify(args);
    throw elasticrun::ConfigError("unknown command " + args.command);
  } catch (const elasticrun::ConfigError& e) {
    std::cerr << "ckpt_tool: " << e.what() << "\n";
    return 2;
  } catch (const c10::Error& e) {
    std::cerr << "ckpt_tool: " << e.what_without_backtrace() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "ckpt_tool: " << e.what() << "\n";
    return 1;
  }
}
