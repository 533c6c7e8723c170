#include "util/secret.hpp"

#include <cstdlib>

#include "elasticrun/errors.hpp"
#include "util/read_file.hpp"

namespace elasticrun::util {

std::string read_secret_file(const std::string& what, const std::string& path) {
  auto text = read_small_file(path, kMaxSecretSize);
  if (!text) {
    throw ConfigError(what + ": cannot read the secret file: " + text.status().message());
  }
  std::string s = std::move(text).value();
  if (!s.empty() && s.back() == '\n') s.pop_back();
  if (!s.empty() && s.back() == '\r') s.pop_back();
  if (s.size() < kMinSecretSize) {
    throw ConfigError(what + ": the secret file " + path + " holds " + std::to_string(s.size()) +
                      " bytes; a job secret needs at least " + std::to_string(kMinSecretSize) +
                      " (for instance: head -c 32 /dev/urandom | base64 > FILE)");
  }
  return s;
}

std::optional<std::string> job_secret(const std::optional<std::string>& flag_path,
                                      const std::string& flag) {
  if (flag_path) return read_secret_file(flag, *flag_path);
  const char* env = std::getenv(kSecretFileEnv);
  if (env && *env) return read_secret_file(kSecretFileEnv, env);
  return std::nullopt;
}

}  // namespace elasticrun::util
