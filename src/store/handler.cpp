#include "store/handler.hpp"

#include "util/strings.hpp"

namespace elasticrun::store {
namespace {

HandleResult fail(std::string why) {
  return HandleResult{false, std::move(why)};
}

}  // namespace

HandleResult Handler::handle(ClientId client, Request& req, std::string& reply, Wakeups& woken) {
  ReplyWriter out(reply);
  switch (req.type) {
    case QueryType::kValidate:
      if (req.word != kValidationMagic) return fail("VALIDATE with a wrong magic number");
      return {};
    case QueryType::kPing:
      out.u32(req.word);
      return {};
    case QueryType::kSet:
      state_.set(req.keys[0], std::move(req.values[0]), woken);
      return {};
    case QueryType::kCompareSet:
      out.bytes(state_.compare_set(req.keys[0], req.values[0], std::move(req.values[1]), woken));
      return {};
    case QueryType::kGet: {
      const std::string* v = state_.get(req.keys[0]);
      out.bytes(v ? *v : std::string_view());
      return {};
    }
    case QueryType::kAdd: {
      auto sum = state_.add(req.keys[0], req.number, woken);
      if (!sum)
        return fail("ADD on key " + util::quote(req.keys[0]) +
                    " whose value is not an integer, or overflow");
      out.i64(*sum);
      return {};
    }
    case QueryType::kCheck:
      out.u8(static_cast<uint8_t>(state_.all_ready(req.keys) ? CheckResponse::kReady
                                                             : CheckResponse::kNotReady));
      return {};
    case QueryType::kWait:
      if (state_.wait(client, req.keys)) out.u8(static_cast<uint8_t>(WaitResponse::kStopWaiting));
      return {};
    case QueryType::kGetNumKeys:
      out.i64(state_.num_keys());
      return {};
    case QueryType::kDeleteKey:
      out.i64(state_.erase(req.keys[0]) ? 1 : 0);
      return {};
    case QueryType::kAppend: {
      const std::string* cur = state_.get(req.keys[0]);
      if (cur && cur->size() + req.values[0].size() > limits_.max_value_size) {
        return fail("APPEND would grow key " + util::quote(req.keys[0]) +
                    " past the value limit of " + std::to_string(limits_.max_value_size) +
                    " bytes");
      }
      state_.append(req.keys[0], req.values[0], woken);
      return {};
    }
    case QueryType::kMultiGet:
      for (const auto& key : req.keys) {
        const std::string* v = state_.get(key);
        out.bytes(v ? *v : std::string_view());
      }
      return {};
    case QueryType::kMultiSet:
      for (size_t i = 0; i < req.keys.size(); ++i) {
        state_.set(req.keys[i], std::move(req.values[i]), woken);
      }
      return {};
    case QueryType::kCancelWait:
      // Always answered, even when the wait already completed: the client
      // reads a late STOP_WAITING first, then this.
      state_.cancel_wait(client);
      out.u8(static_cast<uint8_t>(WaitResponse::kWaitCanceled));
      return {};
    case QueryType::kQueuePush:
      state_.queue_push(req.keys[0], std::move(req.values[0]), woken);
      return {};
    case QueryType::kQueuePop: {
      auto [len, head] = state_.queue_pop(req.keys[0]);
      out.i64(len);
      if (len > 0) out.bytes(head);
      return {};
    }
    case QueryType::kQueueLen:
      out.i64(state_.queue_len(req.keys[0]));
      return {};
    case QueryType::kListKeys: {
      auto keys = state_.list_keys();
      out.i64(static_cast<int64_t>(keys.size()));
      for (const auto& k : keys) out.bytes(k);
      return {};
    }
    case QueryType::kBarrier: {
      auto done = state_.barrier(client, req.keys[0], req.number, woken);
      if (!done)
        return fail("BARRIER on key " + util::quote(req.keys[0]) +
                    " whose value is not an integer");
      if (*done) out.u8(static_cast<uint8_t>(WaitResponse::kStopWaiting));
      return {};
    }
    case QueryType::kAuthHello:
    case QueryType::kAuthProof:
      return fail(std::string(query_type_name(req.type)) + " past the gate");  // AuthGate's
    case QueryType::kReplicate:
      return fail("REPLICATE past the server");  // the server's own
  }
  return fail("unhandled query type");
}

}  // namespace elasticrun::store
