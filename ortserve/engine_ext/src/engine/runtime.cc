#include "runtime.h"

#include <dlfcn.h>

#include <mutex>

#include "dl_library.h"
#include "errors.h"

namespace ortserve {
namespace {

std::mutex g_init_mutex;                 // guards g_api_base and g_library_path while they are set
const OrtApiBase* g_api_base = nullptr;  // written once under g_init_mutex, read-only afterwards
std::string g_library_path;

const OrtApiBase& RequireApiBase() {
  std::lock_guard<std::mutex> lock(g_init_mutex);
  if (g_api_base == nullptr) {
    throw EngineError(
        "ONNX Runtime is not loaded; import ortserve.engine_ext, which locates the onnxruntime library "
        "and calls _init(path)");
  }
  return *g_api_base;
}

}  // namespace

void InitRuntime(const std::string& library_path) {
  std::lock_guard<std::mutex> lock(g_init_mutex);
  if (g_api_base != nullptr) {
    if (library_path == g_library_path) return;
    throw EngineError("ONNX Runtime is already loaded from '" + g_library_path + "'; cannot also load '" +
                      library_path + "' into the same process");
  }

  std::string reason;
  void* handle = OpenLibrary(library_path, reason);  // ORT cannot be unloaded safely once sessions exist
  if (handle == nullptr) throw EngineError("cannot load the ONNX Runtime library '" + library_path + "': " + reason);
  using GetApiBaseFn = const OrtApiBase* (*)();
  auto get_api_base = reinterpret_cast<GetApiBaseFn>(dlsym(handle, "OrtGetApiBase"));
  if (get_api_base == nullptr) {
    dlclose(handle);
    throw EngineError("'" + library_path + "' has no OrtGetApiBase symbol; is it an ONNX Runtime library?");
  }
  const OrtApiBase* base = get_api_base();
  const OrtApi* api = base->GetApi(ORT_API_VERSION);
  if (api == nullptr) {
    const std::string version = base->GetVersionString();
    throw EngineError("ONNX Runtime " + version + " at '" + library_path + "' does not provide C API version " +
                      std::to_string(ORT_API_VERSION) + ", which this ortserve build was compiled against " +
                      "(it needs ONNX Runtime >= 1." + std::to_string(ORT_API_VERSION) +
                      "); install a newer onnxruntime");
  }
  Ort::InitApi(api);
  g_api_base = base;
  g_library_path = library_path;
}

std::string RuntimeVersion() { return RequireApiBase().GetVersionString(); }

std::string LibraryPath() {
  RequireApiBase();
  std::lock_guard<std::mutex> lock(g_init_mutex);
  return g_library_path;
}

Ort::Env& SharedEnv() {
  RequireApiBase();
  // Leaked on purpose: destroying the Env at process exit races ORT's own static teardown and any
  // session Python has not collected yet. A function-local static makes first creation thread-safe.
  static Ort::Env* env = new Ort::Env(ORT_LOGGING_LEVEL_WARNING, "ortserve");
  return *env;
}

}  // namespace ortserve
