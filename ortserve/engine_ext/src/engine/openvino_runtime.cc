#include "openvino_api.h"

#include <dlfcn.h>

#include <memory>
#include <mutex>

#include "dl_library.h"
#include "errors.h"

namespace ortserve {
namespace {

std::mutex g_mutex;  // guards everything below
std::string g_library_path;
OpenVinoApi* g_api = nullptr;  // set once under g_mutex, then read-only; never freed (the library stays mapped)
ov_core_t* g_core = nullptr;

template <typename F>
void Resolve(void* handle, const char* name, F& slot, const std::string& path) {
  slot = reinterpret_cast<F>(dlsym(handle, name));
  if (slot == nullptr) {
    throw ModelLoadError("'" + path + "' has no " + name + "; the bf16 precision needs OpenVINO >= 2023.1 " +
                         "(pip install -U openvino)");
  }
}

}  // namespace

void SetOpenVinoLibrary(const std::string& path) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_library_path = path;
}

const OpenVinoApi& OpenVino() {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_api != nullptr) return *g_api;
  if (g_library_path.empty()) {
    throw ModelLoadError("the bf16 precision runs on OpenVINO, which is not installed: pip install openvino "
                         "(or set ORTSERVE_OPENVINO_LIB to a libopenvino_c.so path)");
  }
  std::string reason;
  void* handle = OpenLibrary(g_library_path, reason);  // OpenVINO's plugins and threads outlive any one model
  if (handle == nullptr) throw ModelLoadError("cannot load OpenVINO's C library '" + g_library_path + "': " + reason);
  auto api = std::make_unique<OpenVinoApi>();
  const std::string& p = g_library_path;
  Resolve(handle, "ov_core_create", api->core_create, p);
  Resolve(handle, "ov_core_read_model", api->core_read_model, p);
  Resolve(handle, "ov_core_compile_model", api->core_compile_model, p);
  Resolve(handle, "ov_core_get_property", api->core_get_property, p);
  Resolve(handle, "ov_get_openvino_version", api->get_openvino_version, p);
  Resolve(handle, "ov_version_free", api->version_free, p);
  Resolve(handle, "ov_model_free", api->model_free, p);
  Resolve(handle, "ov_model_inputs_size", api->model_inputs_size, p);
  Resolve(handle, "ov_model_outputs_size", api->model_outputs_size, p);
  Resolve(handle, "ov_model_const_input_by_index", api->model_const_input_by_index, p);
  Resolve(handle, "ov_model_const_output_by_index", api->model_const_output_by_index, p);
  Resolve(handle, "ov_compiled_model_get_property", api->compiled_model_get_property, p);
  Resolve(handle, "ov_compiled_model_create_infer_request", api->compiled_model_create_infer_request, p);
  Resolve(handle, "ov_compiled_model_free", api->compiled_model_free, p);
  Resolve(handle, "ov_port_get_any_name", api->port_get_any_name, p);
  Resolve(handle, "ov_output_const_port_free", api->output_const_port_free, p);
  Resolve(handle, "ov_infer_request_set_input_tensor_by_index", api->infer_request_set_input_tensor_by_index, p);
  Resolve(handle, "ov_infer_request_infer", api->infer_request_infer, p);
  Resolve(handle, "ov_infer_request_get_output_tensor_by_index", api->infer_request_get_output_tensor_by_index, p);
  Resolve(handle, "ov_infer_request_free", api->infer_request_free, p);
  Resolve(handle, "ov_tensor_create_from_host_ptr", api->tensor_create_from_host_ptr, p);
  Resolve(handle, "ov_tensor_get_shape", api->tensor_get_shape, p);
  Resolve(handle, "ov_tensor_get_element_type", api->tensor_get_element_type, p);
  Resolve(handle, "ov_tensor_data", api->tensor_data, p);
  Resolve(handle, "ov_tensor_free", api->tensor_free, p);
  Resolve(handle, "ov_shape_create", api->shape_create, p);
  Resolve(handle, "ov_shape_free", api->shape_free, p);
  Resolve(handle, "ov_get_last_err_msg", api->get_last_err_msg, p);
  Resolve(handle, "ov_free", api->free, p);
  g_api = api.release();
  return *g_api;
}

void CheckOpenVino(ov_status_e status, const std::string& doing) {
  if (status == ov_status_e::OK) return;
  const char* message = OpenVino().get_last_err_msg();
  throw ModelLoadError(doing + ": OpenVINO status " + std::to_string(static_cast<int>(status)) +
                       (message != nullptr && message[0] != '\0' ? std::string(": ") + message : std::string()));
}

ov_core_t* OpenVinoCore() {
  const OpenVinoApi& api = OpenVino();
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_core == nullptr) {
    ov_core_t* core = nullptr;
    const ov_status_e status = api.core_create(&core);
    if (status != ov_status_e::OK) {
      throw ModelLoadError("OpenVINO could not start (ov_core_create status " +
                           std::to_string(static_cast<int>(status)) + ")");
    }
    g_core = core;
  }
  return g_core;
}

std::string OpenVinoVersion() {
  const OpenVinoApi& api = OpenVino();
  ov_version_t version{};
  CheckOpenVino(api.get_openvino_version(&version), "reading OpenVINO's version");
  std::string text = version.buildNumber != nullptr ? version.buildNumber : "";
  api.version_free(&version);
  return text;
}

std::string OpenVinoCpuCapabilities() {
  const OpenVinoApi& api = OpenVino();
  char* value = nullptr;
  CheckOpenVino(api.core_get_property(OpenVinoCore(), "CPU", "OPTIMIZATION_CAPABILITIES", &value),
                "reading the CPU's OPTIMIZATION_CAPABILITIES");
  std::string text = value != nullptr ? value : "";
  api.free(value);
  return text;
}

}  // namespace ortserve
