// Opening a library the engine loads at run time (ONNX Runtime, OpenVINO): one way, for both.
#pragma once

#include <dlfcn.h>

#include <string>

namespace ortserve {

// Opens `path` for good (never closed: sessions and plugins outlive any one model). RTLD_LOCAL keeps its symbols out
// of the global namespace (other extensions may carry their own copy); RTLD_NOW surfaces a missing dependency here
// rather than at first use. nullptr, with dlerror's reason in `reason`, when it cannot.
inline void* OpenLibrary(const std::string& path, std::string& reason) {
  dlerror();
  void* handle = dlopen(path.c_str(), RTLD_LOCAL | RTLD_NOW);
  if (handle == nullptr) {
    const char* error = dlerror();
    reason = error ? error : "unknown dlopen error";
  }
  return handle;
}

}  // namespace ortserve
