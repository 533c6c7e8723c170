// Result type for low-level code: a value, or an errno with context.
//
// util/ never throws for expected failures (refused connections, timeouts,
// resets): it returns a Status that names the operation and the peer, and
// the orchestration layer decides whether that is worth an exception.
#pragma once

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>
#include <variant>

namespace elasticrun::util {

class Status {
 public:
  Status() = default;  // success
  Status(int err, std::string context) : err_(err), context_(std::move(context)) {}

  static Status ok() { return {}; }
  bool is_ok() const { return err_ == 0; }
  explicit operator bool() const { return is_ok(); }

  // errno value; ETIMEDOUT for deadlines, ECONNRESET for a peer that closed
  // mid-message, EPROTO for a peer that broke the wire format.
  int err() const { return err_; }
  const std::string& context() const { return context_; }
  std::string message() const { return context_ + ": " + std::strerror(err_); }

 private:
  int err_ = 0;
  std::string context_;
};

template <typename T>
class Result {
 public:
  Result(T value) : v_(std::move(value)) {}       // NOLINT: implicit on purpose
  Result(Status error) : v_(std::move(error)) {}  // NOLINT

  bool is_ok() const { return std::holds_alternative<T>(v_); }
  explicit operator bool() const { return is_ok(); }
  T& value() & { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  const Status& status() const { return std::get<Status>(v_); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace elasticrun::util
