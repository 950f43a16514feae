// Binding to OpenVINO's C library at run time: the bf16 precision's engine. Nothing is loaded until the first bf16
// version needs it, so a server without one never maps OpenVINO. openvino_api.h holds the resolved functions, for the
// engine's OpenVINO files alone (OpenVINO's C headers declare unscoped names such as OK and F32).
#pragma once

#include <string>

namespace ortserve {

// Where libopenvino_c lives ("" where the openvino package is not installed). The Python package sets it at import;
// nothing is loaded here. Thread-safe.
void SetOpenVinoLibrary(const std::string& path);

// "2026.4.1-22982-..." of the library, loading it. Throws ModelLoadError where it cannot be loaded.
std::string OpenVinoVersion();

// What OpenVINO reports for the CPU: OPTIMIZATION_CAPABILITIES, space-separated ("FP32 BF16 INT8 ..."). Loads the
// library; throws ModelLoadError where it cannot be loaded.
std::string OpenVinoCpuCapabilities();

}  // namespace ortserve
