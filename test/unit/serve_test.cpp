// The agent's metrics (serve/metrics) as the event log drives them, and its
// HTTP server (serve/http_server) over real loopback TCP: the routes, the
// statuses of bad requests, and that a bad request reaches no handler.
#include <httplib.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <string>
#include <vector>

#include "elasticrun/errors.hpp"
#include "events/types.hpp"
#include "serve/http_server.hpp"
#include "serve/metrics.hpp"
#include "util/http_auth.hpp"

using namespace elasticrun::serve;
using Catch::Matchers::Contains;
namespace type = elasticrun::events::type;

namespace {

elasticrun::events::Event event(std::string_view t, nlohmann::json fields) {
  elasticrun::events::Event e;
  e.type = std::string(t);
  e.fields = std::move(fields);
  return e;
}

// A line of the text format for `series` (its name and labels, as written).
bool has_line(const std::string& text, const std::string& series, const std::string& value) {
  return text.find(series + " " + value + "\n") != std::string::npos;
}

struct FakeControl final : JobControl {
  int calls = 0;
  nlohmann::json status() override {
    ++calls;
    return {{"ok", true}};
  }
  nlohmann::json scale(int nodes, bool wait) override {
    ++calls;
    if (nodes == 99) throw UnsupportedError("this job's size is fixed");
    if (nodes == 98) throw elasticrun::TimeoutError("the leader did not answer");
    return {{"scale", nodes}, {"wait", wait}};
  }
  nlohmann::json release(int nodes, bool wait) override {
    ++calls;
    return {{"release", nodes}, {"wait", wait}};
  }
  nlohmann::json drain() override {
    ++calls;
    return {{"draining", true}};
  }
};

}  // namespace

TEST_CASE("the metrics follow the events the agent records", "[serve]") {
  AgentMetrics m("job", "h1", 2);
  const std::string l = R"({host="h1",run_id="job"})";
  CHECK(has_line(m.scrape(), "elasticrun_worker_step{host=\"h1\",run_id=\"job\",local_rank=\"1\"}",
                 "-1"));
  m.on_event(event(
      type::kRoundStart,
      {{"round", 3}, {"world_size", 6}, {"nodes", 3}, {"group_rank", 0}, {"restart_count", 2}}));
  m.on_event(event(type::kWaiting, {{"waiting", 1}, {"leaving", 0}, {"excluded", 2}}));
  m.on_event(event(type::kRoundEnd, {{"kind", "scale_up"}}));
  m.on_event(event(type::kRoundEnd, {{"kind", "scale_up"}}));
  // Between rounds (and for a released spare) the node is in no round.
  CHECK(has_line(m.scrape(), "elasticrun_world_size" + l, "0"));
  CHECK(has_line(m.scrape(), "elasticrun_group_rank" + l, "-1"));
  m.on_event(event(type::kHealthFault, {{"reason", "Hang"}}));
  m.on_event(event(type::kSection, {{"name", "ckpt"}, {"seconds", 1.5}}));
  m.on_event(event(type::kSection, {{"name", "eval"}, {"seconds", 9.0}}));
  // A later round at the same restart count adds no restart.
  m.on_event(event(
      type::kRoundStart,
      {{"round", 4}, {"world_size", 6}, {"nodes", 3}, {"group_rank", 0}, {"restart_count", 2}}));
  m.on_event(event(type::kWaiting, {{"waiting", 1}, {"leaving", 0}, {"excluded", 2}}));
  m.observe_steps({10, 9}, 0.25, 480.0);
  m.observe_steps({11, 11}, NAN, NAN);
  const std::string text = m.scrape();
  CHECK(has_line(text, "elasticrun_world_size" + l, "6"));
  CHECK(has_line(text, "elasticrun_nodes" + l, "3"));
  CHECK(has_line(text, "elasticrun_round" + l, "4"));
  CHECK(has_line(text, "elasticrun_spare_nodes" + l, "1"));
  CHECK(has_line(text, "elasticrun_excluded_nodes" + l, "2"));
  CHECK(has_line(text, "elasticrun_restarts_total" + l, "2"));
  CHECK(has_line(text, R"(elasticrun_scale_events_total{host="h1",run_id="job",reason="scale_up"})",
                 "2"));
  CHECK(
      has_line(text, R"(elasticrun_health_faults_total{host="h1",run_id="job",kind="Hang"})", "1"));
  CHECK(has_line(text, "elasticrun_last_checkpoint_seconds" + l, "1.5"));
  CHECK(has_line(text, R"(elasticrun_worker_step{host="h1",run_id="job",local_rank="0"})", "11"));
  CHECK(has_line(text, "elasticrun_step_seconds_count" + l, "1"));
  CHECK(has_line(text, "elasticrun_step_seconds_sum" + l, "0.25"));
  CHECK(has_line(text, "elasticrun_samples_per_second" + l, "480"));
  CHECK_THAT(text, Contains("# TYPE elasticrun_step_seconds histogram"));
}

TEST_CASE("the server answers its routes and refuses bad requests with a reason", "[serve]") {
  AgentMetrics metrics("job", "h1", 1);
  FakeControl control;
  HttpServer server({"127.0.0.1", 0, {}}, &metrics, &control);
  REQUIRE(server.port() > 0);
  httplib::Client c("127.0.0.1", server.port());

  auto res = c.Get("/metrics");
  REQUIRE(res);
  CHECK(res->status == 200);
  CHECK_THAT(res->get_header_value("Content-Type"), Contains("text/plain; version=0.0.4"));
  CHECK_THAT(res->body, Contains("elasticrun_world_size"));

  res = c.Get("/status");
  REQUIRE(res);
  CHECK(res->status == 200);
  CHECK(nlohmann::json::parse(res->body)["ok"] == true);

  res = c.Post("/scale", R"({"nodes": 3})", "application/json");
  REQUIRE(res);
  CHECK(res->status == 200);
  CHECK(nlohmann::json::parse(res->body) == nlohmann::json{{"scale", 3}, {"wait", true}});
  res = c.Post("/release?nodes=1&wait=false", "", "application/json");
  REQUIRE(res);
  CHECK(nlohmann::json::parse(res->body) == nlohmann::json{{"release", 1}, {"wait", false}});
  res = c.Post("/drain", "", "application/json");
  REQUIRE(res);
  CHECK(res->status == 200);
  const int good_calls = control.calls;
  CHECK(good_calls == 4);

  struct Bad {
    std::string method, path, body;
    int status;
    std::string why;
  };
  const std::vector<Bad> bad = {
      {"POST", "/scale", "", 400, "give the number of nodes"},
      {"POST", "/scale", "{not json", 400, "not a JSON object"},
      {"POST", "/scale", "[1]", 400, "not a JSON object"},
      {"POST", "/scale", R"({"nodes": "3"})", 400, "must be an integer"},
      {"POST", "/scale", R"({"nodes": 0})", 400, "at least 1"},
      {"POST", "/scale", R"({"nodes": 2, "force": true})", 400, "unknown field"},
      {"POST", "/scale?nodes=2x", "", 400, "not an integer"},
      {"POST", "/release?node=2", "", 400, "unknown parameter node"},
      {"POST", "/drain", R"({"now": true})", 400, "takes no parameters"},
      {"GET", "/scale", "", 405, "use POST"},
      {"POST", "/status", "", 405, "use GET"},
      {"DELETE", "/metrics", "", 405, "use GET"},
      {"GET", "/nowhere", "", 404, "no such path: /nowhere"},
      {"POST", "/scale", std::string(kMaxBody + 1, ' '), 413, "over 4096 bytes"},
  };
  for (const auto& b : bad) {
    INFO(b.method << " " << b.path << " " << b.body.substr(0, 40));
    httplib::Request req;
    req.method = b.method;
    req.path = b.path;
    req.body = b.body;
    if (!b.body.empty()) req.set_header("Content-Type", "application/json");
    auto r = c.send(req);
    REQUIRE(r);
    CHECK(r->status == b.status);
    CHECK_THAT(r->body, Contains(b.why));
  }
  CHECK(control.calls == good_calls);  // none reached the job

  res = c.Post("/scale", R"({"nodes": 99})", "application/json");
  REQUIRE(res);
  CHECK(res->status == 409);
  CHECK_THAT(res->body, Contains("fixed"));
  res = c.Post("/scale", R"({"nodes": 98})", "application/json");
  REQUIRE(res);
  CHECK(res->status == 504);
}

TEST_CASE("a port in use is an error naming it", "[serve]") {
  HttpServer first({"127.0.0.1", 0, {}}, nullptr, nullptr);
  HttpServer second({"127.0.0.1", first.port(), {}}, nullptr, nullptr);
  CHECK_THROWS_AS(second.port(), elasticrun::NetworkError);
  CHECK_THROWS_AS(second.port(), elasticrun::NetworkError);  // asked again: the same answer
  second.stop();                                             // nothing listens: nothing to stop
  httplib::Client c("127.0.0.1", first.port());
  auto res = c.Get("/metrics");  // no metrics given: not served
  REQUIRE(res);
  CHECK(res->status == 404);
}

TEST_CASE("two clients that keep their connections open are answered at once", "[serve]") {
  // Each kept-alive connection holds one of the server's two workers, which
  // start at the first requests: the second client must not wait for the
  // first to hang up.
  AgentMetrics metrics("job", "h1", 1);
  HttpServer server({"127.0.0.1", 0, {}}, &metrics, nullptr);
  httplib::Client a("127.0.0.1", server.port());
  httplib::Client b("127.0.0.1", server.port());
  for (auto* c : {&a, &b}) {
    c->set_keep_alive(true);
    // Under httplib's 5 s keep-alive a second client left waiting for the
    // first one's worker would time out here.
    c->set_read_timeout(1, 0);
  }
  for (int round = 0; round < 3; ++round) {
    for (auto* c : {&a, &b}) {
      auto res = c->Get("/metrics");
      REQUIRE(res);
      CHECK(res->status == 200);
    }
  }
}

TEST_CASE("with the job secret, the control paths answer only signed requests, each once",
          "[serve][auth]") {
  const std::string secret = "the-job-secret-of-this-test";
  AgentMetrics metrics("job", "h1", 1);
  FakeControl control;
  HttpServer server({"127.0.0.1", 0, secret}, &metrics, &control);
  httplib::Client c("127.0.0.1", server.port());
  auto nonce = [&] {
    auto r = c.Get(elasticrun::util::kAuthNoncePath);
    REQUIRE(r);
    REQUIRE(r->status == 200);
    REQUIRE(r->body.size() == 64);
    return r->body;
  };
  auto signed_with = [&](const std::string& s, const std::string& method, const std::string& target,
                         const std::string& body) {
    httplib::Headers h = {
        {"Authorization", elasticrun::util::http_authorization(s, method, target, nonce(), body)}};
    return h;
  };

  // Unsigned: 401, a reason, the job untouched. /metrics stays open.
  auto res = c.Get("/status");
  REQUIRE(res);
  CHECK(res->status == 401);
  CHECK_THAT(res->body, Contains("asks for the job secret"));
  res = c.Post("/release", R"({"nodes": 1})", "application/json");
  REQUIRE(res);
  CHECK(res->status == 401);
  CHECK(control.calls == 0);
  res = c.Get("/metrics");
  REQUIRE(res);
  CHECK(res->status == 200);

  // Signed: served.
  const httplib::Headers good = signed_with(secret, "GET", "/status", "");
  res = c.Get("/status", good);
  REQUIRE(res);
  CHECK(res->status == 200);
  CHECK(control.calls == 1);
  const std::string body = R"({"nodes": 2})";
  res = c.Post("/scale", signed_with(secret, "POST", "/scale", body), body, "application/json");
  REQUIRE(res);
  CHECK(res->status == 200);
  CHECK(control.calls == 2);

  // The same signed request again: its nonce is spent.
  res = c.Get("/status", good);
  REQUIRE(res);
  CHECK(res->status == 401);
  CHECK_THAT(res->body, Contains("spent"));
  // Another secret, a changed body, a made-up nonce: refused.
  res = c.Get("/status", signed_with("another-secret-entirely", "GET", "/status", ""));
  REQUIRE(res);
  CHECK(res->status == 401);
  CHECK_THAT(res->body, Contains("wrong MAC"));
  res = c.Post("/scale", signed_with(secret, "POST", "/scale", R"({"nodes": 3})"),
               R"({"nodes": 9})", "application/json");
  REQUIRE(res);
  CHECK(res->status == 401);
  res = c.Get("/status",
              {{"Authorization", elasticrun::util::http_authorization(secret, "GET", "/status",
                                                                      std::string(64, 'a'), "")}});
  REQUIRE(res);
  CHECK(res->status == 401);
  CHECK(control.calls == 2);
}

TEST_CASE("nonces are spent once, expire, and the oldest go past the capacity", "[auth]") {
  elasticrun::util::NonceBook book(std::chrono::seconds(30), 2);
  const std::string a = book.issue(), b = book.issue();
  CHECK(a != b);
  CHECK(book.redeem(a));
  CHECK_FALSE(book.redeem(a));
  const std::string c = book.issue(), d = book.issue();  // b is forgotten
  CHECK_FALSE(book.redeem(b));
  CHECK(book.redeem(c));
  CHECK(book.redeem(d));
  elasticrun::util::NonceBook brief(std::chrono::seconds(0));
  const std::string e = brief.issue();
  CHECK_FALSE(brief.redeem(e));
}

TEST_CASE("a flood of nonce requests from one address forgets only that address's", "[auth]") {
  elasticrun::util::NonceBook book(std::chrono::seconds(30), 4096, 3);
  const std::string mine = book.issue("10.0.0.1");
  std::vector<std::string> flood;
  for (int i = 0; i < 10000; ++i) flood.push_back(book.issue("10.0.0.66"));
  CHECK(book.redeem(mine));  // untouched by the flood
  CHECK(elasticrun::util::is_auth_nonce(flood.back()));
  CHECK_FALSE(elasticrun::util::is_auth_nonce(std::string(64, 'A')));
  CHECK_FALSE(elasticrun::util::is_auth_nonce(flood.back() + "0"));
  for (size_t i = 0; i + 3 < flood.size(); ++i) REQUIRE_FALSE(book.redeem(flood[i]));
  for (size_t i = flood.size() - 3; i < flood.size(); ++i) CHECK(book.redeem(flood[i]));
  // Spent nonces free their address's room; many addresses still meet the
  // overall capacity, which forgets the oldest.
  elasticrun::util::NonceBook small(std::chrono::seconds(30), 4, 2);
  std::vector<std::string> many;
  for (int i = 0; i < 8; ++i) many.push_back(small.issue("10.0.1." + std::to_string(i)));
  for (int i = 0; i < 4; ++i) CHECK_FALSE(small.redeem(many[i]));
  for (int i = 4; i < 8; ++i) CHECK(small.redeem(many[i]));
  const std::string x = small.issue("p"), y = small.issue("p");
  CHECK(small.redeem(x));
  const std::string z = small.issue("p");  // x was spent: no need to forget y
  CHECK(small.redeem(y));
  CHECK(small.redeem(z));
}
