// Engine: one ONNX Runtime session, its options, validated thread-safe runs, and close.
//
//   Engine engine(path, options);           // throws ModelLoadError / OptionError
//   auto outputs = engine.Run(feeds);       // any number of threads at once
//   engine.Close();                         // waits for in-flight runs; later runs throw EngineClosedError
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <shared_mutex>
#include <string>
#include <vector>

#include "ort.h"

namespace ortserve {

// Name, element type and shape of one model input or output.
struct TensorInfo {
  std::string name;
  std::string dtype;  // numpy-style: "int64", "float32", "bool", ...
  ONNXTensorElementDataType element_type = ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
  std::vector<int64_t> shape;           // -1 where the dimension is dynamic
  std::vector<std::string> dim_names;   // symbolic name per dimension ("batch"), "" where none

  // "int64 [batch, seq]": what error messages show as the expectation.
  std::string Describe() const;
};

struct EngineOptions {
  int intra_op_threads = 1;  // 0 lets ORT pick (one per physical core)
  int inter_op_threads = 1;  // > 1 switches the session to parallel execution mode
  std::string graph_optimization_level = "all";  // "disable" | "basic" | "extended" | "all"
  std::string device = "cpu";                    // "cpu" | "cuda" | "cuda:N"
  bool allow_spinning = false;                   // pool threads spin between operators instead of sleeping
  bool spin_between_runs = false;                // ...and keep spinning after Run() returns (ORT's default)
  bool check_finite = true;                      // NaN/Inf in a float output -> NonFiniteOutputError
};

// A caller's array, borrowed for the duration of Run(): C-contiguous, native byte order.
struct InputView {
  std::string name;
  std::string dtype;  // numpy-style name of the array's dtype (any, even unsupported: Run rejects it)
  std::vector<int64_t> shape;
  const void* data = nullptr;
  size_t nbytes = 0;
};

// One output, copied out of ORT so that it outlives the session.
struct OutputTensor {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  std::unique_ptr<uint8_t[]> data;
  size_t nbytes = 0;
};

// numpy-style name of an element type the engine exchanges, or "" for types it does not.
std::string DtypeName(ONNXTensorElementDataType type);

class Engine {
 public:
  // Loads the model at `path`. Throws OptionError for bad options and ModelLoadError when the model
  // cannot be loaded or has inputs/outputs the engine cannot exchange with numpy.
  Engine(std::string path, const EngineOptions& options);
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  const std::string& path() const { return path_; }
  const std::string& device() const { return device_; }  // "cpu" or "cuda:N": what actually runs
  const std::vector<TensorInfo>& inputs() const { return inputs_; }
  const std::vector<TensorInfo>& outputs() const { return outputs_; }

  // Validates `feeds` (every model input exactly once; dtype, rank, fixed and shared symbolic dims),
  // runs all outputs and copies them out. Thread-safe, and needs no Python: callers release the GIL.
  // Throws InputError, EngineClosedError, NonFiniteOutputError or EngineError.
  std::vector<OutputTensor> Run(const std::vector<InputView>& feeds) const;

  // Refuses new runs, waits for in-flight ones, then releases the session. Idempotent, thread-safe.
  void Close();
  // True once Close() was called (in-flight runs may still be finishing).
  bool closed() const { return closing_.load(std::memory_order_acquire); }

 private:
  std::vector<const InputView*> Validate(const std::vector<InputView>& feeds) const;
  std::string ClosedMessage() const;

  const std::string path_;
  const EngineOptions options_;
  std::string device_;
  std::vector<TensorInfo> inputs_;
  std::vector<TensorInfo> outputs_;
  std::vector<const char*> input_names_;   // point into inputs_[i].name, in model order
  std::vector<const char*> output_names_;  // point into outputs_[i].name, in model order
  Ort::MemoryInfo cpu_memory_{nullptr};    // describes the caller's input buffers

  // Set first by Close() so that new runs fail at once: glibc's rwlock prefers readers, so a steady
  // stream of runs would otherwise starve Close() forever.
  std::atomic<bool> closing_{false};
  // Guards session_: Run() holds it shared for the whole ORT call and output copy, Close() exclusive.
  mutable std::shared_mutex session_mutex_;
  std::unique_ptr<Ort::Session> session_;
};

}  // namespace ortserve
