// store_ops HOST PORT: drives elasticrun::StoreClient through a fixed script
// of operations and prints one JSON line per step:
//
//   {"op": "<step name>", "result": <value>}
//
// where a value is null (no result), true/false, an integer, a string (bytes,
// escaped), a list of those, or {"error": "<TimeoutError|NetworkError|...>"}.
// The integration suite runs the same binary against `elasticctl store` and
// against PyTorch's own TCPStore server and compares the two outputs line for
// line, so the script must be deterministic: fixed keys, no timings, sorted
// list_keys.
//
// Exit status: 0 when the script ran to the end (errors are part of the
// output), 1 when the store could not be reached, 2 on bad arguments.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include "elasticrun/errors.hpp"
#include "elasticrun/store_client.hpp"

namespace {

using elasticrun::StoreClient;
using namespace std::chrono_literals;

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      default:
        if (c < 0x20 || c >= 0x7f) {
          // Bytes, not UTF-8: map each byte to one code point (latin-1), as
          // Python's bytes.decode("latin-1") would, so both sides agree.
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

std::string json_list(const std::vector<std::string>& items) {
  std::string out = "[";
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out += ", ";
    out += json_string(items[i]);
  }
  return out + "]";
}

std::string json_error(const char* kind) {
  return std::string("{\"error\": \"") + kind + "\"}";
}

// Runs one step; the step returns its result already encoded as JSON.
void step(const std::string& name, const std::function<std::string()>& fn) {
  std::string result;
  try {
    result = fn();
  } catch (const elasticrun::TimeoutError&) {
    result = json_error("TimeoutError");
  } catch (const elasticrun::NetworkError&) {
    result = json_error("NetworkError");
  } catch (const elasticrun::StoreError&) {
    result = json_error("StoreError");
  } catch (const elasticrun::ConfigError&) {
    result = json_error("ConfigError");
  } catch (const std::exception&) {
    result = json_error("Exception");
  }
  std::printf("{\"op\": %s, \"result\": %s}\n", json_string(name).c_str(), result.c_str());
  std::fflush(stdout);
}

std::string null() {
  return "null";
}
std::string boolean(bool b) {
  return b ? "true" : "false";
}
std::string integer(int64_t v) {
  return std::to_string(v);
}

void run_script(StoreClient& c) {
  step("set a", [&] {
    c.set("ops/a", "alpha");
    return null();
  });
  step("get a", [&] { return json_string(c.get("ops/a")); });
  step("add n +5", [&] { return integer(c.add("ops/n", 5)); });
  step("add n -2", [&] { return integer(c.add("ops/n", -2)); });
  step("get n", [&] { return json_string(c.get("ops/n")); });

  step("compare_set missing key, empty expected",
       [&] { return json_string(c.compare_set("ops/cas", "", "v1")); });
  step("compare_set missing key, non-empty expected",
       [&] { return json_string(c.compare_set("ops/cas_absent", "x", "y")); });
  // The "lie" above must not have stored anything.
  step("check cas_absent after failed compare_set",
       [&] { return boolean(c.check({"ops/cas_absent"})); });
  step("compare_set match", [&] { return json_string(c.compare_set("ops/cas", "v1", "v2")); });
  step("compare_set mismatch", [&] { return json_string(c.compare_set("ops/cas", "nope", "v3")); });
  step("get cas", [&] { return json_string(c.get("ops/cas")); });

  step("check present", [&] { return boolean(c.check({"ops/a", "ops/n"})); });
  step("check missing", [&] { return boolean(c.check({"ops/a", "ops/missing"})); });
  step("wait present", [&] {
    c.wait({"ops/a", "ops/n"});
    return null();
  });
  step("wait missing 300ms", [&] {
    c.wait({"ops/missing"}, 300ms);
    return null();
  });
  // A timed-out wait is cancelled on the server; the connection must still
  // answer in order.
  step("get a after timed-out wait", [&] { return json_string(c.get("ops/a")); });

  step("num_keys", [&] { return integer(c.num_keys()); });
  step("delete_key present", [&] { return boolean(c.delete_key("ops/a")); });
  step("delete_key missing", [&] { return boolean(c.delete_key("ops/a")); });
  step("check deleted", [&] { return boolean(c.check({"ops/a"})); });
  step("num_keys after delete", [&] { return integer(c.num_keys()); });

  step("append new", [&] {
    c.append("ops/log", "ab");
    return null();
  });
  step("append existing", [&] {
    c.append("ops/log", "cd");
    return null();
  });
  step("get log", [&] { return json_string(c.get("ops/log")); });

  step("multi_set", [&] {
    c.multi_set({"ops/m1", "ops/m2", "ops/m3"}, {"x", "", "z z"});
    return null();
  });
  step("multi_get", [&] { return json_list(c.multi_get({"ops/m3", "ops/m1", "ops/m2"})); });

  step("queue_len missing", [&] { return integer(c.queue_len("ops/q")); });
  step("queue_push first", [&] {
    c.queue_push("ops/q", "first");
    return null();
  });
  step("queue_push second", [&] {
    c.queue_push("ops/q", "second");
    return null();
  });
  step("queue_len 2", [&] { return integer(c.queue_len("ops/q")); });
  step("check non-empty queue", [&] { return boolean(c.check({"ops/q"})); });
  step("queue_pop first", [&] { return json_string(c.queue_pop("ops/q")); });
  step("queue_pop second", [&] { return json_string(c.queue_pop("ops/q")); });
  step("queue_len 0", [&] { return integer(c.queue_len("ops/q")); });
  step("queue_pop empty 300ms", [&] { return json_string(c.queue_pop("ops/q", 300ms)); });
  step("get n after timed-out queue_pop", [&] { return json_string(c.get("ops/n")); });

  step("list_keys", [&] {
    auto keys = c.list_keys();
    std::sort(keys.begin(), keys.end());
    return json_list(keys);
  });

  step("barrier world_size 1", [&] {
    c.barrier("ops/barrier", 1);
    return null();
  });
  // PyTorch keeps the arrival count under the barrier key as decimal text.
  step("get barrier counter", [&] { return json_string(c.get("ops/barrier")); });
  step("num_keys at end", [&] { return integer(c.num_keys()); });
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: store_ops HOST PORT\n");
    return 2;
  }
  const std::string host = argv[1];
  char* end = nullptr;
  const long port = std::strtol(argv[2], &end, 10);
  if (*argv[2] == '\0' || *end != '\0' || port <= 0 || port > 65535) {
    std::fprintf(stderr, "store_ops: bad port %s\n", argv[2]);
    return 2;
  }
  elasticrun::StoreClientOptions options;
  options.connect_timeout = 5s;
  options.timeout = 5s;
  try {
    auto client = StoreClient::connect(host, static_cast<uint16_t>(port), options);
    run_script(client);
  } catch (const elasticrun::Error& e) {
    std::fprintf(stderr, "store_ops: %s\n", e.what());
    return 1;
  }
  return 0;
}
