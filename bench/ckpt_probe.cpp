// ckpt_probe: one rank of a checkpoint save or load with the C++ format
// (include/elasticrun/checkpoint.hpp), or of the raw disk reference; one
// process per rank, bench/ckpt_bench.py starts them and reads their lines.
//
//   ckpt_probe save       SPEC ROOT STORE TAG RANK WORLD
//   ckpt_probe load       SPEC ROOT STORE TAG RANK WORLD
//   ckpt_probe disk-write DIR STORE TAG RANK WORLD BYTES
//   ckpt_probe disk-read  DIR STORE TAG RANK WORLD BYTES WRITERS
//
// SPEC names the tensors, one "name rows [cols]" line each (float32,
// row-sharded; the line number seeds the values). STORE is HOST:PORT of an
// `elasticctl store`: the ranks' barriers (the Checkpointer's three and the
// start line) are StoreClient::barrier on keys under TAG.
//
// save: generates this rank's rows (even_rows over WORLD), then, timed from
// the start barrier, Checkpointer::save (returns once `latest` names the
// checkpoint, on every rank).
// load: allocates this rank's rows of every tensor (even_rows over WORLD,
// the new world size), then, timed from the start barrier, latest(), Reader
// and read_rows() of each tensor; checks every element against the
// generator; then again with the files in the page cache ("warm").
// disk-write: write() of BYTES/WORLD bytes to DIR/raw_<RANK> and fsync, as
// the library writes a shard; disk-read: pread() of this rank's contiguous
// share of the WRITERS files written that way, cold, then warm.
//
// Prints one JSON line: start and end (CLOCK_MONOTONIC ns, comparable
// across processes), bytes, and for load the warm pair and the sum of the
// loaded values (the bench compares it with DCP's). Exits 1 on a mismatch.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "elasticrun/checkpoint.hpp"
#include "elasticrun/store_client.hpp"

namespace ck = elasticrun::ckpt;

namespace {

struct Spec {
  std::string name;
  std::vector<std::int64_t> shape;
  std::int64_t rows() const { return shape[0]; }
  std::int64_t cols() const { return shape.size() > 1 ? shape[1] : 1; }
};

// The value of element `e` (row-major, global) of tensor number `t`: an
// integer below 2^24, so float32 holds it exactly and sums are exact.
// bench/ckpt_bench.py's DCP ranks compute the same.
float value(std::uint64_t t, std::uint64_t e) {
  return static_cast<float>((e * 2654435761ull + t * 40503ull) % 16777213ull);
}

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::vector<Spec> read_spec(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::vector<Spec> out;
  for (std::string line; std::getline(in, line);) {
    std::istringstream words(line);
    Spec s;
    if (!(words >> s.name)) continue;
    for (std::int64_t d; words >> d;) s.shape.push_back(d);
    if (s.shape.empty() || s.shape.size() > 2) throw std::runtime_error("bad spec line: " + line);
    out.push_back(std::move(s));
  }
  return out;
}

class Barriers {  // a fresh key per round, as StoreClient::barrier asks
 public:
  Barriers(const std::string& endpoint, std::string tag, int world)
      : client_(connect(endpoint)), tag_(std::move(tag)), world_(world) {}
  void operator()() { client_.barrier(tag_ + "/barrier/" + std::to_string(round_++), world_); }

 private:
  static elasticrun::StoreClient connect(const std::string& endpoint) {
    const auto colon = endpoint.rfind(':');
    return elasticrun::StoreClient::connect(
        endpoint.substr(0, colon),
        static_cast<std::uint16_t>(std::stoi(endpoint.substr(colon + 1))));
  }
  elasticrun::StoreClient client_;
  std::string tag_;
  int world_;
  int round_ = 0;
};

// Rows [begin, end) of tensor t, generated.
std::vector<float> generate(std::size_t t, const Spec& s, std::int64_t begin, std::int64_t end) {
  std::vector<float> out(static_cast<std::size_t>((end - begin) * s.cols()));
  const auto first = static_cast<std::uint64_t>(begin * s.cols());
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = value(t, first + i);
  return out;
}

// Checks rows [begin, end) of tensor t against the generator; returns their sum.
std::uint64_t check(std::size_t t, const Spec& s, std::int64_t begin,
                    const std::vector<float>& got) {
  const auto first = static_cast<std::uint64_t>(begin * s.cols());
  std::uint64_t sum = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (got[i] != value(t, first + i)) {
      throw std::runtime_error("tensor '" + s.name + "' element " + std::to_string(first + i) +
                               ": loaded " + std::to_string(got[i]) + ", saved " +
                               std::to_string(value(t, first + i)));
    }
    sum += static_cast<std::uint64_t>(got[i]);
  }
  return sum;
}

std::span<const std::byte> bytes_of(const std::vector<float>& v) {
  return std::as_bytes(std::span(v));
}

int save(const std::string& spec_path, const std::string& root, Barriers& barrier, int rank,
         int world) {
  const auto specs = read_spec(spec_path);
  std::vector<std::vector<float>> data;
  std::vector<ck::ShardView> shards;
  std::uint64_t bytes = 0;
  for (std::size_t t = 0; t < specs.size(); ++t) {
    const auto [b, e] = ck::even_rows(specs[t].rows(), rank, world);
    data.push_back(generate(t, specs[t], b, e));
    shards.push_back(
        {{specs[t].name, "float32", 4, specs[t].shape, false}, b, e, bytes_of(data.back())});
    bytes += data.back().size() * 4;
  }
  ck::Checkpointer ckpt(root, 1, rank, world, [&] { barrier(); });
  barrier();
  const auto start = now_ns();
  ckpt.save(1, shards);
  const auto end = now_ns();
  std::printf("{\"rank\": %d, \"start\": %lld, \"end\": %lld, \"bytes\": %llu}\n", rank,
              static_cast<long long>(start), static_cast<long long>(end),
              static_cast<unsigned long long>(bytes));
  return 0;
}

int load(const std::string& spec_path, const std::string& root, Barriers& barrier, int rank,
         int world) {
  const auto specs = read_spec(spec_path);
  std::vector<std::vector<float>> out;
  std::vector<std::int64_t> begins;
  std::uint64_t bytes = 0;
  for (const auto& s : specs) {
    const auto [b, e] = ck::even_rows(s.rows(), rank, world);
    out.emplace_back(static_cast<std::size_t>((e - b) * s.cols()));
    begins.push_back(b);
    bytes += out.back().size() * 4;
  }
  std::int64_t times[4];
  std::uint64_t sum = 0;
  for (int pass = 0; pass < 2; ++pass) {  // cold (the bench evicted the files), then warm
    // NaN everywhere, so a load that skips a row cannot pass the check.
    for (auto& v : out) std::fill(v.begin(), v.end(), std::numeric_limits<float>::quiet_NaN());
    barrier();
    times[2 * pass] = now_ns();
    const auto dir = ck::latest(root);
    if (!dir) throw std::runtime_error("no checkpoint published under " + root);
    const ck::Reader reader(*dir);
    for (std::size_t t = 0; t < specs.size(); ++t) {
      const std::int64_t rows = static_cast<std::int64_t>(out[t].size()) / specs[t].cols();
      reader.read_rows(specs[t].name, begins[t], begins[t] + rows,
                       std::as_writable_bytes(std::span(out[t])));
    }
    times[2 * pass + 1] = now_ns();
    sum = 0;
    for (std::size_t t = 0; t < specs.size(); ++t) sum += check(t, specs[t], begins[t], out[t]);
  }
  std::printf(
      "{\"rank\": %d, \"start\": %lld, \"end\": %lld, \"warm_start\": %lld, \"warm_end\": %lld, "
      "\"bytes\": %llu, \"sum\": %llu}\n",
      rank, static_cast<long long>(times[0]), static_cast<long long>(times[1]),
      static_cast<long long>(times[2]), static_cast<long long>(times[3]),
      static_cast<unsigned long long>(bytes), static_cast<unsigned long long>(sum));
  return 0;
}

void fail_errno(const std::string& what) {
  throw std::runtime_error(what + ": " + std::strerror(errno));
}

int disk_write(const std::string& dir, Barriers& barrier, int rank, int world, std::int64_t total) {
  const auto [b, e] = ck::even_rows(total, rank, world);
  std::vector<std::uint64_t> buf(static_cast<std::size_t>(e - b + 7) / 8);
  std::uint64_t x = 0x9E3779B97F4A7C15ull ^ static_cast<std::uint64_t>(rank);
  for (auto& w : buf) {  // xorshift: nothing a disk could compress or deduplicate
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    w = x;
  }
  const std::string path = dir + "/raw_" + std::to_string(rank);
  barrier();
  const auto start = now_ns();
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail_errno("open " + path);
  const auto* p = reinterpret_cast<const char*>(buf.data());
  for (std::size_t left = static_cast<std::size_t>(e - b); left > 0;) {
    const ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno != EINTR) fail_errno("write " + path);
    if (n > 0) p += n, left -= static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0) fail_errno("fsync " + path);
  ::close(fd);
  barrier();
  const auto end = now_ns();
  std::printf("{\"rank\": %d, \"start\": %lld, \"end\": %lld, \"bytes\": %lld}\n", rank,
              static_cast<long long>(start), static_cast<long long>(end),
              static_cast<long long>(e - b));
  return 0;
}

int disk_read(const std::string& dir, Barriers& barrier, int rank, int world, std::int64_t total,
              int writers) {
  const auto [b, e] = ck::even_rows(total, rank, world);
  std::vector<char> buf(static_cast<std::size_t>(e - b));
  std::int64_t times[4];
  for (int pass = 0; pass < 2; ++pass) {  // cold, then warm, as load
    std::fill(buf.begin(), buf.end(), 0);
    barrier();
    times[2 * pass] = now_ns();
    for (int w = 0; w < writers; ++w) {  // the files, concatenated, hold bytes [0, total)
      const auto [fb, fe] = ck::even_rows(total, w, writers);
      std::int64_t from = std::max(b, fb);
      const std::int64_t to = std::min(e, fe);
      if (from >= to) continue;
      const std::string path = dir + "/raw_" + std::to_string(w);
      const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) fail_errno("open " + path);
      while (from < to) {
        const ssize_t n = ::pread(fd, buf.data() + (from - b), static_cast<std::size_t>(to - from),
                                  static_cast<off_t>(from - fb));
        if (n < 0 && errno != EINTR) fail_errno("read " + path);
        if (n == 0) throw std::runtime_error(path + " is shorter than expected");
        if (n > 0) from += n;
      }
      ::close(fd);
    }
    times[2 * pass + 1] = now_ns();
  }
  std::printf(
      "{\"rank\": %d, \"start\": %lld, \"end\": %lld, \"warm_start\": %lld, \"warm_end\": %lld, "
      "\"bytes\": %lld}\n",
      rank, static_cast<long long>(times[0]), static_cast<long long>(times[1]),
      static_cast<long long>(times[2]), static_cast<long long>(times[3]),
      static_cast<long long>(e - b));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> a(argv + 1, argv + argc);
  try {
    if (a.size() == 7 && (a[0] == "save" || a[0] == "load")) {
      const int rank = std::stoi(a[5]), world = std::stoi(a[6]);
      Barriers barrier(a[3], a[4], world);
      return a[0] == "save" ? save(a[1], a[2], barrier, rank, world)
                            : load(a[1], a[2], barrier, rank, world);
    }
    if ((a.size() == 7 && a[0] == "disk-write") || (a.size() == 8 && a[0] == "disk-read")) {
      const int rank = std::stoi(a[4]), world = std::stoi(a[5]);
      Barriers barrier(a[2], a[3], world);
      return a[0] == "disk-write"
                 ? disk_write(a[1], barrier, rank, world, std::stoll(a[6]))
                 : disk_read(a[1], barrier, rank, world, std::stoll(a[6]), std::stoi(a[7]));
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ckpt_probe: %s\n", e.what());
    return 1;
  }
  std::fprintf(stderr,
               "usage: ckpt_probe save|load SPEC ROOT STORE TAG RANK WORLD\n"
               "       ckpt_probe disk-write DIR STORE TAG RANK WORLD BYTES\n"
               "       ckpt_probe disk-read DIR STORE TAG RANK WORLD BYTES WRITERS\n");
  return 2;
}
