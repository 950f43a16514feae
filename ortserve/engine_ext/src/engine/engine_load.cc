// Loading a model (engine.h): the options checked, the session opened on CUDA (its provider options, graphs or not)
// or CPU (a capped arena or its own), the CPU fallback session, and Close.
#include <cstdio>
#include <filesystem>
#if defined(__GLIBC__)
#include <malloc.h>
#endif
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine_internal.h"
#include "errors.h"
#include "graph_runner.h"
#include "openvino_model.h"
#include "runtime.h"

namespace ortserve {
namespace {

GraphOptimizationLevel ParseOptimizationLevel(const std::string& level) {
  if (level == "disable") return ORT_DISABLE_ALL;
  if (level == "basic") return ORT_ENABLE_BASIC;
  if (level == "extended") return ORT_ENABLE_EXTENDED;
  if (level == "all") return ORT_ENABLE_ALL;
  throw OptionError("graph_optimization_level must be one of 'disable', 'basic', 'extended', 'all'; got '" +
                    level + "'");
}

// "cpu" -> -1, "cuda" -> 0, "cuda:N" -> N.
int ParseCudaDevice(const std::string& device) {
  if (device == "cpu") return -1;
  if (device == "cuda") return 0;
  const std::string prefix = "cuda:";
  const std::string id = device.compare(0, prefix.size(), prefix) == 0 ? device.substr(prefix.size()) : "";
  if (!id.empty() && id.size() <= 6 && id.find_first_not_of("0123456789") == std::string::npos) {
    return std::stoi(id);
  }
  throw OptionError("device must be 'cpu', 'cuda' or 'cuda:N' (N = GPU index); got '" + device + "'");
}

void RequireNonNegative(const char* option, int value) {
  if (value < 0) {
    throw OptionError(std::string(option) + " must be >= 0 (0 lets ONNX Runtime choose), got " +
                      std::to_string(value));
  }
}

// ORT's name for a cudnn_conv_algo_search value.
std::string CudnnSearchValue(const std::string& search) {
  if (search == "exhaustive") return "EXHAUSTIVE";
  if (search == "heuristic") return "HEURISTIC";
  if (search == "default") return "DEFAULT";
  throw OptionError("cudnn_conv_algo_search must be one of 'exhaustive', 'heuristic', 'default'; got '" + search +
                    "'");
}

// Appends the CUDA execution provider for GPU `device_id` through the C API (so this compiles without
// CUDA). Returns "" on success, else ORT's reason (e.g. a CPU-only build).
std::string AppendCuda(Ort::SessionOptions& session_options, int device_id, const EngineOptions& options,
                       bool graphs) {
  const OrtApi& api = Ort::GetApi();
  OrtCUDAProviderOptionsV2* cuda = nullptr;
  Ort::Status status{api.CreateCUDAProviderOptions(&cuda)};
  if (!status.IsOK()) return status.GetErrorMessage();
  std::unique_ptr<OrtCUDAProviderOptionsV2, void (*)(OrtCUDAProviderOptionsV2*)> owned(
      cuda, api.ReleaseCUDAProviderOptions);
  const std::string id = std::to_string(device_id);
  const std::string limit = std::to_string(static_cast<size_t>(options.gpu_memory_limit_mb) << 20);
  const std::string search = CudnnSearchValue(options.cudnn_conv_algo_search);
  // kSameAsRequested: the arena grows by what a run asks for, not by doubling, so the cap is what is used.
  std::vector<const char*> keys{"device_id", "arena_extend_strategy", "cudnn_conv_algo_search",
                                "do_copy_in_default_stream", "enable_cuda_graph"};
  std::vector<const char*> values{id.c_str(), "kSameAsRequested", search.c_str(), "1", graphs ? "1" : "0"};
  if (options.gpu_memory_limit_mb > 0) {
    keys.push_back("gpu_mem_limit");
    values.push_back(limit.c_str());
  }
  status = Ort::Status{api.UpdateCUDAProviderOptions(cuda, keys.data(), values.data(), keys.size())};
  if (!status.IsOK()) return status.GetErrorMessage();
  status = Ort::Status{api.SessionOptionsAppendExecutionProvider_CUDA_V2(session_options, cuda)};
  if (!status.IsOK()) return status.GetErrorMessage();
  return "";
}

// Sessions with cpu_arena_limit_mb allocate from one CPU arena registered on the shared Env, capped at the first
// limit asked for (ORT keeps one such arena per process); a later, different limit is an OptionError.
void UseCappedCpuArena(Ort::SessionOptions& session_options, int limit_mb) {
  static std::mutex mutex;
  static int registered_mb = 0;
  std::lock_guard<std::mutex> lock(mutex);
  if (registered_mb == 0) {
    Ort::MemoryInfo cpu = Ort::MemoryInfo::CreateCpu(OrtArenaAllocator, OrtMemTypeDefault);
    Ort::ArenaCfg arena(static_cast<size_t>(limit_mb) << 20, /*kSameAsRequested*/ 1, -1, -1);
    SharedEnv().CreateAndRegisterAllocator(cpu, arena);
    registered_mb = limit_mb;
  } else if (registered_mb != limit_mb) {
    throw OptionError("cpu_arena_limit_mb is one arena for the whole process, already capped at " +
                      std::to_string(registered_mb) + " MB; got " + std::to_string(limit_mb));
  }
  session_options.AddConfigEntry("session.use_env_allocators", "1");
}

Ort::SessionOptions MakeSessionOptions(const EngineOptions& options) {
  Ort::SessionOptions session_options;
  session_options.SetIntraOpNumThreads(options.intra_op_threads);
  session_options.SetInterOpNumThreads(options.inter_op_threads);
  // ORT only uses the inter-op pool in parallel mode; asking for more than one thread means this.
  if (options.inter_op_threads > 1) session_options.SetExecutionMode(ORT_PARALLEL);
  session_options.SetGraphOptimizationLevel(ParseOptimizationLevel(options.graph_optimization_level));
  const char* spinning = options.allow_spinning ? "1" : "0";
  session_options.AddConfigEntry("session.intra_op.allow_spinning", spinning);
  session_options.AddConfigEntry("session.inter_op.allow_spinning", spinning);
  // Spinning inside a run saves a wake-up per operator; once the last run returns, a spinning pool only
  // takes the cores from whatever else runs until the next call (the front end, the other lane).
  if (options.allow_spinning && !options.spin_between_runs) {
    session_options.AddConfigEntry("session.force_spinning_stop", "1");
  }
  return session_options;
}

}  // namespace

Engine::Engine(std::string path, const EngineOptions& options)
    : path_(std::move(path)), options_(options), breaker_(options.gpu_fallback_cooldown_s) {
  RequireNonNegative("intra_op_threads", options_.intra_op_threads);
  RequireNonNegative("inter_op_threads", options_.inter_op_threads);
  ParseOptimizationLevel(options_.graph_optimization_level);
  CudnnSearchValue(options_.cudnn_conv_algo_search);
  if (options_.gpu_memory_limit_mb < 0) throw OptionError("gpu_memory_limit_mb must be >= 0 (0 = no cap)");
  if (options_.cpu_arena_limit_mb < 0) throw OptionError("cpu_arena_limit_mb must be >= 0 (0 = no cap)");
  if (options_.gpu_oom_fallback != "off" && options_.gpu_oom_fallback != "lazy" &&
      options_.gpu_oom_fallback != "warm") {
    throw OptionError("gpu_oom_fallback must be one of 'off', 'lazy', 'warm'; got '" + options_.gpu_oom_fallback +
                      "'");
  }
  if (!(options_.gpu_fallback_cooldown_s >= 0)) throw OptionError("gpu_fallback_cooldown_s must be >= 0");
  const int cuda_device = ParseCudaDevice(options_.device);
  const std::string& precision = options_.precision;
  if (precision != "fp32" && precision != "int8" && precision != "fp16" && precision != "bf16") {
    throw OptionError("precision must be one of 'fp32', 'int8', 'fp16', 'bf16'; got '" + precision + "'");
  }
  const bool bf16 = precision == "bf16";
  if (bf16 && cuda_device >= 0) {
    throw OptionError("precision 'bf16' runs on the CPU (OpenVINO); device must be 'cpu', got '" + options_.device +
                      "'");
  }

  std::error_code ec;
  const auto status = std::filesystem::status(path_, ec);
  if (!std::filesystem::exists(status)) throw ModelLoadError("cannot load model '" + path_ + "': file not found");
  if (std::filesystem::is_directory(status)) {
    throw ModelLoadError("cannot load model '" + path_ + "': it is a directory, expected an .onnx file");
  }

  Ort::Env& env = SharedEnv();
  bool graphs = false;
  try {
    device_ = "cpu";
    if (cuda_device >= 0) {
      std::string reason;
      for (bool with_graphs : {options_.cuda_graphs, false}) {
        Ort::SessionOptions cuda_options = MakeSessionOptions(options_);
        reason = AppendCuda(cuda_options, cuda_device, options_, with_graphs);
        if (!reason.empty()) break;
        try {
          session_ = std::make_unique<Ort::Session>(env, path_.c_str(), cuda_options);
          device_ = "cuda:" + std::to_string(cuda_device);
          graphs = with_graphs;
          break;
        } catch (const Ort::Exception& e) {
          // A GPU build without a usable GPU fails here, not at append; a broken model fails on CPU too.
          reason = e.what();
          if (IsOutOfMemory(reason)) {
            // The GPU is there but the model does not fit it (or gpu_memory_limit_mb): a load error, not a
            // reason to serve from CPU at a fraction of the speed.
            throw ModelLoadError("does not fit in GPU " + std::to_string(cuda_device) + "'s memory" +
                                 (options_.gpu_memory_limit_mb > 0
                                      ? " under gpu_memory_limit_mb=" + std::to_string(options_.gpu_memory_limit_mb)
                                      : std::string()) +
                                 ": " + OneLine(reason));
          }
          const bool graph_refusal = with_graphs && reason.find("CUDA Graph") != std::string::npos;
          if (!graph_refusal) break;
          graphs_refused_ = OneLine(reason);  // ORT cannot capture this model: serve it without graphs
          std::fprintf(stderr, "ortserve.engine: CUDA graphs refused for '%s' (%s); running without them\n",
                       path_.c_str(), graphs_refused_.c_str());
        }
      }
      if (!session_) {
        std::fprintf(stderr, "ortserve.engine: CUDA provider unavailable (%s); running '%s' on CPU\n",
                     OneLine(reason).c_str(), path_.c_str());
      }
    }
    if (bf16) {
      // ORT reads the tensors (names, types, symbolic dimensions: the contract every precision keeps); OpenVINO runs.
      EngineOptions reader = options_;
      reader.graph_optimization_level = "disable";
      reader.intra_op_threads = 1;
      {
        Ort::Session metadata(env, path_.c_str(), MakeSessionOptions(reader));
        ReadInputsAndOutputs(metadata);
      }
      openvino_ = std::make_unique<OpenVinoModel>(path_, inputs_, outputs_, options_.intra_op_threads);
      runtime_ = openvino_->runtime();
    } else if (!session_) {
      Ort::SessionOptions cpu_options = MakeSessionOptions(options_);
      if (options_.cpu_arena_limit_mb > 0) UseCappedCpuArena(cpu_options, options_.cpu_arena_limit_mb);
      session_ = std::make_unique<Ort::Session>(env, path_.c_str(), cpu_options);
    } else {
      cuda_device_ = cuda_device;
    }
    if (session_) {
      ReadInputsAndOutputs(*session_);
      runtime_ = "onnxruntime " + RuntimeVersion();
    }
    if (cuda_device_ >= 0) {
      try {
        Ort::MemoryInfo pinned("CudaPinned", OrtDeviceAllocator, cuda_device_, OrtMemTypeCPUOutput);
        pinned_ = std::make_unique<Ort::Allocator>(*session_, pinned);
      } catch (const Ort::Exception&) {
        pinned_.reset();  // inputs then go from the caller's pageable memory, one copy less on the host
      }
    }
    if (FallbackEnabled() && options_.gpu_oom_fallback == "warm") {
      try {
        FallbackSession();
      } catch (const Ort::Exception& e) {
        throw ModelLoadError(std::string("gpu_oom_fallback='warm' needs a CPU session of the model, which failed (") +
                             e.what() + "); use 'lazy' or 'off'");
      }
    }
  } catch (const Ort::Exception& e) {
    throw ModelLoadError("cannot load model '" + path_ + "': " + e.what());
  } catch (const ModelLoadError& e) {
    throw ModelLoadError("cannot load model '" + path_ + "': " + e.what());
  }
  for (const TensorInfo& info : inputs_) input_names_.push_back(info.name.c_str());
  for (const TensorInfo& info : outputs_) output_names_.push_back(info.name.c_str());
  cpu_memory_ = Ort::MemoryInfo::CreateCpu(OrtDeviceAllocator, OrtMemTypeDefault);
  if (graphs) graph_runner_ = std::make_unique<GraphRunner>(*this);
  graphs_active_ = graphs;
}

Engine::~Engine() { Close(); }

void Engine::ReadInputsAndOutputs(Ort::Session& session) {
  Ort::AllocatorWithDefaultOptions allocator;
  for (size_t i = 0; i < session.GetInputCount(); ++i) {
    inputs_.push_back(
        ReadTensorInfo("input", session.GetInputNameAllocated(i, allocator).get(), session.GetInputTypeInfo(i)));
  }
  for (size_t i = 0; i < session.GetOutputCount(); ++i) {
    outputs_.push_back(
        ReadTensorInfo("output", session.GetOutputNameAllocated(i, allocator).get(), session.GetOutputTypeInfo(i)));
  }
}

std::string Engine::ClosedMessage() const { return "engine for model '" + path_ + "' is closed"; }

Ort::Session& Engine::FallbackSession() const {
  if (!fallback_) {
    EngineOptions cpu = options_;
    cpu.device = "cpu";
    fallback_ = std::make_unique<Ort::Session>(SharedEnv(), path_.c_str(), MakeSessionOptions(cpu));
  }
  return *fallback_;
}

void Engine::Close() {
  closing_.store(true, std::memory_order_release);
  {
    std::unique_lock<std::shared_mutex> lock(session_mutex_);
    if (!session_ && !openvino_) return;
    openvino_.reset();
    if (graph_runner_) graph_runner_->Stop();  // its device buffers go back before the session
    graph_runner_.reset();
    pinned_.reset();
    {
      std::lock_guard<std::mutex> guard(fallback_mutex_);
      fallback_.reset();
    }
    session_.reset();
  }
#if defined(__GLIBC__)
  // A session's weights and arena were allocated by whichever threads opened and ran it, so they sit in
  // several glibc malloc arenas; freed, they stay mapped until something trims. Measured over 10 swaps
  // (tests/reload/test_memory.py): without this RSS rose 118 -> 137 MiB before levelling off, with it
  // 105 -> 115 MiB. Outside the lock: a trim walks every arena and takes milliseconds.
  malloc_trim(0);
#endif
}

}  // namespace ortserve
