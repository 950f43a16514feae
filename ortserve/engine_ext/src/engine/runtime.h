// Binding to the ONNX Runtime shared library at run time, and the process-wide Ort::Env.
#pragma once

#include <string>

#include "ort.h"

namespace ortserve {

// dlopen()s libonnxruntime at `library_path` (RTLD_LOCAL | RTLD_NOW), resolves OrtGetApiBase and points
// the ORT C++ API at GetApi(ORT_API_VERSION). Idempotent for the same path; thread-safe.
// Throws EngineError when the file cannot be loaded, is not ONNX Runtime, is too old for our headers,
// or when a different library was already loaded into this process.
void InitRuntime(const std::string& library_path);

// The loaded library's version string, e.g. "1.31.1". Throws EngineError before InitRuntime().
std::string RuntimeVersion();

// The path InitRuntime() loaded. Throws EngineError before InitRuntime().
std::string LibraryPath();

// The one Ort::Env of this process (log level warning), created on first use. Throws EngineError
// before InitRuntime().
Ort::Env& SharedEnv();

}  // namespace ortserve
