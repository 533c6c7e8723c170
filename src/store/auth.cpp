#include "store/auth.hpp"

#include <exception>

#include "util/hmac.hpp"

namespace elasticrun::store {
namespace {

std::string proof(std::string_view role, std::string_view secret, std::string_view cn,
                  std::string_view sn) {
  std::string data;
  data.reserve(role.size() + cn.size() + sn.size());
  data.append(role).append(cn).append(sn);
  return util::hmac_sha256(secret, data);
}

// A request's first byte named as PyTorch 2.x numbers the types (a client
// that could authenticate speaks that dialect).
std::string type_name(uint8_t raw) {
  const std::string_view name = query_type_name(static_cast<QueryType>(raw));
  return name != "UNKNOWN" ? std::string(name) : "a request of type " + std::to_string(raw);
}

}  // namespace

std::string client_proof(std::string_view secret, std::string_view client_nonce,
                         std::string_view server_nonce) {
  return proof("elasticrun store client", secret, client_nonce, server_nonce);
}

std::string server_proof(std::string_view secret, std::string_view client_nonce,
                         std::string_view server_nonce) {
  return proof("elasticrun store server", secret, client_nonce, server_nonce);
}

AuthGate::Verdict AuthGate::admit(const Request& req, std::string& reply, std::string& why) {
  const size_t before = reply.size();
  try {
    return decide(req, reply, why);
  } catch (const std::exception& e) {
    reply.resize(before);
    why = std::string("the handshake failed on the server: ") + e.what();
    return Verdict::kRefused;
  }
}

AuthGate::Verdict AuthGate::screen(uint8_t first, std::string& reply, std::string& why) const {
  const auto hello = static_cast<uint8_t>(QueryType::kAuthHello);
  const auto proof = static_cast<uint8_t>(QueryType::kAuthProof);
  if (open()) return Verdict::kPass;
  if (first == (stage_ == Stage::kStart ? hello : proof)) return Verdict::kPass;
  if (stage_ == Stage::kChallenged) {
    why = type_name(first) + " where AUTH_PROOF was due";
  } else if (first == proof) {
    why = "AUTH_PROOF before AUTH_HELLO";
  } else {
    ReplyWriter(reply).u32(kRefusedWord);
    why = type_name(first) + " before authenticating: a client without the job's secret";
  }
  return Verdict::kRefused;
}

AuthGate::Verdict AuthGate::decide(const Request& req, std::string& reply, std::string& why) {
  if (!open()) {
    if (Verdict v = screen(static_cast<uint8_t>(req.type), reply, why); v == Verdict::kRefused) {
      return v;
    }
  }
  const bool hello = req.type == QueryType::kAuthHello;
  const bool proof_request = req.type == QueryType::kAuthProof;
  ReplyWriter out(reply);
  if (!secret_) {
    if (hello) {
      out.bytes("");  // no nonce: this store asks for no secret
      return Verdict::kAnswered;
    }
    if (proof_request) {
      why = "AUTH_PROOF to a store that has no secret";
      return Verdict::kRefused;
    }
    return Verdict::kPass;
  }
  switch (stage_) {
    case Stage::kStart:  // screen() let only AUTH_HELLO through
      if (req.values[0].size() != kAuthNonceSize) {
        why = "AUTH_HELLO with a nonce of " + std::to_string(req.values[0].size()) +
              " bytes, not " + std::to_string(kAuthNonceSize);
        return Verdict::kRefused;
      }
      client_nonce_ = req.values[0];
      server_nonce_ = util::random_bytes(kAuthNonceSize);
      out.bytes(server_nonce_);
      stage_ = Stage::kChallenged;
      return Verdict::kAnswered;
    case Stage::kChallenged: {  // screen() let only AUTH_PROOF through
      const std::string want = client_proof(*secret_, client_nonce_, server_nonce_);
      if (!util::equal_in_constant_time(req.values[0], want)) {
        out.bytes("");
        why = "a wrong proof of the job's secret (another secret, or a replayed handshake)";
        return Verdict::kRefused;
      }
      out.bytes(server_proof(*secret_, client_nonce_, server_nonce_));
      stage_ = Stage::kOpen;
      client_nonce_.clear();
      server_nonce_.clear();
      return Verdict::kAnswered;
    }
    case Stage::kOpen:
      if (hello || proof_request) {
        why = std::string(query_type_name(req.type)) + " after the handshake";
        return Verdict::kRefused;
      }
      return Verdict::kPass;
  }
  why = "unknown handshake stage";
  return Verdict::kRefused;
}

}  // namespace elasticrun::store
