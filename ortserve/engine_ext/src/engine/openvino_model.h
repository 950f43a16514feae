// A model compiled by OpenVINO for the CPU at bf16: how an Engine runs a bf16 version (engine.h). The graph is the
// version's FP32 ONNX file; OpenVINO computes it in bf16 where the CPU has AVX-512 BF16 or AMX, which this class
// demands and verifies on the compiled model, so a bf16 version is never served at FP32 speed in silence.
#pragma once

#include <cstddef>
#include <mutex>
#include <string>
#include <vector>

#include "engine.h"

struct ov_compiled_model;
struct ov_infer_request;

namespace ortserve {

// Why a CPU cannot serve bf16, or "" when it can: `capabilities` is OpenVINO's OPTIMIZATION_CAPABILITIES for the
// CPU ("FP32 BF16 INT8 ..."), `compiled` the INFERENCE_PRECISION_HINT the compiled model reports ("bf16", "f32").
std::string Bf16Refusal(const std::string& capabilities, const std::string& compiled);

// How many OpenVINO streams a model of `threads` threads per run gets on `cores` cores: as many runs of that width
// as fit side by side (a stream runs one request at a time), at least one; one where OpenVINO picks the threads (0).
int OpenVinoStreams(int threads, int cores);

class OpenVinoModel {
 public:
  // Reads and compiles the ONNX model at `path` for the CPU with bf16 inference precision, `threads` threads per
  // run (0: OpenVINO's choice) in OpenVinoStreams streams, no pinning and the latency hint. `inputs` / `outputs`: the model's tensors as
  // ONNX Runtime reads them, in the order Run takes and returns them. Throws ModelLoadError, with Bf16Refusal's
  // reason where the CPU cannot run bf16.
  OpenVinoModel(const std::string& path, const std::vector<TensorInfo>& inputs,
                const std::vector<TensorInfo>& outputs, int threads);
  ~OpenVinoModel();
  OpenVinoModel(const OpenVinoModel&) = delete;
  OpenVinoModel& operator=(const OpenVinoModel&) = delete;

  // One run of validated feeds (Engine::Validate's order); thread-safe: each caller takes its own infer request.
  // Throws EngineError.
  std::vector<OutputTensor> Run(const std::vector<const InputView*>& ordered) const;

  // "openvino 2026.4.1-... bf16": what runs the version, for its info.
  const std::string& runtime() const { return runtime_; }

 private:
  ov_infer_request* Acquire() const;
  void Release(ov_infer_request* request) const;

  const std::string path_;
  std::vector<TensorInfo> inputs_;
  std::vector<TensorInfo> outputs_;
  std::vector<size_t> input_ports_;   // OpenVINO's index of inputs_[i]
  std::vector<size_t> output_ports_;  // OpenVINO's index of outputs_[i]
  ov_compiled_model* compiled_ = nullptr;
  std::string runtime_;
  mutable std::mutex idle_mutex_;
  mutable std::vector<ov_infer_request*> idle_;  // requests not running; one per concurrent caller at most
};

}  // namespace ortserve
