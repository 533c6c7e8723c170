// The memory planner (docs/planner.md): each term recomputed by hand for a
// one-layer model small enough to count on paper, the plan over world
// sizes, and the emitted worldSizeOverrides read back by the SDK's parser
// and planned with the SDK's plan_batches.
//
// The model: 1 layer, hidden 8, 2 heads (head_dim 4), 1 kv head (kvd 4),
// ffn 12, vocab 16, untied. Its matrices: q, o 8x8 (128), k, v 8x4 (64),
// gate, up, down 8x12 (288): 480; two norms 16; the layer 496. Embedding and
// head 16x8 each (256), the final norm 8: 760 parameters. Units: the layer
// (496), the head with the final norm (136), the embedding (128).
#include "plan/plan.hpp"

#include <algorithm>
#include <catch2/catch.hpp>
#include <fstream>
#include <nlohmann/json.hpp>

#include "elasticrun/batch.hpp"
#include "elasticrun/errors.hpp"
#include "plan/emit_config.hpp"
#include "plan/memory_model.hpp"
#include "plan/plan_options.hpp"
#include "plan/presets.hpp"
#include "plan/world_sizes.hpp"
#include "temp_dir.hpp"

using namespace elasticrun;
using namespace elasticrun::plan;

namespace {

TrainingSetup tiny(Precision precision, Sharding sharding) {
  TrainingSetup s;
  s.model.layers = 1;
  s.model.hidden = 8;
  s.model.heads = 2;
  s.model.kv_heads = 1;
  s.model.vocab = 16;
  s.model.ffn_hidden = 12;
  s.seq_len = 4;
  s.precision = precision;
  s.sharding = sharding;
  return s;
}

// FSDP bf16 at 4 ranks on 100,000 bytes, no margin: 3040 bytes of states,
// 1504 of activations a sequence, and temporaries the larger of a unit's
// backward (3232) and the loss's (512 a sequence and the head's unit, 272):
// from 6 sequences on, 3312 + 2016 a sequence.
PlanRequest fsdp_request() {
  PlanRequest r;
  r.setup = tiny(Precision::bf16, Sharding::fsdp);
  r.gpu_memory_bytes = 100000;
  r.margin = 0;
  r.world_sizes = {4};
  return r;
}

}  // namespace

TEST_CASE("the tiny model's parameters add up as counted by hand", "[plan]") {
  TrainingSetup s = tiny(Precision::bf16, Sharding::ddp);
  CHECK(shape_parameters(s.model) == 760);
  const ParameterCounts p = parameter_counts(s.model);
  CHECK(p.linear == 480);
  CHECK(p.matmul == 480 + 128);
  CHECK(p.layer.params == 496);
  CHECK(p.largest_unit.params == 496);
  CHECK(p.largest_unit.linear == 480);
  CHECK(p.head.params == 136);
  CHECK(p.embedding.params == 128);
  s.model.tied_embeddings = true;  // one unit: the table and the final norm
  CHECK(parameter_counts(s.model).head.params == 136);
  CHECK(parameter_counts(s.model).embedding.params == 0);
}

TEST_CASE("the presets have the parameter counts of the models they are named after", "[plan]") {
  auto billions = [](const std::string& name) {
    return static_cast<double>(shape_parameters(find_preset(name).shape)) / 1e9;
  };
  CHECK(billions("1b") == Approx(1.236).epsilon(0.001));  // Llama 3.2 1B
  CHECK(billions("8b") == Approx(8.030).epsilon(0.001));  // Llama 3.1 8B
  CHECK(billions("70b") == Approx(70.55).epsilon(0.001));
  CHECK_THROWS_AS(find_preset("2b"), ConfigError);
}

TEST_CASE("DDP in fp32 holds 4+4+8 bytes a parameter, the buckets and every activation", "[plan]") {
  const Breakdown b = per_rank_memory(tiny(Precision::fp32, Sharding::ddp), 4, 1);
  CHECK(b.weights == 760 * 4);
  CHECK(b.gradients == 760 * 4);
  CHECK(b.optimizer == 760 * 8);
  // Per token, 4-byte elements: norms 2 x (x, x_hat) = 4h; linear inputs 3h + f;
  // q, o, k, v = 2h + 2kvd plus a 4-byte log-sum-exp per head; gate, silu, up = 3f.
  // Then the final norm (2h), the head's input (h) and fp32 log-probabilities (4V).
  const double layer = 4 * 4 * 8 + 4 * (3 * 8 + 12) + 4 * (16 + 8) + 4 * 2 + 4 * 3 * 12;
  const double head = 4 * 2 * 8 + 4 * 8 + 4 * 16;
  CHECK(layer == 520);
  CHECK(b.activations == 4 * (layer + head));
  // The loss's two fp32 gradients (8V a token) and DDP's copy of the gradients.
  CHECK(b.temporaries == 4 * 8 * 16 + 760 * 4);
}

TEST_CASE(
    "FSDP at world 4 shards the states; its temporaries are the fuller of the loss's backward "
    "and a unit's",
    "[plan]") {
  const TrainingSetup s = tiny(Precision::bf16, Sharding::fsdp);
  CHECK(shard_degree(s, 4) == 4);
  const Breakdown b = per_rank_memory(s, 4, 1);
  CHECK(b.weights == 760.0 * 4 / 4);
  CHECK(b.gradients == 760.0 * 4 / 4);
  CHECK(b.optimizer == 760.0 * 8 / 4);
  // 2-byte elements: layer 4h*2 + (3h+f)*2 + (2h+2kvd)*2 + 4a + 3f*2 = 264, head 112.
  CHECK(b.activations == 4 * (264 + 112));
  // Backward order: the head (136), the layer (496), the embedding (128);
  // bf16 copies and gradients, fp32 reduce-scatter buffers. The fullest
  // moment is the layer's reduce-scatter: the embedding prefetched (256),
  // the layer's fp32 input (1984) and its bf16 gradients, not yet copied
  // in (992). Its compute holds less: gathered 992, gradients 992, the
  // prefetch 256 and the head's reduce-scatter input 544.
  CHECK(b.temporaries == 256 + 496 * 4 + 496 * 2);
  CHECK(b.temporaries > 992 + 992 + 256 + 544);
  // The loss's backward (8V a token, the head's unit gathered) takes over
  // from 6 sequences.
  CHECK(per_rank_memory(s, 4, 5).temporaries == b.temporaries);
  CHECK(per_rank_memory(s, 4, 6).temporaries == 6 * 4 * 8 * 16 + 136 * 2);
}

TEST_CASE(
    "a unit's backward under FSDP holds the previous unit's reduce-scatter input, and a tied "
    "unit its copy and gradient throughout",
    "[plan]") {
  TrainingSetup s = tiny(Precision::fp32, Sharding::fsdp);
  // fp32 at 2 ranks, the layer computing: gathered 1984, its gradients
  // 1984, the embedding prefetched 512, and the head's reduce-scatter input
  // (136 x 4), which FSDP2 frees only at the layer's own reduce-scatter
  // (then: 512 + 1984 + 1984 = 4480).
  CHECK(per_rank_memory(s, 2, 1).temporaries == 1984 + 1984 + 512 + 136 * 4);
  // Tied, bf16 at 4 ranks: the embedding-and-head unit (136) is gathered
  // and its gradient held from the head's backward to the embedding's
  // (2 x 272), beside the layer's reduce-scatter (1984 + 992).
  s = tiny(Precision::bf16, Sharding::fsdp);
  s.model.tied_embeddings = true;
  CHECK(per_rank_memory(s, 4, 1).temporaries == 136 * 2 * 2 + 496 * 4 + 496 * 2);
}

TEST_CASE("ZeRO-1 and ZeRO-2 shard the optimizer, then the gradients, not the weights", "[plan]") {
  const Breakdown z1 = per_rank_memory(tiny(Precision::fp32, Sharding::zero1), 4, 1);
  CHECK(z1.weights == 760 * 4);
  CHECK(z1.gradients == 760 * 4);
  CHECK(z1.optimizer == 760 * 8 / 4);
  const Breakdown z2 = per_rank_memory(tiny(Precision::fp32, Sharding::zero2), 4, 1);
  CHECK(z2.gradients == 760 * 4 / 4);
  CHECK(z2.weights == 760 * 4 / 4);
  // The whole model gathered from forward to backward.
  CHECK(z2.temporaries == 4 * 8 * 16 + 760 * 4 + 496 * (4 + 4));
}

TEST_CASE("a shard group bounds the shard degree, and hsdp needs one", "[plan]") {
  TrainingSetup s = tiny(Precision::bf16, Sharding::hsdp);
  CHECK_THROWS_AS(per_rank_memory(s, 8, 1), ConfigError);
  s.shard_group = 2;
  CHECK(shard_degree(s, 8) == 2);
  CHECK(per_rank_memory(s, 8, 1).optimizer == 760.0 * 8 / 2);
  s.sharding = Sharding::ddp;
  CHECK_THROWS_AS(per_rank_memory(s, 8, 1), ConfigError);
}

TEST_CASE("SGD keeps one state a parameter", "[plan]") {
  TrainingSetup s = tiny(Precision::fp32, Sharding::ddp);
  s.optimizer = Optimizer::sgd;
  CHECK(per_rank_memory(s, 1, 1).optimizer == 760 * 4);
}

TEST_CASE(
    "full checkpointing keeps each layer's input and one layer; selective drops the "
    "core attention's output",
    "[plan]") {
  TrainingSetup s = tiny(Precision::bf16, Sharding::fsdp);
  s.checkpointing = Checkpointing::full;
  // The recomputed layer (264 a token) comes after the loss's backward freed
  // the head's 112 and the loss's 128: it adds 264 - 240.
  CHECK(per_rank_memory(s, 4, 1).activations == 4 * (8 * 2 + (264 - 240) + 112));
  s.loss = Loss::chunked;  // now the head holds 48, and the whole layer counts
  CHECK(per_rank_memory(s, 4, 1).activations == 4 * (8 * 2 + 264));
  s.loss = Loss::eager;
  s.checkpointing = Checkpointing::selective;
  CHECK(per_rank_memory(s, 4, 1).activations == 4 * (264 - (8 * 2 + 4 * 2) + 112));
  // Activations grow with the micro-batch, the states do not.
  const Breakdown one = per_rank_memory(s, 4, 1);
  const Breakdown three = per_rank_memory(s, 4, 3);
  CHECK(three.activations == 3 * one.activations);
  CHECK(three.optimizer == one.optimizer);
}

TEST_CASE("TE's fp8 recipes add the quantised weights and save quantised linear inputs", "[plan]") {
  const double mx = 1.0 + 1.0 / 32;  // an E8M0 scale byte per 32 values
  const Breakdown ddp = per_rank_memory(tiny(Precision::mxfp8, Sharding::ddp), 4, 1);
  CHECK(ddp.weights == 760 * 4 + 480 * 2 * mx);
  // Fused modules: norms keep their input only, SwiGLU its gate and up; the
  // four linear inputs are quantised.
  const double layer = 2 * 8 * 2 + (3 * 8 + 12) * mx + (16 + 8) * 2 + 4 * 2 + 2 * 12 * 2;
  const double head = 8 * 2 + 8 * 2 + 4 * 16;
  CHECK(ddp.activations == Approx(4 * (layer + head)));
  // The head's bf16 copy under autocast, the buckets, the loss.
  CHECK(ddp.temporaries == 128 * 2 + 760 * 4 + 4 * 8 * 16);

  TrainingSetup q = tiny(Precision::mxfp8, Sharding::fsdp);
  q.quantized_init = true;
  const Breakdown b = per_rank_memory(q, 4, 1);
  CHECK(b.weights == Approx((480 * 2 * mx + 280 * 4) / 4));
  CHECK(b.gradients == (480 * 2 + 280 * 4) / 4.0);
  CHECK(b.optimizer == (760 * 8 + 480 * 4) / 4.0);  // fp32 masters of the quantised weights
  q.quantized_init = false;
  q.precision = Precision::bf16;
  CHECK_THROWS_AS(validate([&] {
                    TrainingSetup bad = q;
                    bad.quantized_init = true;
                    return bad;
                  }()),
                  ConfigError);
}

TEST_CASE("checkpointing's recompute costs its forward over three forwards", "[plan]") {
  TrainingSetup s = tiny(Precision::bf16, Sharding::fsdp);
  CHECK(recompute_overhead(s) == 0);
  // Forward FLOPs a token: 2 x 608 matmul parameters + 2 x seq 4 x hidden 8.
  const double forward = 2 * 608 + 2 * 4 * 8;
  s.checkpointing = Checkpointing::full;
  CHECK(recompute_overhead(s) == Approx((2 * 480 + 2 * 4 * 8) / (3 * forward)));
  s.checkpointing = Checkpointing::selective;
  CHECK(recompute_overhead(s) == Approx((2 * 4 * 8) / (3 * forward)));
  s.model = find_preset("8b").shape;
  s.seq_len = 8192;
  s.checkpointing = Checkpointing::full;
  CHECK(recompute_overhead(s) > 0.25);
  CHECK(recompute_overhead(s) < 1.0 / 3);
}

TEST_CASE("the plan takes the largest micro-batch that fits and divides the global batch",
          "[plan]") {
  PlanRequest r = fsdp_request();
  CHECK(per_rank_memory(r.setup, 4, 1).total() == 3040 + 1504 + 3232);
  CHECK(largest_micro_batch(r.setup, 4, 100000) == 47);  // 3312 + 47 x 2016 = 98,064

  r.global_batch = 400;  // 100 a rank: 25 is the largest divisor under 47
  const Plan p = make_plan(r);
  REQUIRE(p.sizes.size() == 1);
  CHECK(p.sizes[0].largest_fit == 47);
  CHECK(p.sizes[0].micro_batch == 25);
  CHECK(p.sizes[0].accumulation == 4);
  CHECK(p.sizes[0].keeps_global_batch);
  CHECK(p.sizes[0].usable(64));
  CHECK(p.sizes[0].warnings.empty());
  CHECK(p.sizes[0].peak.total() == 3312 + 25 * 2016);
}

TEST_CASE("a global batch the ranks do not divide rounds the accumulation up, with a warning",
          "[plan]") {
  PlanRequest r;
  r.setup = tiny(Precision::bf16, Sharding::ddp);
  r.gpu_memory_bytes = 1e6;
  r.world_sizes = {3};
  r.global_batch = 100;
  const SizePlan s = make_plan(r).sizes.at(0);
  CHECK(!s.keeps_global_batch);
  CHECK(!s.usable(64));
  CHECK(s.micro_batch == 34);  // ceil(100 / 3), which fits
  CHECK(s.accumulation == 1);
  REQUIRE(s.warnings.size() == 1);
  CHECK(s.warnings[0].find("not a multiple") != std::string::npos);
}

TEST_CASE("where nothing fits the plan says so, per size and for the whole plan", "[plan]") {
  PlanRequest r;
  r.setup = tiny(Precision::fp32, Sharding::ddp);
  r.gpu_memory_bytes = 1000;
  r.world_sizes = {1, 2};
  const Plan p = make_plan(r);
  for (const SizePlan& s : p.sizes) {
    CHECK(s.largest_fit == 0);
    CHECK(s.micro_batch == 0);
    REQUIRE(s.warnings.size() == 1);
    CHECK(s.warnings[0].find("nothing fits") != std::string::npos);
  }
  REQUIRE(p.warnings.size() == 1);
  CHECK(p.warnings[0].find("nothing fits at any world size") != std::string::npos);
}

TEST_CASE("world sizes read as ranges, steps and lists", "[plan]") {
  CHECK(parse_world_sizes("2:5") == std::vector<int64_t>{2, 3, 4, 5});
  CHECK(parse_world_sizes("2:8:3") == std::vector<int64_t>{2, 5, 8});
  CHECK(parse_world_sizes("8,2,4,2") == std::vector<int64_t>{2, 4, 8});
  CHECK(parse_world_sizes("1,4:5") == std::vector<int64_t>{1, 4, 5});
  for (const char* bad : {"", "0", "a", "4:2", "1:2:3:4", "2,", "1:100000"}) {
    CHECK_THROWS_AS(parse_world_sizes(bad), ConfigError);
  }
}

// What --emit-config wrote, read back through the SDK's own parser.
sdk::Overrides emit_and_read(const test::TempDir& dir, PlanOptions& o) {
  o.emit_config = dir / "job.yaml";
  const PlanOutput out = run_plan(o);
  {
    std::ofstream file(o.emit_config);
    file << out.config;
  }
  return sdk::load_overrides(o.emit_config);
}

TEST_CASE(
    "--emit-config writes the largest micro-batch that fits at each node count, and the "
    "SDK's plans from it stay within it and keep the global batch",
    "[plan]") {
  test::TempDir dir;
  PlanOptions o;
  o.preset = "8b";
  o.seq_len = 8192;
  o.sharding = "fsdp";
  o.checkpointing = "full";
  o.gpu_memory_gib = 80;
  o.global_batch = 256;
  o.gpus_per_node = 8;
  o.world_sizes = "1:4";
  const sdk::Overrides read = emit_and_read(dir, o);
  const Plan plan = make_plan(make_request(o));
  REQUIRE(plan.sizes.size() == 4);
  for (const SizePlan& s : plan.sizes) {
    INFO("nodes " << *s.nodes);
    // Every size fits here, 3 nodes (24 ranks) too, which no common
    // micro-batch keeps at 256: the SDK splits it unevenly.
    REQUIRE(read.count(*s.nodes) == 1);
    const sdk::Override& entry = read.at(*s.nodes);
    CHECK(!entry.learning_rate);
    CHECK(!entry.micro_batch_size);
    CHECK(!entry.min_micro_batch_size);
    CHECK(entry.max_micro_batch_size == std::min(s.largest_fit, (256 + s.ranks - 1) / s.ranks));
    const sdk::BatchPlan bp =
        sdk::plan_batches(256, s.ranks, sdk::micro_batch_sizes(entry, {1024}));
    CHECK(bp.global_batch == 256);
    int64_t sum = 0;
    for (const int64_t m : bp.micro_batches) {
      CHECK(m >= 1);
      CHECK(m <= *entry.max_micro_batch_size);
      sum += m;
    }
    CHECK(sum * bp.accum_steps == 256);
    // Never more steps than the table's even split, where it has one.
    if (s.keeps_global_batch) CHECK(bp.accum_steps <= *s.accumulation);
  }
  CHECK(!plan.sizes[2].keeps_global_batch);
  CHECK(read.at(3).max_micro_batch_size == 4);
}

TEST_CASE(
    "--emit-config leaves out a size where nothing fits or no split keeps the global "
    "batch, and says why",
    "[plan]") {
  PlanOptions o;
  o.preset = "8b";
  o.seq_len = 8192;
  o.sharding = "fsdp";
  o.checkpointing = "full";
  o.gpu_memory_gib = 30;
  o.gpus_per_node = 8;
  o.world_sizes = "1:3";
  o.global_batch = 256;
  o.emit_config = "unused.yaml";
  const PlanOutput out = run_plan(o);
  CHECK(out.config.find("\nworldSizeOverrides:\n  2: {maxMicroBatchSize: 1}  # 16 ranks x 1, 16 "
                        "accumulation steps\n") != std::string::npos);
  CHECK(out.config.find("\n  1: ") == std::string::npos);
  CHECK(out.config.find("\n  3: ") == std::string::npos);
  REQUIRE(out.notes.size() == 2);
  CHECK_THAT(out.notes[0], Catch::StartsWith("--emit-config leaves out 1 nodes: at 8 ranks: "
                                             "nothing fits: micro-batch 1 needs 29.9 GiB"));
  // 24 ranks of 1 make 24 a step, and 256 is no multiple of it.
  CHECK(out.notes[1] ==
        "--emit-config leaves out 3 nodes: no split of the global batch 256 over "
        "24 ranks at micro-batches up to 1 in at most 64 accumulation steps");

  // A range takes no more than the ranks' share: 2 of 25 over 16 ranks.
  o.gpu_memory_gib = 80;
  o.global_batch = 25;
  o.world_sizes = "2:3";
  CHECK(run_plan(o).config.find("\n  2: {maxMicroBatchSize: 2}  # 9 ranks x 2 + 7 ranks x 1, 1 "
                                "accumulation step\n  3: {maxMicroBatchSize: 2}  # 1 rank x 2 + "
                                "23 ranks x 1, 1 accumulation step\n") != std::string::npos);
}

TEST_CASE("--emit-config with --micro-batch writes that size where it fits and keeps the batch",
          "[plan]") {
  test::TempDir dir;
  PlanOptions o;
  o.preset = "1b";
  o.seq_len = 8192;
  o.sharding = "fsdp";
  o.checkpointing = "full";
  o.gpu_memory_gib = 80;
  o.global_batch = 256;
  o.gpus_per_node = 8;
  o.world_sizes = "1:4";
  o.micro_batch = 4;
  const sdk::Overrides read = emit_and_read(dir, o);
  // 3 nodes: 24 x 4 does not divide 256.
  CHECK(read.size() == 3);
  CHECK(read.count(3) == 0);
  for (const auto& [nodes, entry] : read) {
    CHECK(entry == sdk::Override{.micro_batch_size = 4});
    const sdk::BatchPlan bp = sdk::plan_batches(256, nodes * 8, sdk::micro_batch_sizes(entry, {}));
    CHECK(bp.accum_steps * nodes * 8 * 4 == 256);
  }
}

TEST_CASE("range_split is the SDK's plan over the micro-batches from 1 to the largest", "[plan]") {
  int64_t planned = 0;
  for (int64_t g = 1; g <= 90; ++g) {
    for (int64_t ranks = 1; ranks <= 12; ++ranks) {
      for (int64_t largest = 1; largest <= 7; ++largest) {
        for (const int64_t max_accum : {1, 3, 64}) {
          std::vector<int64_t> sizes;
          for (int64_t m = 1; m <= largest; ++m) sizes.push_back(m);
          const auto split = range_split(g, ranks, largest, max_accum);
          INFO(g << " over " << ranks << " up to " << largest << " in " << max_accum);
          try {
            const sdk::BatchPlan bp = sdk::plan_batches(g, ranks, sizes, max_accum);
            REQUIRE(split);
            std::vector<int64_t> want(static_cast<size_t>(split->ranks_at_larger), split->larger);
            want.resize(static_cast<size_t>(ranks), split->smaller);
            CHECK(bp.micro_batches == want);
            CHECK(bp.accum_steps == split->accumulation);
            ++planned;
          } catch (const ConfigError&) {
            CHECK(!split);
          }
        }
      }
    }
  }
  CHECK(planned > 5000);
}

TEST_CASE("elasticctl plan's options give a table or JSON, and refuse bad input", "[plan]") {
  PlanOptions o;
  o.preset = "8b";
  o.seq_len = 4096;
  o.sharding = "fsdp";
  o.gpu_memory_gib = 80;
  o.world_sizes = "8,16";
  o.global_batch = 512;
  const PlanOutput table = run_plan(o);
  CHECK(table.report.find("Llama") == std::string::npos);  // the preset's name, not its source
  CHECK(table.report.find("8b (8.03B parameters") != std::string::npos);
  CHECK(table.config.empty());

  o.json = true;
  const auto j = nlohmann::json::parse(run_plan(o).report);
  REQUIRE(j["sizes"].size() == 2);
  CHECK(j["sizes"][0]["ranks"] == 8);
  CHECK(j["sizes"][1]["shard_degree"] == 16);
  const auto& peak = j["sizes"][0]["peak_bytes"];
  CHECK(peak["total"].get<int64_t>() ==
        Approx(peak["weights"].get<double>() + peak["gradients"].get<double>() +
               peak["optimizer"].get<double>() + peak["activations"].get<double>() +
               peak["temporaries"].get<double>())
            .margin(5));
  CHECK(j["setup"]["sharding"] == "fsdp");

  auto refused = [](PlanOptions bad) { CHECK_THROWS_AS(run_plan(bad), ConfigError); };
  PlanOptions bad = o;
  bad.preset.clear();  // no shape at all
  refused(bad);
  bad = o;
  bad.precision = "int4";
  refused(bad);
  bad = o;
  bad.gpu_memory_gib = 0;
  refused(bad);
  bad = o;
  bad.margin = 1;
  refused(bad);
  bad = o;
  bad.world_sizes = "0:4";
  refused(bad);
  bad = o;
  bad.emit_config = "/tmp/x.yaml";  // needs --gpus-per-node
  refused(bad);
  bad = o;
  bad.heads = 7;  // 4096 is not a multiple of 7
  refused(bad);
}

TEST_CASE("a fused loss keeps the logits in the compute dtype, a chunked one keeps none",
          "[plan]") {
  TrainingSetup s = tiny(Precision::bf16, Sharding::ddp);
  const Breakdown eager = per_rank_memory(s, 1, 1);
  s.loss = Loss::fused;
  const Breakdown fused = per_rank_memory(s, 1, 1);
  CHECK(eager.activations - fused.activations == 4 * (4 * 16 - 2 * 16));
  CHECK(eager.temporaries - fused.temporaries == 4 * 8 * 16);
  s.loss = Loss::chunked;
  CHECK(fused.activations - per_rank_memory(s, 1, 1).activations == 4 * 2 * 16);
}

TEST_CASE("a micro-batch asked for is evaluated as given, and warned about when over budget",
          "[plan]") {
  PlanRequest r = fsdp_request();
  r.global_batch = 400;
  r.micro_batch = 50;  // the largest that fits is 47
  const SizePlan s = make_plan(r).sizes.at(0);
  CHECK(s.micro_batch == 50);
  CHECK(s.accumulation == 2);
  CHECK(s.keeps_global_batch);
  CHECK(!s.usable(64));
  CHECK(s.peak.total() == 3312 + 50 * 2016);
  REQUIRE(s.warnings.size() == 1);
  CHECK(s.warnings[0].find("does not fit") != std::string::npos);
}
