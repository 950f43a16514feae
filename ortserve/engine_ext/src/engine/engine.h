// Engine: one ONNX Runtime session (or, for a bf16 version, one OpenVINO compiled model), its options, validated
// thread-safe runs, and close.
//
//   Engine engine(path, options);           // throws ModelLoadError / OptionError
//   auto outputs = engine.Run(feeds);       // any number of threads at once
//   engine.Close();                         // waits for in-flight runs; later runs throw EngineClosedError
//
// On CUDA: inputs go through an IoBinding from ORT's pinned host arena and outputs come back once per run; with
// cuda_graphs, every run goes through one thread of the engine's own (ORT keeps captured graphs per thread), which
// copies the inputs into device buffers kept per input shape and replays the graph captured for that shape. A run
// that fails for memory (device or capped CPU arena) can be rerun on a CPU session (gpu_oom_fallback), after which
// batches stay on CPU for gpu_fallback_cooldown_s (OomBreaker).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <vector>

#include "oom_breaker.h"
#include "ort.h"

namespace ortserve {

struct CudaRuntime;
class OpenVinoModel;

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

// How a session runs. Every field is a setting of service/config.Settings under the same name, and defaults to its
// default there (tests/service/test_settings_defaults.py holds them equal); the server builds one from its Settings
// (service/assembly.engine_options), never from these defaults.
struct EngineOptions {
  int intra_op_threads = 2;  // 0 lets ORT pick (one per physical core)
  int inter_op_threads = 1;  // > 1 switches the session to parallel execution mode
  std::string graph_optimization_level = "all";  // "disable" | "basic" | "extended" | "all"
  std::string device = "cpu";                    // "cpu" | "cuda" | "cuda:N"
  bool allow_spinning = true;                    // pool threads spin between operators instead of sleeping
  bool spin_between_runs = false;                // ...and keep spinning after Run() returns (ORT's default)
  bool check_finite = true;                      // NaN/Inf in a float output -> NonFiniteOutputError (not a setting)
  // The version's precision, from its manifest (not a setting): "fp32" | "int8" | "fp16" run the graph as it is typed
  // on ONNX Runtime; "bf16" runs the FP32 graph on OpenVINO in bf16 (openvino_model.h), CPU only.
  std::string precision = "fp32";
  int gpu_memory_limit_mb = 0;                   // CUDA: cap on ORT's GPU arena (gpu_mem_limit); 0 = none
  std::string cudnn_conv_algo_search = "exhaustive";  // CUDA: "exhaustive" | "heuristic" | "default"
  bool cuda_graphs = false;                      // CUDA: capture a graph per input shape, replay it after
  int cpu_arena_limit_mb = 0;                    // CPU: run in the process-wide CPU arena capped at this; 0 = own
  std::string gpu_oom_fallback = "lazy";         // "off" | "lazy" | "warm": rerun out-of-memory batches on CPU
  double gpu_fallback_cooldown_s = 30.0;         // after an out-of-memory run, batches go to CPU this long
};

// One run that failed for memory, as the owner logs it (Engine::TakeFallbackEvents).
struct FallbackEvent {
  double unix_s = 0;      // when it happened
  std::vector<int64_t> shape;  // the first input's shape (rows, tokens)
  std::string reason;     // ORT's error
  bool answered = false;  // the CPU session answered the batch
  std::string error;      // why not, when it did not
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
  ~Engine();  // Close()
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  const std::string& path() const { return path_; }
  const std::string& device() const { return device_; }  // "cpu" or "cuda:N": what actually runs
  // What computes the runs: "onnxruntime 1.32.0", or "openvino 2026.4.1-... bf16" for a bf16 version.
  const std::string& runtime() const { return runtime_; }
  const std::vector<TensorInfo>& inputs() const { return inputs_; }
  const std::vector<TensorInfo>& outputs() const { return outputs_; }

  // Validates `feeds` (every model input exactly once; dtype, rank, fixed and shared symbolic dims),
  // runs all outputs and copies them out. Thread-safe, and needs no Python: callers release the GIL.
  // Throws InputError, EngineClosedError, NonFiniteOutputError or EngineError.
  std::vector<OutputTensor> Run(const std::vector<InputView>& feeds) const;

  // Refuses new runs, waits for in-flight ones, then releases the session. Idempotent, thread-safe.
  void Close();

  // Whether runs replay captured CUDA graphs; when cuda_graphs was asked for but ORT refused the model, why not.
  bool cuda_graphs() const { return graphs_active_; }
  const std::string& cuda_graphs_refused() const { return graphs_refused_; }
  // Device runs that failed for memory, batches the CPU session answered, seconds of cool-down left.
  int64_t oom_errors() const { return oom_errors_.load(); }
  int64_t fallback_runs() const { return fallback_runs_.load(); }
  double cooldown_left_s() const;
  bool has_fallback() const;  // a CPU session is loaded (always with "warm"; with "lazy" once needed)
  // The out-of-memory runs since the last call, oldest first (bounded: the oldest are dropped past 256).
  std::vector<FallbackEvent> TakeFallbackEvents();
  // True once Close() was called (in-flight runs may still be finishing).
  bool closed() const { return closing_.load(std::memory_order_acquire); }

 private:
  struct GraphRunner;  // the thread graph runs go through, and the device buffers per input shape
  using Outputs = std::vector<OutputTensor>;

  void ReadInputsAndOutputs(Ort::Session& session);  // fills inputs_ and outputs_ as ORT reads the model
  std::vector<const InputView*> Validate(const std::vector<InputView>& feeds) const;
  std::string ClosedMessage() const;
  std::vector<Ort::Value> CpuValues(const std::vector<const InputView*>& ordered) const;
  Outputs RunPlain(Ort::Session& session, const std::vector<const InputView*>& ordered) const;
  Outputs RunBound(const std::vector<const InputView*>& ordered) const;
  Outputs RunOnDevice(const std::vector<const InputView*>& ordered) const;
  Outputs RunFallback(const std::vector<const InputView*>& ordered, FallbackEvent* event) const;
  // Host copies of `results`; `from_device`: they live in GPU memory (a graph's output buffers).
  Outputs CopyOut(std::vector<Ort::Value>& results, const CudaRuntime* from_device = nullptr) const;
  void CheckFinite(const Outputs& outputs) const;
  Outputs Checked(Outputs outputs) const;  // CheckFinite where check_finite
  // ORT's run error as the engine's: InputError (invalid argument), OutOfMemoryError or EngineError, naming the
  // model; `where` qualifies the session (" on its CPU fallback session").
  [[noreturn]] void ThrowRunError(const Ort::Exception& e, const std::string& where) const;
  Ort::Session& FallbackSession() const;  // creates it on first need; call with fallback_mutex_ held or in the ctor
  // Out-of-memory runs go to a CPU session: on a GPU, or in a capped CPU arena (how it is tested without a GPU).
  // Never for bf16: OpenVINO's runs have no ORT arena to run out of.
  bool FallbackEnabled() const {
    return options_.precision != "bf16" && options_.gpu_oom_fallback != "off" &&
           (cuda_device_ >= 0 || options_.cpu_arena_limit_mb > 0);
  }

  const std::string path_;
  const EngineOptions options_;
  std::string device_;
  std::string runtime_;
  std::vector<TensorInfo> inputs_;
  std::vector<TensorInfo> outputs_;
  std::vector<const char*> input_names_;   // point into inputs_[i].name, in model order
  std::vector<const char*> output_names_;  // point into outputs_[i].name, in model order
  Ort::MemoryInfo cpu_memory_{nullptr};    // describes the caller's input buffers
  int cuda_device_ = -1;                   // the GPU the session runs on, -1 on CPU
  std::unique_ptr<Ort::Allocator> pinned_;  // CUDA: ORT's pinned host arena for inputs; null where ORT has none
  std::string graphs_refused_;
  bool graphs_active_ = false;
  std::unique_ptr<GraphRunner> graph_runner_;  // with cuda_graphs; stopped by Close()

  // Set first by Close() so that new runs fail at once: glibc's rwlock prefers readers, so a steady
  // stream of runs would otherwise starve Close() forever.
  std::atomic<bool> closing_{false};
  // Guards session_ and openvino_: Run() holds it shared for the whole ORT call and output copy, Close() exclusive.
  mutable std::shared_mutex session_mutex_;
  std::unique_ptr<Ort::Session> session_;
  std::unique_ptr<OpenVinoModel> openvino_;  // a bf16 version's runs, instead of session_

  // The CPU session out-of-memory batches rerun on; created at load ("warm") or on first need ("lazy").
  mutable std::mutex fallback_mutex_;
  mutable std::unique_ptr<Ort::Session> fallback_;
  mutable OomBreaker breaker_;  // guarded by fallback_mutex_
  mutable std::vector<FallbackEvent> events_;  // guarded by fallback_mutex_
  mutable std::atomic<int64_t> oom_errors_{0};
  mutable std::atomic<int64_t> fallback_runs_{0};
};

}  // namespace ortserve
