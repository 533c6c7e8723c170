// The job secret's handshake (store/auth.hpp): clients with the secret are
// served, a client without it, with another one, or replaying a recorded
// handshake is refused and its connection closed, and the store goes on
// serving the others.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "server_fixture.hpp"
#include "store/auth.hpp"
#include "util/hmac.hpp"
#include "util/secret.hpp"

using elasticrun::ConfigError;
using elasticrun::StoreClient;
using elasticrun::StoreClientOptions;
using elasticrun::store::AuthGate;
using elasticrun::store::client_proof;
using elasticrun::store::kAuthNonceSize;
using elasticrun::store::kRefusedWord;
using elasticrun::store::QueryType;
using elasticrun::store::RequestWriter;
using elasticrun::store::server_proof;
using elasticrun::test::RawConnection;
using elasticrun::test::ServerFixture;
namespace frames = elasticrun::test::frames;

namespace {

const std::string kSecret = "0123456789abcdef-the-job-secret";

elasticrun::store::ServerOptions with_secret(std::string secret) {
  elasticrun::store::ServerOptions o;
  o.secret = std::move(secret);
  return o;
}

StoreClient client_of(const ServerFixture& fx, std::string secret) {
  StoreClientOptions o;
  o.connect_timeout = elasticrun::test::kPatience;
  o.timeout = elasticrun::test::kPatience;
  o.secret = std::move(secret);
  return StoreClient::connect("127.0.0.1", fx.port(), o);
}

std::string hello(const std::string& nonce) {
  std::string f;
  RequestWriter(f).type(QueryType::kAuthHello).bytes(nonce);
  return f;
}

std::string proof(const std::string& mac) {
  std::string f;
  RequestWriter(f).type(QueryType::kAuthProof).bytes(mac);
  return f;
}

}  // namespace

TEST_CASE("the MAC is RFC 4231's HMAC-SHA256 and the comparison sees every byte", "[auth]") {
  // RFC 4231, test case 2.
  const std::string mac = elasticrun::util::hmac_sha256("Jefe", "what do ya want for nothing?");
  const unsigned char want[] = {0x5b, 0xdc, 0xc1, 0x46, 0xbf, 0x60, 0x75, 0x4e, 0x6a, 0x04, 0x24,
                                0x26, 0x08, 0x95, 0x75, 0xc7, 0x5a, 0x00, 0x3f, 0x08, 0x9d, 0x27,
                                0x39, 0x83, 0x9d, 0xec, 0x58, 0xb9, 0x64, 0xec, 0x38, 0x43};
  CHECK(mac == std::string(reinterpret_cast<const char*>(want), sizeof want));
  std::string other = mac;
  other[31] ^= 1;
  CHECK(elasticrun::util::equal_in_constant_time(mac, mac));
  CHECK_FALSE(elasticrun::util::equal_in_constant_time(mac, other));
  CHECK_FALSE(elasticrun::util::equal_in_constant_time(mac, mac.substr(0, 31)));
  CHECK(elasticrun::util::random_bytes(32) != elasticrun::util::random_bytes(32));
}

TEST_CASE("clients holding the job's secret are served; the handshake proves both sides",
          "[auth][server]") {
  ServerFixture fx(with_secret(kSecret));
  StoreClient a = client_of(fx, kSecret);
  StoreClient b = client_of(fx, kSecret);
  a.set("k", "v");
  CHECK(b.get("k") == "v");
  CHECK(fx.stats().connections_refused == 0);

  // By hand: the server's proof is over both nonces.
  RawConnection c(fx.port());
  const std::string cn(kAuthNonceSize, 'c');
  c.send(hello(cn));
  const std::string sn = c.read_bytes();
  REQUIRE(sn.size() == kAuthNonceSize);
  c.send(proof(client_proof(kSecret, cn, sn)) + frames::validate() + frames::ping(5));
  CHECK(c.read_bytes() == server_proof(kSecret, cn, sn));
  CHECK(c.read_u32() == 5);
}

TEST_CASE("a client without the secret is refused, told why, and the store serves on",
          "[auth][server]") {
  ServerFixture fx(with_secret(kSecret));
  StoreClient good = client_of(fx, kSecret);
  try {
    (void)client_of(fx, "");
    FAIL("a client without the secret was served");
  } catch (const ConfigError& e) {
    CHECK_THAT(e.what(), Catch::Contains("asks for the job's secret, and this client has none"));
    CHECK_THAT(e.what(), Catch::Contains("ELASTICRUN_SECRET_FILE"));
  }
  // On the wire: the refusal word where PING's echo would be, then EOF; no
  // request of it reached the store.
  RawConnection raw(fx.port());
  std::string f = frames::validate() + frames::ping(9);
  RequestWriter(f).type(QueryType::kSet).bytes("/stolen").bytes("1");
  raw.send(f);
  CHECK(raw.read_u32() == kRefusedWord);
  CHECK(raw.closed_by_server());
  CHECK(fx.eventually([](const auto& s) { return s.connections_refused == 2; }));
  CHECK_FALSE(good.check({"stolen"}));
  good.set("still", "here");
  CHECK(good.get("still") == "here");
}

TEST_CASE("before the handshake the store buffers nothing but an AUTH request", "[auth][server]") {
  ServerFixture fx(with_secret(kSecret));
  // The first byte of a SET whose 64 MiB value never comes: refused on it.
  RawConnection set(fx.port());
  set.send(std::string(1, static_cast<char>(QueryType::kSet)));
  CHECK(set.read_u32() == kRefusedWord);
  CHECK(set.closed_by_server());
  // After AUTH_HELLO only AUTH_PROOF's first byte is taken, and its field
  // is bounded before its bytes arrive.
  RawConnection slow(fx.port());
  slow.send(hello(std::string(kAuthNonceSize, 'h')));
  REQUIRE(slow.read_bytes().size() == kAuthNonceSize);
  std::string f(1, static_cast<char>(QueryType::kAuthProof));
  const uint64_t huge = 1ull << 30;
  f.append(reinterpret_cast<const char*>(&huge), sizeof(huge));
  slow.send(f);
  CHECK(slow.closed_by_server());
  CHECK(fx.eventually([](const auto& s) { return s.connections_refused == 1; }));
  CHECK(fx.eventually([](const auto& s) { return s.connections_dropped == 2; }));
  CHECK(client_of(fx, kSecret).ping() >= std::chrono::milliseconds(0));
}

TEST_CASE("a client with another secret is refused by the store, which logs it", "[auth][server]") {
  ServerFixture fx(with_secret(kSecret));
  try {
    (void)client_of(fx, "another-secret-of-16-bytes-or-more");
    FAIL("a client with the wrong secret was served");
  } catch (const ConfigError& e) {
    CHECK_THAT(e.what(), Catch::Contains("refused this client's proof"));
  }
  CHECK(fx.eventually([](const auto& s) { return s.connections_refused == 1; }));
  CHECK(client_of(fx, kSecret).ping() >= std::chrono::milliseconds(0));
}

TEST_CASE("a recorded handshake replayed on a new connection is refused", "[auth][server]") {
  ServerFixture fx(with_secret(kSecret));
  const std::string cn(kAuthNonceSize, 'r');
  std::string recorded_proof;
  {
    RawConnection first(fx.port());
    first.send(hello(cn));
    const std::string sn = first.read_bytes();
    recorded_proof = client_proof(kSecret, cn, sn);
    first.send(proof(recorded_proof) + frames::validate() + frames::ping(1));
    REQUIRE(first.read_bytes().size() == elasticrun::util::kHmacSize);
    REQUIRE(first.read_u32() == 1);
  }
  // The eavesdropper sends the same bytes: the server's nonce is new.
  RawConnection replay(fx.port());
  replay.send(hello(cn));
  const std::string sn2 = replay.read_bytes();
  CHECK(sn2.size() == kAuthNonceSize);
  std::string f = proof(recorded_proof);
  RequestWriter(f).type(QueryType::kSet).bytes("/replayed").bytes("1");
  replay.send(f);
  CHECK(replay.read_bytes().empty());  // no proof back: refused
  CHECK(replay.closed_by_server());
  CHECK(fx.eventually([](const auto& s) { return s.connections_refused == 1; }));
  CHECK_FALSE(client_of(fx, kSecret).check({"replayed"}));
}

TEST_CASE("a client with a secret refuses a store that has none", "[auth][server]") {
  ServerFixture open_store;
  try {
    (void)client_of(open_store, kSecret);
    FAIL("a secret was used with a store that asks for none");
  } catch (const ConfigError& e) {
    CHECK_THAT(e.what(), Catch::Contains("asks for no secret"));
  }
  // Clients without one are served as always.
  StoreClient c = open_store.client();
  c.set("a", "1");
  CHECK(c.get("a") == "1");
}

TEST_CASE("the gate refuses handshakes out of order and lets nothing through before one",
          "[auth]") {
  using V = AuthGate::Verdict;
  elasticrun::store::Request r;
  std::string reply, why;
  auto req = [&](QueryType t, std::string value = {}) {
    r = {};
    r.type = t;
    if (t == QueryType::kAuthHello || t == QueryType::kAuthProof) r.values = {std::move(value)};
    reply.clear();
    why.clear();
    return r;
  };
  SECTION("proof first") {
    AuthGate g(&kSecret);
    CHECK(g.admit(req(QueryType::kAuthProof, "x"), reply, why) == V::kRefused);
    CHECK_THAT(why, Catch::Contains("before AUTH_HELLO"));
  }
  SECTION("a short nonce") {
    AuthGate g(&kSecret);
    CHECK(g.admit(req(QueryType::kAuthHello, "short"), reply, why) == V::kRefused);
  }
  SECTION("a request where the proof is due") {
    AuthGate g(&kSecret);
    CHECK(g.admit(req(QueryType::kAuthHello, std::string(32, 'n')), reply, why) == V::kAnswered);
    CHECK(g.admit(req(QueryType::kGet), reply, why) == V::kRefused);
    CHECK_FALSE(g.open());
  }
  SECTION("a second handshake once open") {
    AuthGate g(&kSecret);
    const std::string cn(32, 'n');
    CHECK(g.admit(req(QueryType::kAuthHello, cn), reply, why) == V::kAnswered);
    const std::string sn = reply.substr(8);
    CHECK(g.admit(req(QueryType::kAuthProof, client_proof(kSecret, cn, sn)), reply, why) ==
          V::kAnswered);
    CHECK(g.open());
    CHECK(g.admit(req(QueryType::kGet), reply, why) == V::kPass);
    CHECK(g.admit(req(QueryType::kAuthHello, cn), reply, why) == V::kRefused);
  }
  SECTION("a store without a secret") {
    AuthGate g(nullptr);
    CHECK(g.open());
    CHECK(g.admit(req(QueryType::kAuthHello, std::string(32, 'n')), reply, why) == V::kAnswered);
    CHECK(reply == std::string(8, '\0'));  // an empty nonce
    CHECK(g.admit(req(QueryType::kSet), reply, why) == V::kPass);
    CHECK(g.admit(req(QueryType::kAuthProof, "x"), reply, why) == V::kRefused);
  }
}

TEST_CASE("the secret file: its bytes less one newline, at least 16, never printed", "[auth]") {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("secret_test_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  auto write = [&](const std::string& name, const std::string& bytes) {
    std::ofstream(dir / name, std::ios::binary) << bytes;
    return (dir / name).string();
  };
  using elasticrun::util::job_secret;
  using elasticrun::util::read_secret_file;
  CHECK(read_secret_file("--x", write("nl", "0123456789abcdef\n")) == "0123456789abcdef");
  CHECK(read_secret_file("--x", write("raw", "0123456789abcdef\n\n")) == "0123456789abcdef\n");
  try {
    (void)read_secret_file("--rdzv-conf secret_file", write("short", "hunter2\n"));
    FAIL("a short secret was taken");
  } catch (const ConfigError& e) {
    CHECK_THAT(e.what(), Catch::Contains("--rdzv-conf secret_file"));
    CHECK_THAT(e.what(), Catch::Contains("holds 7 bytes"));
    CHECK_THAT(e.what(), !Catch::Contains("hunter2"));
  }
  CHECK_THROWS_WITH(read_secret_file("--x", (dir / "absent").string()),
                    Catch::Contains("cannot read the secret file"));
  // The flag wins over the variable; neither: no secret.
  const std::string from_env = write("env", "from-the-environment-file");
  ::setenv(elasticrun::util::kSecretFileEnv, from_env.c_str(), 1);
  CHECK(job_secret(std::nullopt, "--secret-file") == "from-the-environment-file");
  CHECK(job_secret(write("flag", "from-the-flag's-file"), "--secret-file") ==
        "from-the-flag's-file");
  ::unsetenv(elasticrun::util::kSecretFileEnv);
  CHECK(job_secret(std::nullopt, "--secret-file") == std::nullopt);
  fs::remove_all(dir);
}
