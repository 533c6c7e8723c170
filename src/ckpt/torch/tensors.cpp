// Kept to the few ATen headers it needs: a libtorch translation unit costs
// minutes to compile.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>

#include <array>
#include <utility>

#include "elasticrun/checkpoint_torch.hpp"
#include "elasticrun/errors.hpp"

namespace elasticrun::ckpt {
namespace {

// Names as Python spells torch dtypes, so a checkpoint reads the same from
// both sides. Anything else is refused rather than guessed at.
constexpr std::array<std::pair<c10::ScalarType, const char*>, 12> kDtypes{{
    {c10::ScalarType::Float, "float32"},
    {c10::ScalarType::Double, "float64"},
    {c10::ScalarType::Half, "float16"},
    {c10::ScalarType::BFloat16, "bfloat16"},
    {c10::ScalarType::Long, "int64"},
    {c10::ScalarType::Int, "int32"},
    {c10::ScalarType::Short, "int16"},
    {c10::ScalarType::Char, "int8"},
    {c10::ScalarType::Byte, "uint8"},
    {c10::ScalarType::Bool, "bool"},
    {c10::ScalarType::ComplexFloat, "complex64"},
    {c10::ScalarType::ComplexDouble, "complex128"},
}};

const char* dtype_name(c10::ScalarType type, const std::string& tensor) {
  for (const auto& [t, name] : kDtypes) {
    if (t == type) return name;
  }
  throw ConfigError("checkpoint: tensor '" + tensor + "' has dtype " + c10::toString(type) +
                    ", which the format does not store");
}

c10::ScalarType dtype_of(const TensorInfo& info) {
  for (const auto& [t, name] : kDtypes) {
    if (info.dtype == name) return t;
  }
  throw Error("checkpoint: tensor '" + info.name + "' has dtype '" + info.dtype +
              "', which this build cannot make a tensor of");
}

}  // namespace

TensorShard sharded(std::string name, at::Tensor local, std::int64_t global_rows,
                    std::int64_t row_begin) {
  return {std::move(name), std::move(local), global_rows, row_begin, false};
}

TensorShard replicated(std::string name, at::Tensor full) {
  const std::int64_t rows = full.dim() == 0 ? 1 : full.size(0);
  return {std::move(name), std::move(full), rows, 0, true};
}

std::filesystem::path save(Checkpointer& checkpointer, std::int64_t step,
                           const std::vector<TensorShard>& shards, std::string_view extra_json) {
  std::vector<at::Tensor> held;  // the contiguous CPU copies the views point into
  std::vector<ShardView> views;
  held.reserve(shards.size());
  for (const auto& s : shards) {
    if (!s.local.defined()) throw ConfigError("checkpoint: tensor '" + s.name + "' is undefined");
    if (s.local.dim() == 0 && !s.replicated) {
      throw ConfigError("checkpoint: scalar '" + s.name + "' must be saved as replicated");
    }
    const at::Tensor& t = held.emplace_back(s.local.cpu().contiguous());
    ShardView v;
    v.info.name = s.name;
    v.info.dtype = dtype_name(t.scalar_type(), s.name);
    v.info.element_size = t.element_size();
    v.info.shape = t.sizes().vec();
    if (!v.info.shape.empty()) v.info.shape[0] = s.global_rows;
    v.info.replicated = s.replicated;
    v.row_begin = s.row_begin;
    v.row_end = s.row_begin + (t.dim() == 0 ? 1 : t.size(0));
    v.bytes = {static_cast<const std::byte*>(t.data_ptr()), t.nbytes()};
    views.push_back(std::move(v));
  }
  return checkpointer.save(step, views, extra_json);
}

at::Tensor load_rows(const Reader& reader, std::string_view name, std::int64_t begin,
                     std::int64_t end) {
  const TensorInfo& info = reader.tensor(name);
  std::vector<std::int64_t> shape = info.shape;
  if (!shape.empty()) shape[0] = end - begin;
  at::Tensor out = at::empty(shape, at::TensorOptions().dtype(dtype_of(info)));
  reader.read_rows(name, begin, end, {static_cast<std::byte*>(out.data_ptr()), out.nbytes()});
  return out;
}

at::Tensor load(const Reader& reader, std::string_view name) {
  return load_rows(reader, name, 0, reader.tensor(name).rows());
}

}  // namespace elasticrun::ckpt
