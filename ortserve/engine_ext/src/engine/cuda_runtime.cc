#include "cuda_runtime.h"

#include <dlfcn.h>

#include <mutex>

#include "errors.h"

namespace ortserve {
namespace {

CudaRuntime Load() {
  const char* names[] = {"libcudart.so.13", "libcudart.so.12", "libcudart.so"};
  std::string tried;
  for (const char* name : names) {
    // RTLD_NOLOAD first: the CUDA provider's libcudart is the one whose context ORT uses.
    void* handle = dlopen(name, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
    if (handle == nullptr) handle = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* reason = dlerror();
      tried += std::string(tried.empty() ? "" : "; ") + (reason ? reason : name);
      continue;
    }
    CudaRuntime cuda;
    cuda.set_device = reinterpret_cast<int (*)(int)>(dlsym(handle, "cudaSetDevice"));
    cuda.mem_get_info = reinterpret_cast<int (*)(size_t*, size_t*)>(dlsym(handle, "cudaMemGetInfo"));
    cuda.memcpy = reinterpret_cast<int (*)(void*, const void*, size_t, int)>(dlsym(handle, "cudaMemcpy"));
    cuda.error_string = reinterpret_cast<const char* (*)(int)>(dlsym(handle, "cudaGetErrorString"));
    if (!cuda.set_device || !cuda.mem_get_info || !cuda.memcpy || !cuda.error_string) {
      tried += std::string(tried.empty() ? "" : "; ") + name + " lacks the runtime API symbols";
      continue;
    }
    cuda.library = name;
    return cuda;
  }
  throw EngineError("cannot load the CUDA runtime (" + tried + ")");
}

}  // namespace

void CudaRuntime::Check(int status, const std::string& what) const {
  if (status == 0) return;
  throw EngineError(what + ": CUDA error " + std::to_string(status) + " (" + error_string(status) + ")");
}

const CudaRuntime& RequireCudaRuntime() {
  static std::mutex mutex;
  static CudaRuntime* loaded = nullptr;  // leaked with the library it points into
  std::lock_guard<std::mutex> lock(mutex);
  if (loaded == nullptr) loaded = new CudaRuntime(Load());
  return *loaded;
}

std::pair<size_t, size_t> CudaMemoryInfo(int device) {
  const CudaRuntime& cuda = RequireCudaRuntime();
  cuda.Check(cuda.set_device(device), "selecting GPU " + std::to_string(device));
  size_t free = 0, total = 0;
  cuda.Check(cuda.mem_get_info(&free, &total), "reading GPU " + std::to_string(device) + "'s memory");
  return {free, total};
}

}  // namespace ortserve
