// Uses a piece of every installed library: the batch plan and the event API
// (sdk), a checkpoint saved and read back (ckpt), and the store client
// (store, against the server given on the command line, if one is).
#include <cstdio>
#include <cstdlib>
#include <elasticrun/batch.hpp>
#include <elasticrun/checkpoint.hpp>
#include <elasticrun/store_client.hpp>
#include <elasticrun/version.hpp>
#include <elasticrun/worker.hpp>
#include <vector>

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: consumer CKPT_DIR [STORE_PORT]\n");
    return 2;
  }
  const auto plan = elasticrun::sdk::plan_batches(48, 3, {8, 16});
  const bool attached = elasticrun::sdk::attach();  // false: not under elasticrun

  std::vector<float> rows = {1, 2, 3, 4};
  elasticrun::ckpt::ShardView shard;
  shard.info = {"w", "float32", sizeof(float), {4}, false};
  shard.row_begin = 0;
  shard.row_end = 4;
  shard.bytes = std::as_bytes(std::span<const float>(rows));
  elasticrun::ckpt::Checkpointer ckpt(argv[1], 1, 0, 1, {});
  ckpt.save(7, std::span<const elasticrun::ckpt::ShardView>(&shard, 1));
  elasticrun::ckpt::Reader reader(*elasticrun::ckpt::latest(argv[1]));
  std::vector<float> back(4);
  reader.read_rows("w", 0, 4, std::as_writable_bytes(std::span<float>(back)));

  std::string stored = "-";
  if (argc > 2) {
    auto store = elasticrun::StoreClient::connect("127.0.0.1",
                                                  static_cast<uint16_t>(std::atoi(argv[2])));
    store.set("consumer", "here");
    stored = store.get("consumer");
  }
  std::printf("version %s plan %s attached %d step %lld sum %.0f store %s\n", ELASTICRUN_VERSION,
              plan.describe().c_str(), attached ? 1 : 0, static_cast<long long>(reader.step()),
              back[0] + back[1] + back[2] + back[3], stored.c_str());
  return 0;
}
