#include "openvino_model.h"

#include <sched.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <sstream>

#include "errors.h"
#include "openvino_api.h"

namespace ortserve {
namespace {

struct OvType {
  ov_element_type_e type;
  size_t size;
};

// OpenVINO's element type for a numpy dtype the engine exchanges.
OvType ToOpenVino(const std::string& dtype) {
  if (dtype == "int64") return {I64, 8};
  if (dtype == "int32") return {I32, 4};
  if (dtype == "float32") return {F32, 4};
  if (dtype == "float16") return {F16, 2};
  if (dtype == "float64") return {F64, 8};
  if (dtype == "bool") return {BOOLEAN, 1};
  if (dtype == "int8") return {I8, 1};
  if (dtype == "uint8") return {U8, 1};
  throw ModelLoadError("the bf16 precision cannot exchange " + dtype + " tensors with OpenVINO");
}

// The OpenVINO port index of each of `wanted`'s names among the read model's inputs or outputs (the compiled model
// keeps their order; its ports may answer another of a tensor's names).
template <typename CountFn, typename PortFn>
std::vector<size_t> PortIndices(const std::vector<TensorInfo>& wanted, const ov_model_t* compiled,
                                CountFn count_fn, PortFn port_fn, const char* role) {
  const OpenVinoApi& api = OpenVino();
  size_t count = 0;
  CheckOpenVino(count_fn(compiled, &count), std::string("counting the model's ") + role + "s");
  std::vector<std::string> names;
  for (size_t i = 0; i < count; ++i) {
    ov_output_const_port_t* port = nullptr;
    CheckOpenVino(port_fn(compiled, i, &port), std::string("reading ") + role + " " + std::to_string(i));
    char* name = nullptr;
    const ov_status_e status = api.port_get_any_name(port, &name);
    api.output_const_port_free(port);
    CheckOpenVino(status, std::string("naming ") + role + " " + std::to_string(i));
    names.emplace_back(name);
    api.free(name);
  }
  std::vector<size_t> indices;
  for (const TensorInfo& info : wanted) {
    size_t found = count;
    for (size_t i = 0; i < count; ++i) {
      if (names[i] == info.name) found = i;
    }
    if (found == count) {
      std::string seen;
      for (const std::string& name : names) seen += (seen.empty() ? "" : ", ") + name;
      throw ModelLoadError(std::string("OpenVINO's reading of the model has no ") + role + " '" + info.name +
                           "' (it has: " + seen + ")");
    }
    indices.push_back(found);
  }
  return indices;
}

std::string CompiledProperty(const ov_compiled_model_t* compiled, const char* key) {
  const OpenVinoApi& api = OpenVino();
  char* value = nullptr;
  CheckOpenVino(api.compiled_model_get_property(compiled, key, &value), std::string("reading ") + key);
  std::string text = value != nullptr ? value : "";
  api.free(value);
  return text;
}

// The cores this process may run on (its affinity mask, as a container's CPU set narrows it).
int UsableCores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 1;
  return std::max(1, CPU_COUNT(&set));
}

}  // namespace

int OpenVinoStreams(int threads, int cores) { return threads > 0 ? std::max(1, cores / threads) : 1; }

std::string Bf16Refusal(const std::string& capabilities, const std::string& compiled) {
  std::istringstream words(capabilities);
  bool has_bf16 = false;
  for (std::string word; words >> word;) has_bf16 = has_bf16 || word == "BF16";
  if (!has_bf16) {
    return "this CPU has no bf16 arithmetic (OpenVINO reports " +
           (capabilities.empty() ? std::string("no capabilities") : capabilities) +
           "; bf16 needs AVX-512 BF16 or AMX: AMD Zen 4 or Intel Sapphire Rapids and later): serve the fp32 or int8 "
           "version of this model here";
  }
  if (compiled != "bf16") {
    return "OpenVINO compiled the model at " + (compiled.empty() ? std::string("an unknown precision") : compiled) +
           ", not bf16, although the CPU reports BF16: serve the fp32 version";
  }
  return "";
}

OpenVinoModel::OpenVinoModel(const std::string& path, const std::vector<TensorInfo>& inputs,
                             const std::vector<TensorInfo>& outputs, int threads)
    : path_(path), inputs_(inputs), outputs_(outputs) {
  const OpenVinoApi& api = OpenVino();
  ov_core_t* core = OpenVinoCore();
  const std::string capabilities = OpenVinoCpuCapabilities();
  if (std::string reason = Bf16Refusal(capabilities, "bf16"); !reason.empty()) throw ModelLoadError(reason);
  for (const TensorInfo& info : inputs_) ToOpenVino(info.dtype);
  for (const TensorInfo& info : outputs_) ToOpenVino(info.dtype);

  ov_model_t* model = nullptr;
  CheckOpenVino(api.core_read_model(core, path_.c_str(), nullptr, &model), "OpenVINO could not read the model");
  try {
    input_ports_ = PortIndices(inputs_, model, api.model_inputs_size, api.model_const_input_by_index, "input");
    output_ports_ = PortIndices(outputs_, model, api.model_outputs_size, api.model_const_output_by_index, "output");
  } catch (...) {
    api.model_free(model);
    throw;
  }
  const int streams = OpenVinoStreams(threads, UsableCores());
  const std::string thread_count = std::to_string(threads * streams), stream_count = std::to_string(streams);
  // Explicit, not OpenVINO's defaults: bf16 by request (never picked silently), no pinning (the front end's threads
  // share these cores), the latency hint (the batcher forms the batches), `threads` threads per run, and as many
  // streams as runs of that width fit the cores: an OpenVINO stream runs one request at a time, so with one stream
  // the batcher's concurrent runs on the one-thread session queued behind each other on one core (bf16 served at
  // 0.85-0.94x FP32), where ONNX Runtime runs them side by side.
  ov_status_e status =
      threads > 0 ? api.core_compile_model(core, model, "CPU", 10, &compiled_, "INFERENCE_PRECISION_HINT", "bf16",
                                           "PERFORMANCE_HINT", "LATENCY", "ENABLE_CPU_PINNING", "NO",
                                           "INFERENCE_NUM_THREADS", thread_count.c_str(), "NUM_STREAMS",
                                           stream_count.c_str())
                  : api.core_compile_model(core, model, "CPU", 6, &compiled_, "INFERENCE_PRECISION_HINT", "bf16",
                                           "PERFORMANCE_HINT", "LATENCY", "ENABLE_CPU_PINNING", "NO");
  api.model_free(model);
  CheckOpenVino(status, "OpenVINO could not compile the model for the CPU");
  try {
    const std::string compiled_precision = CompiledProperty(compiled_, "INFERENCE_PRECISION_HINT");
    if (std::string reason = Bf16Refusal(capabilities, compiled_precision); !reason.empty()) {
      throw ModelLoadError(reason);
    }
    runtime_ = "openvino " + OpenVinoVersion() + " " + compiled_precision;
  } catch (...) {
    api.compiled_model_free(compiled_);
    throw;
  }
}

OpenVinoModel::~OpenVinoModel() {
  const OpenVinoApi& api = OpenVino();
  for (ov_infer_request* request : idle_) api.infer_request_free(request);
  api.compiled_model_free(compiled_);
}

ov_infer_request* OpenVinoModel::Acquire() const {
  {
    std::lock_guard<std::mutex> lock(idle_mutex_);
    if (!idle_.empty()) {
      ov_infer_request* request = idle_.back();
      idle_.pop_back();
      return request;
    }
  }
  ov_infer_request_t* request = nullptr;
  const ov_status_e status = OpenVino().compiled_model_create_infer_request(compiled_, &request);
  if (status != ov_status_e::OK) {
    throw EngineError("model '" + path_ + "': OpenVINO could not create an infer request (status " +
                      std::to_string(static_cast<int>(status)) + ")");
  }
  return request;
}

void OpenVinoModel::Release(ov_infer_request* request) const {
  std::lock_guard<std::mutex> lock(idle_mutex_);
  idle_.push_back(request);
}

std::vector<OutputTensor> OpenVinoModel::Run(const std::vector<const InputView*>& ordered) const {
  const OpenVinoApi& api = OpenVino();
  auto fail = [&](ov_status_e status, const std::string& doing) {
    if (status == ov_status_e::OK) return;
    const char* message = api.get_last_err_msg();
    throw EngineError("inference failed for model '" + path_ + "' (OpenVINO, " + doing + "): status " +
                      std::to_string(static_cast<int>(status)) +
                      (message != nullptr && message[0] != '\0' ? std::string(": ") + message : std::string()));
  };
  // Returned to the pool however the run ends: a request is reusable after a failed infer.
  std::unique_ptr<ov_infer_request, std::function<void(ov_infer_request*)>> request(
      Acquire(), [this](ov_infer_request* r) { Release(r); });
  std::vector<std::unique_ptr<ov_tensor_t, void (*)(ov_tensor_t*)>> held;
  for (size_t i = 0; i < ordered.size(); ++i) {
    const InputView& feed = *ordered[i];
    ov_shape_t shape{};
    fail(api.shape_create(static_cast<int64_t>(feed.shape.size()), feed.shape.data(), &shape), "input shape");
    ov_tensor_t* tensor = nullptr;
    // OpenVINO reads but never writes input tensors made from host memory; its API lacks a const overload.
    const ov_status_e status =
        api.tensor_create_from_host_ptr(ToOpenVino(feed.dtype).type, shape, const_cast<void*>(feed.data), &tensor);
    api.shape_free(&shape);
    fail(status, "input '" + feed.name + "'");
    held.emplace_back(tensor, api.tensor_free);
    fail(api.infer_request_set_input_tensor_by_index(request.get(), input_ports_[i], tensor),
         "setting input '" + feed.name + "'");
  }
  fail(api.infer_request_infer(request.get()), "infer");
  std::vector<OutputTensor> outputs;
  for (size_t i = 0; i < outputs_.size(); ++i) {
    ov_tensor_t* tensor = nullptr;
    fail(api.infer_request_get_output_tensor_by_index(request.get(), output_ports_[i], &tensor),
         "output '" + outputs_[i].name + "'");
    std::unique_ptr<ov_tensor_t, void (*)(ov_tensor_t*)> owned(tensor, api.tensor_free);
    ov_shape_t shape{};
    fail(api.tensor_get_shape(tensor, &shape), "output shape");
    OutputTensor output;
    output.name = outputs_[i].name;
    output.dtype = outputs_[i].dtype;
    output.shape.assign(shape.dims, shape.dims + shape.rank);
    api.shape_free(&shape);
    ov_element_type_e type{};
    fail(api.tensor_get_element_type(tensor, &type), "output type");
    const OvType expected = ToOpenVino(output.dtype);
    if (type != expected.type) {
      throw EngineError("model '" + path_ + "': OpenVINO returned output '" + output.name +
                        "' as element type " + std::to_string(static_cast<int>(type)) + ", expected " + output.dtype);
    }
    size_t elements = 1;
    for (int64_t dim : output.shape) elements *= static_cast<size_t>(dim);
    output.nbytes = elements * expected.size;
    output.data = std::make_unique<uint8_t[]>(output.nbytes > 0 ? output.nbytes : 1);
    void* data = nullptr;
    fail(api.tensor_data(tensor, &data), "output data");
    if (output.nbytes > 0) std::memcpy(output.data.get(), data, output.nbytes);
    outputs.push_back(std::move(output));
  }
  return outputs;
}

}  // namespace ortserve
