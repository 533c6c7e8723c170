// A real etcd cluster for the unit tests: `etcd` from Debian's etcd-server
// (scripts/setup.sh installs it), one or three members on 127.0.0.1 with
// ports the kernel picked, every file in a temporary directory, each member
// SIGKILLed and reaped when the fixture goes. Members are tuned to elect a
// leader within a second of a loss (heartbeat 50 ms, election 500 ms).
// With `tls`, clients reach the members over https, with certificates of a
// CA made for the fixture by the openssl command.
//
// Every wait is bounded by kPatience; it turns a hang into a failure.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "elasticrun/store_client.hpp"
#include "etcd/etcd_backend.hpp"
#include "process_helpers.hpp"
#include "supervisor/spawn.hpp"
#include "temp_dir.hpp"

namespace elasticrun::test {

// A port on 127.0.0.1 nobody listens on now (bound and released: another
// process may take it before the caller does, a window tests accept).
inline uint16_t unused_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    throw std::runtime_error("no free port");
  }
  ::close(fd);
  return ntohs(a.sin_port);
}

class EtcdFixture {
 public:
  explicit EtcdFixture(int members = 1, bool tls = false) : tls_(tls) {
    if (tls_) make_certificates();
    std::string cluster;
    for (int i = 0; i < members; ++i) {
      Member m;
      m.name = "m" + std::to_string(i);
      m.client_port = unused_port();
      m.peer_port = unused_port();
      cluster += (i ? "," : "") + m.name + "=http://127.0.0.1:" + std::to_string(m.peer_port);
      members_.push_back(std::move(m));
    }
    for (auto& m : members_) {
      const std::string client =
          (tls_ ? "https://127.0.0.1:" : "http://127.0.0.1:") + std::to_string(m.client_port);
      const std::string peer = "http://127.0.0.1:" + std::to_string(m.peer_port);
      supervisor::SpawnSpec s;
      s.argv = {"etcd",        "--name",
                m.name,        "--data-dir",
                dir_ / m.name, "--listen-client-urls",
                client,        "--advertise-client-urls",
                client,        "--listen-peer-urls",
                peer,          "--initial-advertise-peer-urls",
                peer,          "--initial-cluster",
                cluster,       "--initial-cluster-state",
                "new",         "--heartbeat-interval",
                "50",          "--election-timeout",
                "500",         "--logger",
                "zap"};
      if (tls_) {
        s.argv.insert(s.argv.end(),
                      {"--cert-file", dir_ / "server.pem", "--key-file", dir_ / "server.key"});
      }
      s.env = {kPath};
      const int log = open_append(dir_ / (m.name + ".log"));
      s.stdout_fd = log;
      s.stderr_fd = log;
      auto pid = supervisor::spawn(s);
      ::close(log);
      if (!pid.is_ok()) {
        throw std::runtime_error("cannot start etcd (scripts/setup.sh installs etcd-server): " +
                                 pid.status().message());
      }
      m.child = std::make_unique<Child>(pid.value());
    }
    // Up once a client can read through every member.
    for (size_t i = 0; i < members_.size(); ++i) {
      StoreClientOptions o;
      o.connect_timeout = kChildPatience;
      o.timeout = kChildPatience;
      etcd::EtcdOptions e = options();
      e.endpoints = {{"127.0.0.1", members_[i].client_port}};
      (void)etcd::connect(e, o);
    }
  }

  // Every member, in order: what an agent is given.
  etcd::EtcdOptions options() const {
    etcd::EtcdOptions o;
    for (const auto& m : members_) o.endpoints.emplace_back("127.0.0.1", m.client_port);
    if (tls_) {
      o.tls = true;
      o.ca_file = dir_ / "ca.pem";
    }
    return o;
  }

  StoreClient client(std::string key_prefix = "/",
                     std::chrono::milliseconds timeout = kChildPatience) const {
    StoreClientOptions o;
    o.connect_timeout = kChildPatience;
    o.timeout = timeout;
    o.key_prefix = std::move(key_prefix);
    return etcd::connect(options(), o);
  }

  // SIGKILLs member i and reaps it.
  void kill(size_t i) { members_.at(i).child.reset(); }
  uint16_t client_port(size_t i) const { return members_.at(i).client_port; }

 private:
  // A CA, and a certificate it signed for 127.0.0.1.
  void make_certificates() {
    const std::string d = dir_.path().string();
    const std::string script =
        "cd '" + d +
        "' && "
        "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
        "-keyout ca.key -out ca.pem -days 1 -subj /CN=elasticrun-test-ca && "
        "openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
        "-keyout server.key -out server.csr -subj /CN=127.0.0.1 && "
        "printf 'subjectAltName=IP:127.0.0.1\\n' > ext && "
        "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial "
        "-out server.pem -days 1 -extfile ext";
    const int log = open_append(dir_ / "openssl.log");
    supervisor::SpawnSpec s = shell(script);
    s.stdout_fd = log;
    s.stderr_fd = log;
    auto pid = supervisor::spawn(s);
    ::close(log);
    if (!pid.is_ok()) throw std::runtime_error("openssl: " + pid.status().message());
    Child c(pid.value());
    if (exit_code(c.wait()) != 0) {
      throw std::runtime_error("openssl failed: " + slurp(dir_ / "openssl.log"));
    }
  }

  struct Member {
    std::string name;
    uint16_t client_port = 0;
    uint16_t peer_port = 0;
    std::unique_ptr<Child> child;
  };
  bool tls_;
  TempDir dir_{"elasticrun-etcd"};
  std::vector<Member> members_;
};

}  // namespace elasticrun::test
