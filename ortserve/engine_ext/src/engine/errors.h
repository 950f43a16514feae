// Error types the engine throws; bindings.cc maps each to the Python class of the same name.
#pragma once

#include <stdexcept>
#include <string>

namespace ortserve {

// Base of every engine failure (Python: EngineError(RuntimeError)).
struct EngineError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The model file is missing, unreadable, not ONNX, or uses types the engine cannot feed.
struct ModelLoadError : EngineError {
  using EngineError::EngineError;
};

// The caller's feeds do not match the model (Python: also a ValueError).
struct InputError : EngineError {
  using EngineError::EngineError;
};

// An output holds NaN or Inf and the engine was asked to check.
struct NonFiniteOutputError : EngineError {
  using EngineError::EngineError;
};

// A run needed more memory than its arena may take (a GPU, or a capped CPU arena), and no CPU fallback answered.
struct OutOfMemoryError : EngineError {
  using EngineError::EngineError;
};

// run() after close() started.
struct EngineClosedError : EngineError {
  using EngineError::EngineError;
};

// A constructor option has a bad value (Python: ValueError), e.g. graph_optimization_level="fast".
struct OptionError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

}  // namespace ortserve
