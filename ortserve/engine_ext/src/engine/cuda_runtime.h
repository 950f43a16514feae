// The few CUDA runtime calls the engine makes itself, resolved at run time from the libcudart that ONNX Runtime's
// CUDA provider already loaded, so that the engine builds and runs without CUDA anywhere else.
//
//   const CudaRuntime& cuda = RequireCudaRuntime();   // throws EngineError when no libcudart can be loaded
//   cuda.Check(cuda.memcpy(dst, src, n, CudaRuntime::kHostToDevice), "copying input_ids");
#pragma once

#include <cstddef>
#include <string>
#include <utility>

namespace ortserve {

struct CudaRuntime {
  static constexpr int kHostToDevice = 1;  // cudaMemcpyKind values
  static constexpr int kDeviceToHost = 2;

  int (*set_device)(int) = nullptr;
  int (*mem_get_info)(size_t* free, size_t* total) = nullptr;
  int (*memcpy)(void* dst, const void* src, size_t bytes, int kind) = nullptr;
  const char* (*error_string)(int) = nullptr;
  std::string library;  // which file was loaded

  // Throws EngineError("<what>: CUDA error N (<reason>)") when `status` is not cudaSuccess.
  void Check(int status, const std::string& what) const;
};

// libcudart.so.13, .12 or libcudart.so, whichever loads first (the provider's own copy when it is loaded).
// Thread-safe; the library is loaded once and never closed. Throws EngineError naming what was tried.
const CudaRuntime& RequireCudaRuntime();

// (free, total) bytes of GPU `device`'s memory, as cudaMemGetInfo reports them for the whole device.
std::pair<size_t, size_t> CudaMemoryInfo(int device);

}  // namespace ortserve
