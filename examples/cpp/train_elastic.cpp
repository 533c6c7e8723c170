// examples/python/train_elastic.py with libtorch: a small model on
// synthetic data, gradients all-reduced over gloo, a constant global batch
// that the SDK splits for whatever world size the job runs at, an elastic
// sampler whose position is in the checkpoint, sharded checkpoints in the
// C++ format (docs/checkpoint-format.md) that load at any world size, and a
// stop at the step every rank agreed on when elasticrun resizes the job.
//
// It runs unchanged under torchrun (no resize then: a restart resumes from
// the last checkpoint) and under elasticrun:
//
//   elasticrun --nnodes 2:3 --nproc-per-node 1 --rdzv-backend c10d
//       --rdzv-endpoint host:29400 --rdzv-id demo --no-python ./train_elastic --ckpt /shared/ckpt
//
// (one command line).
//
// With --step-log DIR (torchrun would take --log for its own flags) each rank appends one JSON line
// per step to DIR/steps.rank<R>.jsonl, as the Python example does. The model is written out by hand
// (two linear layers, tanh, SGD with momentum, cosine learning rate) over ATen and autograd rather
// than torch::nn, whose headers would make this file take many minutes to compile.
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/zeros.h>
#include <c10/core/GradMode.h>
#include <c10/util/Exception.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <elasticrun/batch.hpp>
#include <elasticrun/checkpoint_torch.hpp>
#include <elasticrun/sampler.hpp>
#include <elasticrun/worker.hpp>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <numbers>
#include <string>
#include <thread>
#include <vector>

#include "process_group.hpp"

namespace {

namespace ck = elasticrun::ckpt;
namespace er = elasticrun::sdk;
using nlohmann::json;

struct Options {
  std::filesystem::path ckpt;
  std::int64_t steps = 200;
  std::int64_t global_batch = 48;
  std::vector<std::int64_t> micro_batches{4, 6, 8};
  std::int64_t dataset = 48 * 32;
  std::uint64_t seed = 0;
  double lr = 0.05;
  std::int64_t save_every = 25;
  std::filesystem::path log;
  std::int64_t stop_at = -1;  // save and exit at this step, as if stopped (resume tests)
  std::int64_t step_ms = 0;   // pause per step (demo and test pacing)
};

std::vector<std::int64_t> parse_list(const std::string& v) {
  std::vector<std::int64_t> out;
  for (std::size_t p = 0; p < v.size();) {
    const std::size_t comma = std::min(v.find(',', p), v.size());
    out.push_back(std::stoll(v.substr(p, comma - p)));
    p = comma + 1;
  }
  return out;
}

Options parse(int argc, char** argv) {
  Options o;
  using Set = std::function<void(const std::string&)>;
  const std::map<std::string, Set> flags{
      {"--ckpt", [&](const std::string& v) { o.ckpt = v; }},
      {"--steps", [&](const std::string& v) { o.steps = std::stoll(v); }},
      {"--global-batch", [&](const std::string& v) { o.global_batch = std::stoll(v); }},
      {"--micro-batches", [&](const std::string& v) { o.micro_batches = parse_list(v); }},
      {"--dataset", [&](const std::string& v) { o.dataset = std::stoll(v); }},
      {"--seed", [&](const std::string& v) { o.seed = std::stoull(v); }},
      {"--lr", [&](const std::string& v) { o.lr = std::stod(v); }},
      {"--save-every", [&](const std::string& v) { o.save_every = std::stoll(v); }},
      {"--step-log", [&](const std::string& v) { o.log = v; }},
      {"--stop-at", [&](const std::string& v) { o.stop_at = std::stoll(v); }},
      {"--step-ms", [&](const std::string& v) { o.step_ms = std::stoll(v); }},
  };
  for (int i = 1; i < argc; i += 2) {
    const auto it = flags.find(argv[i]);
    if (it == flags.end()) throw std::runtime_error(std::string("unknown flag ") + argv[i]);
    if (i + 1 >= argc) throw std::runtime_error(it->first + " needs a value");
    it->second(argv[i + 1]);
  }
  if (o.ckpt.empty()) throw std::runtime_error("--ckpt DIR is required");
  return o;
}

// Parameters and momentum buffers, by name; every rank holds all of them.
struct Model {
  std::map<std::string, at::Tensor> params;
  std::map<std::string, at::Tensor> momentum;

  explicit Model(std::uint64_t seed) {
    auto gen = at::detail::createCPUGenerator(seed + 1);
    const auto init = [&](std::vector<std::int64_t> shape, double scale) {
      return at::randn(shape, gen, at::kFloat).mul(scale).requires_grad_(true);
    };
    params = {{"w1", init({16, 32}, 0.25)},
              {"b1", init({32}, 0.1)},
              {"w2", init({32, 1}, 0.18)},
              {"b2", init({1}, 0.1)}};
    for (const auto& [name, p] : params) momentum[name] = at::zeros(p.sizes(), at::kFloat);
  }

  at::Tensor forward(const at::Tensor& x) const {
    return x.matmul(params.at("w1"))
        .add(params.at("b1"))
        .tanh()
        .matmul(params.at("w2"))
        .add(params.at("b2"));
  }
};

// The same regression problem on every rank: y = X w + noise.
std::pair<at::Tensor, at::Tensor> synthetic_data(std::int64_t n, std::uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(seed);
  at::Tensor x = at::randn({n, 16}, gen, at::kFloat);
  at::Tensor w = at::randn({16, 1}, gen, at::kFloat);
  at::Tensor y = x.matmul(w).add(at::randn({n, 1}, gen, at::kFloat).mul(0.1));
  return {x, y};
}

at::Tensor index_tensor(const std::vector<std::uint64_t>& indices) {
  at::Tensor t = at::empty({static_cast<std::int64_t>(indices.size())}, at::kLong);
  std::memcpy(t.data_ptr<std::int64_t>(), indices.data(), indices.size() * sizeof(std::int64_t));
  return t;
}

json sampler_json(const er::ElasticSampler::State& s) {
  return {{"version", s.version}, {"dataset_len", s.dataset_len},
          {"seed", s.seed},       {"shuffle", s.shuffle},
          {"epoch", s.epoch},     {"position", s.position}};
}

er::ElasticSampler::State sampler_state(const json& j) {
  return {j.at("version").get<std::int64_t>(), j.at("dataset_len").get<std::uint64_t>(),
          j.at("seed").get<std::uint64_t>(),   j.at("shuffle").get<std::int64_t>(),
          j.at("epoch").get<std::uint64_t>(),  j.at("position").get<std::uint64_t>()};
}

// Every rank holds the whole model; each writes its even share of the rows
// of every tensor, so the write is spread over the ranks, and any world
// size reads it back whole.
void save(ck::Checkpointer& ckpt, std::int64_t step, const Model& model,
          const er::ElasticSampler& sampler, int rank, int world) {
  std::vector<ck::TensorShard> shards;
  for (const auto* group : {&model.params, &model.momentum}) {
    const std::string prefix = group == &model.params ? "param." : "momentum.";
    for (const auto& [name, t] : *group) {
      const auto [begin, end] = ck::even_rows(t.size(0), rank, world);
      shards.push_back(
          ck::sharded(prefix + name, t.detach().slice(0, begin, end), t.size(0), begin));
    }
  }
  ck::save(ckpt, step, shards, json{{"sampler", sampler_json(sampler.state())}}.dump());
}

int run(int argc, char** argv) {
  const Options opt = parse(argc, argv);
  er::attach();  // SIGUSR1 and the control block, under elasticrun
  const int rank = example::env_int("RANK");
  const int world = example::env_int("WORLD_SIZE");
  const char* gen_env = std::getenv("ELASTICRUN_GENERATION");
  const std::int64_t generation = gen_env ? std::stoll(gen_env) : 0;
  auto pg = example::gloo_group(rank, world);

  const auto [x, y] = synthetic_data(opt.dataset, opt.seed);
  Model model(opt.seed);
  const er::BatchPlan plan = er::plan_batches(opt.global_batch, world, opt.micro_batches);
  er::ElasticSampler sampler(static_cast<std::uint64_t>(opt.dataset), opt.seed);
  ck::Checkpointer ckpt(opt.ckpt, 3, rank, world, [&] { pg->barrier()->wait(); });

  std::int64_t step = 0;
  if (const auto dir = ck::latest(opt.ckpt)) {
    const ck::Reader reader(*dir);
    step = reader.step();
    c10::NoGradGuard no_grad;
    for (auto& [name, p] : model.params) p.copy_(ck::load(reader, "param." + name));
    for (auto& [name, m] : model.momentum) m.copy_(ck::load(reader, "momentum." + name));
    sampler.load_state(sampler_state(json::parse(reader.extra_json()).at("sampler")));
  }
  sampler.set_world(rank, plan);
  if (rank == 0) {
    std::cout << "[train] generation " << generation << ": world size " << world << ", from step "
              << step << ", " << plan.describe() << std::endl;
  }
  std::ofstream log;
  if (!opt.log.empty()) {
    std::filesystem::create_directories(opt.log);
    log.open(opt.log / ("steps.rank" + std::to_string(rank) + ".jsonl"), std::ios::app);
  }

  const std::int64_t micro = plan.micro_batch(rank);
  double loss_value = 0;
  while (step < opt.steps && step != opt.stop_at) {
    if (sampler.steps_left() == 0) sampler.set_epoch(sampler.epoch() + 1);
    const std::vector<std::uint64_t> indices = sampler.step_indices();
    const std::uint64_t samples = sampler.next_step_samples();
    for (auto& [name, p] : model.params) p.mutable_grad() = at::Tensor();
    at::Tensor local_loss = at::zeros({1}, at::kFloat);
    for (std::int64_t k = 0; k < plan.accum_steps; ++k) {
      const std::vector<std::uint64_t> chunk(indices.begin() + k * micro,
                                             indices.begin() + (k + 1) * micro);
      const at::Tensor idx = index_tensor(chunk);
      // Sum over the rank's samples, scaled so that the mean over ranks of
      // the all-reduced gradients is the mean over the global batch,
      // whatever the split.
      at::Tensor loss = model.forward(x.index_select(0, idx))
                            .sub(y.index_select(0, idx))
                            .pow(2)
                            .sum()
                            .mul(world / static_cast<double>(samples));
      loss.backward();
      local_loss.add_(loss.detach().div(world));
    }

    // One all-reduce for every gradient and the loss, as DDP buckets them.
    std::vector<at::Tensor> flat;
    for (const auto& [name, p] : model.params) flat.push_back(p.grad().reshape({-1}));
    flat.push_back(local_loss);
    std::vector<at::Tensor> bucket{at::cat(flat)};
    pg->allreduce(bucket)->wait();
    {
      c10::NoGradGuard no_grad;
      const double lr = opt.lr * 0.5 *
                        (1 + std::cos(std::numbers::pi * static_cast<double>(step) /
                                      static_cast<double>(opt.steps)));
      std::int64_t offset = 0;
      for (auto& [name, p] : model.params) {
        const at::Tensor g =
            bucket[0].slice(0, offset, offset + p.numel()).view(p.sizes()).div(world);
        offset += p.numel();
        at::Tensor& m = model.momentum.at(name);
        m.mul_(0.9).add_(g);
        p.sub_(m.mul(lr));
      }
      loss_value = bucket[0][offset].item<double>();
    }
    sampler.advance();
    ++step;
    er::step(step, loss_value);
    if (log.is_open()) {
      log << json{{"step", step},      {"epoch", sampler.epoch()}, {"gen", generation},
                  {"world", world},    {"global_batch", samples},  {"loss", loss_value},
                  {"indices", indices}}
                 .dump()
          << std::endl;
    }
    if (er::elastic_event_detected()) {
      // Every rank reaches this at the same step: save and go; the agents
      // restart the job at its new size from here.
      er::stopped();
      save(ckpt, step, model, sampler, rank, world);
      er::saved();
      if (rank == 0)
        std::cout << "[train] stopped at step " << step << " for a resize; checkpoint saved"
                  << std::endl;
      return 0;
    }
    if (step % opt.save_every == 0) save(ckpt, step, model, sampler, rank, world);
    if (opt.step_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(opt.step_ms));
  }
  if (step % opt.save_every != 0) save(ckpt, step, model, sampler, rank, world);
  if (rank == 0) {
    std::cout << "[train] " << (step == opt.steps ? "done" : "stopped") << ": " << step
              << " steps, loss " << loss_value << std::endl;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const c10::Error& e) {
    std::cerr << "train_elastic: " << e.what_without_backtrace() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "train_elastic: " << e.what() << "\n";
    return 1;
  }
}
