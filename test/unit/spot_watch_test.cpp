// What an instance-metadata answer says (agent/spot_watch), and the URLs
// the watch refuses. The polling itself runs against a fake endpoint in
// test/integration/test_spot_notice.py.
#include <catch2/catch.hpp>

#include "agent/spot_watch.hpp"
#include "cli/parse.hpp"
#include "elasticrun/errors.hpp"

using namespace elasticrun::agent;
using Catch::Matchers::Contains;

TEST_CASE("a notice is a 200 with a body that is not FALSE", "[spot]") {
  CHECK(read_spot_answer(404, "<html>Not Found</html>") == SpotAnswer::kNone);  // AWS, normally
  CHECK(read_spot_answer(200, R"({"action": "terminate", "time": "2026-12-02T22:00:00Z"})") ==
        SpotAnswer::kNotice);
  CHECK(read_spot_answer(200, "FALSE") == SpotAnswer::kNone);  // GCP's preempted, normally
  CHECK(read_spot_answer(200, "TRUE\n") == SpotAnswer::kNotice);
  CHECK(read_spot_answer(200, " \n") == SpotAnswer::kNone);
  CHECK(read_spot_answer(0, "") == SpotAnswer::kUnclear);  // no answer
  CHECK(read_spot_answer(503, "") == SpotAnswer::kUnclear);
  CHECK(read_spot_answer(401, "") == SpotAnswer::kUnclear);
}

TEST_CASE("the watch takes http:// URLs only", "[spot]") {
  const auto parse = [](const std::string& url) {
    return elasticrun::cli::parse_launch_args({"--spot-notice-url", url, "train.py"}, {}, 4, 0);
  };
  CHECK(parse("http://169.254.169.254/latest/meta-data/spot/instance-action").spot_notice_url ==
        "http://169.254.169.254/latest/meta-data/spot/instance-action");
  CHECK_THROWS_WITH(parse("https://x/y"), Contains("--spot-notice-url") && Contains("http://"));
  CHECK_THROWS_WITH(parse("169.254.169.254"), Contains("not an http:// URL"));
  CHECK_THROWS_WITH(
      elasticrun::cli::parse_launch_args({"--spot-notice-interval", "0", "train.py"}, {}, 4, 0),
      Contains("below 0.05 s"));
  CHECK_THROWS_AS(SpotWatch(SpotNoticeOptions{"http://", std::chrono::seconds(1)}),
                  elasticrun::ConfigError);
}
