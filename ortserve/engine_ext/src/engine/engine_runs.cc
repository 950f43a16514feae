// Running a batch (engine.h Run): on CPU plainly, on CUDA through an IoBinding from pinned memory or the graph
// runner, and a run that fails for memory rerun on the CPU fallback session (OomBreaker keeps the cool-down).
#include <chrono>
#include <cstring>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <vector>

#include "engine_internal.h"
#include "errors.h"
#include "graph_runner.h"
#include "openvino_model.h"

namespace ortserve {
namespace {

double UnixNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

double SteadyNow() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

// Whether ORT's error is an allocation failure: BFCArena over its cap (GPU gpu_mem_limit or a capped CPU arena), the
// CUDA allocator itself, or cuBLAS/cuDNN workspace.
bool IsOutOfMemory(const std::string& what) {
  static const char* const kSigns[] = {"Failed to allocate memory", "Available memory of", "out of memory",
                                       "cudaErrorMemoryAllocation", "CUBLAS_STATUS_ALLOC_FAILED",
                                       "CUDNN_STATUS_ALLOC_FAILED", "std::bad_alloc"};
  for (const char* sign : kSigns) {
    if (what.find(sign) != std::string::npos) return true;
  }
  return false;
}

std::string OneLine(std::string text) {
  for (char& c : text) c = (c == '\n' || c == '\r') ? ' ' : c;
  return text;
}

Engine::Outputs Engine::RunPlain(Ort::Session& session, const std::vector<const InputView*>& ordered) const {
  std::vector<Ort::Value> inputs = CpuValues(ordered);
  // Session-owned results: copied out before they are released.
  std::vector<Ort::Value> results = session.Run(Ort::RunOptions{nullptr}, input_names_.data(), inputs.data(),
                                                inputs.size(), output_names_.data(), output_names_.size());
  return CopyOut(results);
}

Engine::Outputs Engine::RunBound(const std::vector<const InputView*>& ordered) const {
  Ort::IoBinding binding(*session_);
  std::vector<Ort::Value> inputs;
  if (pinned_) {
    // Staged in ORT's pinned arena (reused run after run), so the host-to-device copy is a direct DMA.
    for (size_t i = 0; i < ordered.size(); ++i) {
      inputs.push_back(Ort::Value::CreateTensor(*pinned_, ordered[i]->shape.data(), ordered[i]->shape.size(),
                                                inputs_[i].element_type));
      if (ordered[i]->nbytes > 0) {
        std::memcpy(inputs.back().GetTensorMutableRawData(), ordered[i]->data, ordered[i]->nbytes);
      }
    }
  } else {
    inputs = CpuValues(ordered);
  }
  for (size_t i = 0; i < inputs.size(); ++i) binding.BindInput(input_names_[i], inputs[i]);
  for (const char* name : output_names_) binding.BindOutput(name, cpu_memory_);  // one copy back per run
  Ort::RunOptions run_options;
  if (graphs_active_) run_options.AddConfigEntry("gpu_graph_id", "-1");  // a shape past GraphRunner::kMaxGraphs
  session_->Run(run_options, binding);
  std::vector<Ort::Value> results = binding.GetOutputValues();
  return CopyOut(results);
}

Engine::Outputs Engine::RunOnDevice(const std::vector<const InputView*>& ordered) const {
  if (cuda_device_ < 0) return RunPlain(*session_, ordered);
  if (graph_runner_) return graph_runner_->Call([&] { return graph_runner_->Run(ordered); });
  return RunBound(ordered);
}

Engine::Outputs Engine::RunFallback(const std::vector<const InputView*>& ordered, FallbackEvent* event) const {
  Ort::Session* session = nullptr;
  {
    std::lock_guard<std::mutex> lock(fallback_mutex_);
    if (event != nullptr) breaker_.OnOutOfMemory(SteadyNow());
    try {
      session = &FallbackSession();
    } catch (const Ort::Exception& e) {
      throw EngineError("model '" + path_ + "': its CPU fallback session could not be created: " + e.what());
    }
  }
  try {
    Outputs outputs = RunPlain(*session, ordered);
    ++fallback_runs_;
    return outputs;
  } catch (const Ort::Exception& e) {
    ThrowRunError(e, " on its CPU fallback session");  // a bad input is the caller's, whichever session saw it
  }
}

void Engine::ThrowRunError(const Ort::Exception& e, const std::string& where) const {
  const std::string what = e.what();
  if (e.GetOrtErrorCode() == ORT_INVALID_ARGUMENT) {
    throw InputError("model '" + path_ + "' rejected the inputs: " + what);
  }
  if (IsOutOfMemory(what)) throw OutOfMemoryError("model '" + path_ + "' ran out of memory" + where + ": " + what);
  throw EngineError("inference failed for model '" + path_ + "'" + where + ": " + what);
}

std::vector<OutputTensor> Engine::Run(const std::vector<InputView>& feeds) const {
  if (closed()) throw EngineClosedError(ClosedMessage());
  const std::vector<const InputView*> ordered = Validate(feeds);

  Outputs outputs;
  {
    std::shared_lock<std::shared_mutex> lock(session_mutex_);
    if (openvino_) return Checked(openvino_->Run(ordered));
    if (!session_) throw EngineClosedError(ClosedMessage());
    const bool fallback = FallbackEnabled();
    bool on_device = true;
    if (fallback) {
      std::lock_guard<std::mutex> guard(fallback_mutex_);
      on_device = breaker_.UseDevice(SteadyNow());
    }
    if (!on_device) {
      outputs = RunFallback(ordered, nullptr);
    } else {
      try {
        outputs = RunOnDevice(ordered);
      } catch (const Ort::Exception& e) {
        const std::string what = e.what();
        if (!IsOutOfMemory(what)) ThrowRunError(e, "");
        ++oom_errors_;
        FallbackEvent event;
        event.unix_s = UnixNow();
        event.shape = ordered.empty() ? std::vector<int64_t>{} : ordered[0]->shape;
        event.reason = OneLine(what);
        const std::string ran_out = "model '" + path_ + "' ran out of memory on " + device_ + ": " + event.reason;
        auto record = [this, &event] {
          std::lock_guard<std::mutex> guard(fallback_mutex_);
          if (events_.size() >= 256) events_.erase(events_.begin());
          events_.push_back(event);
        };
        if (!fallback) {
          event.error = "gpu_oom_fallback is off";
          record();
          throw OutOfMemoryError(ran_out + " (gpu_oom_fallback is off)");
        }
        try {
          outputs = RunFallback(ordered, &event);
        } catch (const EngineError& f) {
          event.error = f.what();
          record();
          throw OutOfMemoryError(ran_out + "; its rerun on CPU failed: " + f.what());
        }
        event.answered = true;
        record();
      }
    }
  }
  return Checked(std::move(outputs));
}

Engine::Outputs Engine::Checked(Outputs outputs) const {
  if (options_.check_finite) CheckFinite(outputs);
  return outputs;
}

double Engine::cooldown_left_s() const {
  std::lock_guard<std::mutex> guard(fallback_mutex_);
  return breaker_.RemainingS(SteadyNow());
}

bool Engine::has_fallback() const {
  std::lock_guard<std::mutex> guard(fallback_mutex_);
  return fallback_ != nullptr;
}

std::vector<FallbackEvent> Engine::TakeFallbackEvents() {
  std::lock_guard<std::mutex> guard(fallback_mutex_);
  std::vector<FallbackEvent> taken;
  taken.swap(events_);
  return taken;
}

}  // namespace ortserve
