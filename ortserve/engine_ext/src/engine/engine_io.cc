// What goes in and out of a session (engine.h): element types and their names, a model's TensorInfo, the feeds'
// validation, inputs as ORT values, outputs copied out, the finiteness check.
#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <utility>

#include "cuda_runtime.h"
#include "engine_internal.h"
#include "errors.h"

namespace ortserve {
namespace {

size_t ElementSize(ONNXTensorElementDataType type) {
  switch (type) {
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_BOOL:
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8:
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8:
      return 1;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT16:
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT16:
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16:
      return 2;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32:
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT32:
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT:
      return 4;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64:
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT64:
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_DOUBLE:
      return 8;
    default:
      return 0;
  }
}

// How error messages name element types the engine cannot exchange with numpy.
std::string UnsupportedTypeLabel(ONNXTensorElementDataType type) {
  switch (type) {
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_STRING:
      return "string";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16:
      return "bfloat16";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_COMPLEX64:
      return "complex64";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_COMPLEX128:
      return "complex128";
    default:
      return "ONNX element type " + std::to_string(static_cast<int>(type));
  }
}

std::string ShapeText(const std::vector<int64_t>& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) text += ", ";
    text += std::to_string(shape[i]);
  }
  return text + "]";
}

// Counts NaN and +-Inf in a float16 / float32 / float64 buffer; 0 for other types.
size_t CountNonFinite(const OutputTensor& output, ONNXTensorElementDataType type) {
  size_t count = 0;
  if (type == ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT) {
    const float* values = reinterpret_cast<const float*>(output.data.get());
    for (size_t i = 0, n = output.nbytes / sizeof(float); i < n; ++i) count += !std::isfinite(values[i]);
  } else if (type == ONNX_TENSOR_ELEMENT_DATA_TYPE_DOUBLE) {
    const double* values = reinterpret_cast<const double*>(output.data.get());
    for (size_t i = 0, n = output.nbytes / sizeof(double); i < n; ++i) count += !std::isfinite(values[i]);
  } else if (type == ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16) {
    uint16_t bits = 0;
    for (size_t i = 0; i + 1 < output.nbytes; i += 2) {
      std::memcpy(&bits, output.data.get() + i, 2);
      count += (bits & 0x7c00u) == 0x7c00u;  // exponent all ones: Inf or NaN
    }
  }
  return count;
}

}  // namespace

TensorInfo ReadTensorInfo(const std::string& role, std::string name, const Ort::TypeInfo& type_info) {
  if (type_info.GetONNXType() != ONNX_TYPE_TENSOR) {
    throw ModelLoadError(role + " '" + name + "' is not a tensor (ONNX type " +
                         std::to_string(static_cast<int>(type_info.GetONNXType())) +
                         "); the engine exchanges tensors only");
  }
  auto tensor = type_info.GetTensorTypeAndShapeInfo();
  TensorInfo info;
  info.name = std::move(name);
  info.element_type = tensor.GetElementType();
  info.dtype = DtypeName(info.element_type);
  if (info.dtype.empty()) {
    throw ModelLoadError(role + " '" + info.name + "' has element type " +
                         UnsupportedTypeLabel(info.element_type) + ", which the engine does not support");
  }
  info.shape = tensor.GetShape();
  std::vector<const char*> symbolic(info.shape.size(), nullptr);
  if (!symbolic.empty()) tensor.GetSymbolicDimensions(symbolic.data(), symbolic.size());
  for (size_t i = 0; i < info.shape.size(); ++i) {
    // A named dimension is dynamic whatever value the model stored for it.
    const bool named = symbolic[i] != nullptr && symbolic[i][0] != '\0';
    info.dim_names.push_back(named ? symbolic[i] : "");
    if (named || info.shape[i] < 0) info.shape[i] = -1;
  }
  return info;
}

std::string DtypeName(ONNXTensorElementDataType type) {
  switch (type) {
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_BOOL: return "bool";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8: return "int8";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8: return "uint8";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT16: return "int16";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT16: return "uint16";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32: return "int32";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT32: return "uint32";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64: return "int64";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT64: return "uint64";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16: return "float16";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT: return "float32";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_DOUBLE: return "float64";
    default: return "";
  }
}

std::string TensorInfo::Describe() const {
  std::string text = dtype + " [";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) text += ", ";
    text += !dim_names[i].empty() ? dim_names[i] : shape[i] < 0 ? "?" : std::to_string(shape[i]);
  }
  return text + "]";
}

std::vector<const InputView*> Engine::Validate(const std::vector<InputView>& feeds) const {
  std::map<std::string, const InputView*> by_name;
  for (const InputView& feed : feeds) {
    bool known = false;
    for (const TensorInfo& info : inputs_) known = known || info.name == feed.name;
    if (!known) {
      std::string expected;
      for (const TensorInfo& info : inputs_) {
        expected += (expected.empty() ? "" : ", ") + info.name + " (" + info.Describe() + ")";
      }
      throw InputError("unexpected input '" + feed.name + "'; the model's inputs are: " + expected);
    }
    by_name[feed.name] = &feed;
  }

  std::vector<const InputView*> ordered;
  std::string missing;
  for (const TensorInfo& info : inputs_) {
    auto found = by_name.find(info.name);
    if (found == by_name.end()) {
      missing += (missing.empty() ? "'" : ", '") + info.name + "' (" + info.Describe() + ")";
    } else {
      ordered.push_back(found->second);
    }
  }
  if (!missing.empty()) {
    const bool several = ordered.size() + 1 < inputs_.size();
    throw InputError((several ? "missing inputs " : "missing input ") + missing);
  }

  // First input that fixed each symbolic dimension ("seq"), so that every input agrees on it.
  std::map<std::string, std::pair<const InputView*, int64_t>> symbolic_sizes;
  for (size_t i = 0; i < inputs_.size(); ++i) {
    const TensorInfo& info = inputs_[i];
    const InputView& feed = *ordered[i];
    if (feed.dtype != info.dtype) {
      throw InputError("input '" + info.name + "' has dtype " + feed.dtype + ", expected " + info.dtype);
    }
    if (feed.shape.size() != info.shape.size()) {
      throw InputError("input '" + info.name + "' has shape " + ShapeText(feed.shape) + " (rank " +
                       std::to_string(feed.shape.size()) + "), expected rank " +
                       std::to_string(info.shape.size()) + ": " + info.Describe());
    }
    size_t elements = 1;
    for (size_t d = 0; d < info.shape.size(); ++d) {
      elements *= static_cast<size_t>(feed.shape[d]);
      if (info.shape[d] >= 0 && feed.shape[d] != info.shape[d]) {
        throw InputError("input '" + info.name + "' has shape " + ShapeText(feed.shape) + ", expected " +
                         info.Describe() + ": dimension " + std::to_string(d) + " must be " +
                         std::to_string(info.shape[d]));
      }
      if (info.dim_names[d].empty()) continue;
      auto [seen, inserted] = symbolic_sizes.try_emplace(info.dim_names[d], &feed, feed.shape[d]);
      if (!inserted && seen->second.second != feed.shape[d]) {
        throw InputError("input '" + info.name + "' has shape " + ShapeText(feed.shape) + " but input '" +
                         seen->second.first->name + "' has " + ShapeText(seen->second.first->shape) +
                         ": dimension '" + info.dim_names[d] + "' must be the same size in both");
      }
    }
    if (feed.nbytes != elements * ElementSize(info.element_type) || (feed.data == nullptr && feed.nbytes > 0)) {
      throw InputError("input '" + info.name + "' holds " + std::to_string(feed.nbytes) +
                       " bytes, which does not match its shape " + ShapeText(feed.shape) + " and dtype " +
                       feed.dtype);
    }
  }
  return ordered;
}

std::vector<Ort::Value> Engine::CpuValues(const std::vector<const InputView*>& ordered) const {
  std::vector<Ort::Value> values;
  values.reserve(ordered.size());
  for (size_t i = 0; i < ordered.size(); ++i) {
    const InputView& feed = *ordered[i];
    // ORT reads but never writes input buffers; its API just lacks a const overload.
    values.push_back(Ort::Value::CreateTensor(cpu_memory_, const_cast<void*>(feed.data), feed.nbytes,
                                              feed.shape.data(), feed.shape.size(), inputs_[i].element_type));
  }
  return values;
}

Engine::Outputs Engine::CopyOut(std::vector<Ort::Value>& results, const CudaRuntime* from_device) const {
  Outputs outputs;
  for (size_t i = 0; i < results.size(); ++i) {
    if (!results[i].IsTensor()) throw EngineError("output '" + outputs_[i].name + "' is not a tensor");
    auto tensor = results[i].GetTensorTypeAndShapeInfo();
    const ONNXTensorElementDataType type = tensor.GetElementType();
    OutputTensor output;
    output.name = outputs_[i].name;
    output.dtype = DtypeName(type);
    if (output.dtype.empty()) {
      throw EngineError("output '" + output.name + "' has element type " + UnsupportedTypeLabel(type) +
                        ", which the engine does not support");
    }
    output.shape = tensor.GetShape();
    output.nbytes = tensor.GetElementCount() * ElementSize(type);
    output.data = std::make_unique<uint8_t[]>(output.nbytes > 0 ? output.nbytes : 1);
    if (output.nbytes > 0 && from_device != nullptr) {
      from_device->Check(from_device->memcpy(output.data.get(), results[i].GetTensorRawData(), output.nbytes,
                                             CudaRuntime::kDeviceToHost),
                         "copying output '" + output.name + "' from the GPU");
    } else if (output.nbytes > 0) {
      std::memcpy(output.data.get(), results[i].GetTensorRawData(), output.nbytes);
    }
    outputs.push_back(std::move(output));
  }
  return outputs;
}

void Engine::CheckFinite(const Outputs& outputs) const {
  std::string problems;
  for (const OutputTensor& output : outputs) {
    ONNXTensorElementDataType type = ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
    for (const TensorInfo& info : outputs_) {
      if (info.name == output.name) type = info.element_type;
    }
    const size_t bad = CountNonFinite(output, type);
    if (bad == 0) continue;
    const size_t total = output.nbytes / ElementSize(type);
    problems += (problems.empty() ? "" : "; ") + std::string("output '") + output.name + "' has " +
                std::to_string(bad) + " non-finite value" + (bad == 1 ? "" : "s") + " (NaN/Inf) of " +
                std::to_string(total);
  }
  if (!problems.empty()) {
    throw NonFiniteOutputError(problems + " (model '" + path_ + "'; check_finite=False allows them)");
  }
}

}  // namespace ortserve
