// Python bindings for ortserve::Engine: numpy in, numpy out, the GIL released around inference; the engine's
// exception classes and their translation (every room's C++ errors are engine/errors.h's).
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/filesystem.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstring>

#include "cuda_runtime.h"
#include "engine.h"
#include "engine_bindings.h"
#include "errors.h"
#include "openvino_model.h"
#include "openvino_runtime.h"
#include "runtime.h"

namespace nb = nanobind;
using namespace nb::literals;
using ortserve::Engine;
using ortserve::EngineOptions;
using ortserve::InputView;
using ortserve::OutputTensor;
using ortserve::TensorInfo;

namespace {

using CpuArray = nb::ndarray<nb::ro, nb::c_contig, nb::device::cpu>;

// Python exception classes, created at import (they need multiple bases, e.g. InputError is a ValueError).
struct PyErrors {
  nb::object engine_error, model_load_error, input_error, non_finite_output_error, engine_closed_error,
      out_of_memory_error;
};
PyErrors* g_errors = nullptr;  // set once at module import, under the GIL; leaked like the module
nb::module_* g_numpy = nullptr;  // numpy, imported once on first run (leaked for the same reason)

nb::object MakeErrorClass(nb::module_& m, const char* name, nb::tuple bases, const char* doc) {
  nb::dict namespace_;
  namespace_["__module__"] = "ortserve.engine_ext";
  namespace_["__doc__"] = doc;
  nb::object cls = nb::borrow(reinterpret_cast<PyObject*>(&PyType_Type))(name, bases, namespace_);
  m.attr(name) = cls;
  return cls;
}

// numpy's own name for an array's dtype ("object", "<U5"), for types the engine has no name for.
std::string NumpyDtypeName(nb::handle array) {
  nb::object dtype = array.attr("dtype");
  return nb::str(nb::handle(dtype)).c_str();
}

std::string DtypeNameOf(const CpuArray& array) {
  const nb::dlpack::dtype dtype = array.dtype();
  const std::string bits = std::to_string(dtype.bits);
  switch (static_cast<nb::dlpack::dtype_code>(dtype.code)) {
    case nb::dlpack::dtype_code::Int: return "int" + bits;
    case nb::dlpack::dtype_code::UInt: return "uint" + bits;
    case nb::dlpack::dtype_code::Float: return "float" + bits;
    case nb::dlpack::dtype_code::Bool: return "bool";
    default: return "";
  }
}

nb::dlpack::dtype DlpackDtype(const std::string& name) {
  auto make = [](nb::dlpack::dtype_code code, int bits) {
    return nb::dlpack::dtype{static_cast<uint8_t>(code), static_cast<uint8_t>(bits), 1};
  };
  if (name == "bool") return make(nb::dlpack::dtype_code::Bool, 8);
  if (name.rfind("uint", 0) == 0) return make(nb::dlpack::dtype_code::UInt, std::stoi(name.substr(4)));
  if (name.rfind("int", 0) == 0) return make(nb::dlpack::dtype_code::Int, std::stoi(name.substr(3)));
  return make(nb::dlpack::dtype_code::Float, std::stoi(name.substr(5)));  // DtypeName() made the rest
}

// Reads one feed as a C-contiguous, native-order CPU array; copies only arrays that are neither.
InputView ToInputView(const std::string& name, nb::handle value, std::vector<CpuArray>& keep_alive) {
  if (g_numpy == nullptr) g_numpy = new nb::module_(nb::module_::import_("numpy"));
  const nb::module_& numpy = *g_numpy;
  if (!PyObject_TypeCheck(value.ptr(), reinterpret_cast<PyTypeObject*>(numpy.attr("ndarray").ptr()))) {
    throw ortserve::InputError("input '" + name + "' must be a numpy.ndarray, got " +
                               nb::cast<std::string>(nb::type_name(value.type())));
  }
  CpuArray array;
  nb::object object = nb::borrow(value);
  if (!nb::try_cast(object, array, /*convert=*/false)) {
    object = numpy.attr("ascontiguousarray")(object);
    if (!nb::cast<bool>(object.attr("dtype").attr("isnative"))) {
      object = object.attr("astype")(object.attr("dtype").attr("newbyteorder")("="));
    }
    if (!nb::try_cast(object, array, /*convert=*/false)) {
      // Not numeric (object, str, datetime...): report its numpy name; validation rejects it.
      InputView view;
      view.name = name;
      view.dtype = NumpyDtypeName(object);
      for (nb::handle dim : object.attr("shape")) view.shape.push_back(nb::cast<int64_t>(dim));
      return view;
    }
  }
  InputView view;
  view.name = name;
  view.dtype = DtypeNameOf(array);
  if (view.dtype.empty()) view.dtype = NumpyDtypeName(object);
  for (size_t d = 0; d < array.ndim(); ++d) view.shape.push_back(static_cast<int64_t>(array.shape(d)));
  view.data = array.data();
  view.nbytes = array.nbytes();
  keep_alive.push_back(std::move(array));
  return view;
}

nb::object ToNumpy(OutputTensor& output) {
  std::vector<size_t> shape(output.shape.begin(), output.shape.end());
  uint8_t* data = output.data.release();
  nb::capsule owner(data, [](void* p) noexcept { delete[] static_cast<uint8_t*>(p); });
  return nb::ndarray<nb::numpy>(data, shape.size(), shape.data(), owner, nullptr, DlpackDtype(output.dtype))
      .cast();
}

nb::dict Run(const Engine& engine, nb::dict feeds) {
  std::vector<CpuArray> keep_alive;  // holds the arrays while the GIL is released
  std::vector<InputView> views;
  for (auto [key, value] : feeds) {
    if (!nb::isinstance<nb::str>(key)) {
      throw ortserve::InputError("input names must be str, got " +
                                 nb::cast<std::string>(nb::type_name(key.type())));
    }
    views.push_back(ToInputView(nb::cast<std::string>(key), value, keep_alive));
  }
  std::vector<OutputTensor> outputs;
  {
    nb::gil_scoped_release release;
    outputs = engine.Run(views);
  }
  nb::dict result;
  for (OutputTensor& output : outputs) result[output.name.c_str()] = ToNumpy(output);
  return result;
}

std::string InfoRepr(const TensorInfo& info) {
  std::string shape;
  for (int64_t d : info.shape) shape += (shape.empty() ? "" : ", ") + std::to_string(d);
  return "TensorInfo(name='" + info.name + "', dtype='" + info.dtype + "', shape=[" + shape + "])";
}

}  // namespace

void BindEngine(nb::module_& m) {
  // Leaked on purpose: a static would decref these after the interpreter is gone.
  PyErrors& errors = *new PyErrors();
  errors.engine_error = MakeErrorClass(m, "EngineError", nb::make_tuple(nb::handle(PyExc_RuntimeError)),
                                       "Base class of every engine failure.");
  errors.model_load_error = MakeErrorClass(m, "ModelLoadError", nb::make_tuple(errors.engine_error),
                                           "The model file is missing, unreadable or unusable.");
  errors.input_error = MakeErrorClass(m, "InputError",
                                      nb::make_tuple(errors.engine_error, nb::handle(PyExc_ValueError)),
                                      "The feeds do not match the model's inputs.");
  errors.non_finite_output_error = MakeErrorClass(m, "NonFiniteOutputError", nb::make_tuple(errors.engine_error),
                                                  "An output holds NaN or Inf (check_finite=True).");
  errors.engine_closed_error = MakeErrorClass(m, "EngineClosedError", nb::make_tuple(errors.engine_error),
                                              "run() was called after close().");
  errors.out_of_memory_error = MakeErrorClass(
      m, "OutOfMemoryError", nb::make_tuple(errors.engine_error),
      "A run needed more memory than its arena may take, and no CPU fallback answered it.");
  g_errors = &errors;

  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const ortserve::ModelLoadError& e) {
      PyErr_SetString(g_errors->model_load_error.ptr(), e.what());
    } catch (const ortserve::InputError& e) {
      PyErr_SetString(g_errors->input_error.ptr(), e.what());
    } catch (const ortserve::NonFiniteOutputError& e) {
      PyErr_SetString(g_errors->non_finite_output_error.ptr(), e.what());
    } catch (const ortserve::EngineClosedError& e) {
      PyErr_SetString(g_errors->engine_closed_error.ptr(), e.what());
    } catch (const ortserve::OutOfMemoryError& e) {
      PyErr_SetString(g_errors->out_of_memory_error.ptr(), e.what());
    } catch (const ortserve::EngineError& e) {
      PyErr_SetString(g_errors->engine_error.ptr(), e.what());
    } catch (const ortserve::OptionError& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const Ort::Exception& e) {
      PyErr_SetString(g_errors->engine_error.ptr(), e.what());
    }
  });

  m.def("_init", &ortserve::InitRuntime, "library_path"_a,
        "Load libonnxruntime from library_path and bind the engine to it (idempotent).");
  m.def("ort_version", &ortserve::RuntimeVersion, "Version of the loaded ONNX Runtime library.");
  m.def("_set_openvino_library", &ortserve::SetOpenVinoLibrary, "path"_a,
        "Where libopenvino_c is (\"\" where openvino is not installed); loaded by the first bf16 engine.");
  m.def(
      "openvino_cpu_capabilities",
      [] {
        nb::gil_scoped_release release;
        return ortserve::OpenVinoCpuCapabilities();
      },
      "OpenVINO's OPTIMIZATION_CAPABILITIES for the CPU (\"FP32 BF16 INT8 ...\"); loads OpenVINO. Raises "
      "ModelLoadError where it is not installed.");
  m.def("openvino_streams", &ortserve::OpenVinoStreams, "threads"_a, "cores"_a,
        "How many OpenVINO streams a bf16 engine of `threads` threads per run gets on `cores` cores.");
  m.def("bf16_refusal", &ortserve::Bf16Refusal, "capabilities"_a, "compiled"_a,
        "Why a CPU cannot serve bf16 (OpenVINO's capabilities, the compiled model's precision hint), or \"\".");
  m.def("library_path", &ortserve::LibraryPath, "Path of the loaded ONNX Runtime library.");
  m.def(
      "cuda_memory_info",
      [](int device) {
        nb::gil_scoped_release release;
        return ortserve::CudaMemoryInfo(device);
      },
      "device"_a,
      "(free, total) bytes of GPU `device`'s memory (cudaMemGetInfo, whole device). Raises EngineError when no "
      "CUDA runtime can be loaded.");

  nb::class_<TensorInfo>(m, "TensorInfo", "Name, numpy dtype and shape (-1 = dynamic) of a model tensor.")
      .def_ro("name", &TensorInfo::name)
      .def_ro("dtype", &TensorInfo::dtype)
      .def_ro("shape", &TensorInfo::shape)
      .def("__repr__", &InfoRepr);

  static const EngineOptions kDefaults;
  nb::class_<EngineOptions>(m, "EngineOptions",
                            "How a session runs: each field a setting of service/config.Settings under the same name, "
                            "defaulting to its default there (the server builds one from its Settings).")
      .def(
          "__init__",
          [](EngineOptions* self, int intra_op_threads, int inter_op_threads,
             const std::string& graph_optimization_level, const std::string& device, bool allow_spinning,
             bool spin_between_runs, bool check_finite, int gpu_memory_limit_mb,
             const std::string& cudnn_conv_algo_search, bool cuda_graphs, int cpu_arena_limit_mb,
             const std::string& gpu_oom_fallback, double gpu_fallback_cooldown_s, const std::string& precision) {
            new (self) EngineOptions{intra_op_threads,      inter_op_threads,       graph_optimization_level,
                                     device,                allow_spinning,         spin_between_runs,
                                     check_finite,          precision,              gpu_memory_limit_mb,
                                     cudnn_conv_algo_search, cuda_graphs,           cpu_arena_limit_mb,
                                     gpu_oom_fallback,      gpu_fallback_cooldown_s};
          },
          nb::kw_only(), "intra_op_threads"_a = kDefaults.intra_op_threads,
          "inter_op_threads"_a = kDefaults.inter_op_threads,
          "graph_optimization_level"_a = kDefaults.graph_optimization_level, "device"_a = kDefaults.device,
          "allow_spinning"_a = kDefaults.allow_spinning, "spin_between_runs"_a = kDefaults.spin_between_runs,
          "check_finite"_a = kDefaults.check_finite, "gpu_memory_limit_mb"_a = kDefaults.gpu_memory_limit_mb,
          "cudnn_conv_algo_search"_a = kDefaults.cudnn_conv_algo_search, "cuda_graphs"_a = kDefaults.cuda_graphs,
          "cpu_arena_limit_mb"_a = kDefaults.cpu_arena_limit_mb, "gpu_oom_fallback"_a = kDefaults.gpu_oom_fallback,
          "gpu_fallback_cooldown_s"_a = kDefaults.gpu_fallback_cooldown_s, "precision"_a = kDefaults.precision)
      .def_rw("intra_op_threads", &EngineOptions::intra_op_threads)
      .def_rw("inter_op_threads", &EngineOptions::inter_op_threads)
      .def_rw("graph_optimization_level", &EngineOptions::graph_optimization_level)
      .def_rw("device", &EngineOptions::device)
      .def_rw("allow_spinning", &EngineOptions::allow_spinning)
      .def_rw("spin_between_runs", &EngineOptions::spin_between_runs)
      .def_rw("check_finite", &EngineOptions::check_finite)
      .def_rw("gpu_memory_limit_mb", &EngineOptions::gpu_memory_limit_mb)
      .def_rw("cudnn_conv_algo_search", &EngineOptions::cudnn_conv_algo_search)
      .def_rw("cuda_graphs", &EngineOptions::cuda_graphs)
      .def_rw("cpu_arena_limit_mb", &EngineOptions::cpu_arena_limit_mb)
      .def_rw("gpu_oom_fallback", &EngineOptions::gpu_oom_fallback)
      .def_rw("gpu_fallback_cooldown_s", &EngineOptions::gpu_fallback_cooldown_s)
      .def_rw("precision", &EngineOptions::precision)
      .def("__copy__", [](const EngineOptions& self) { return self; });

  nb::class_<Engine>(m, "Engine", "One ONNX Runtime session; run() is thread-safe and releases the GIL.")
      .def(
          "__init__",
          [](Engine* self, const std::filesystem::path& path, std::optional<EngineOptions> options) {
            const EngineOptions chosen = options.value_or(EngineOptions{});
            nb::gil_scoped_release release;  // loading can take seconds; let other threads run
            new (self) Engine(path.string(), chosen);
          },
          // None, not an EngineOptions instance: a default argument object would outlive the module (a leak report).
          "path"_a, "options"_a = nb::none(),
          "One session of the model at `path`, run as `options` say (EngineOptions; its defaults are the "
          "settings').")
      .def_prop_ro("inputs", &Engine::inputs)
      .def_prop_ro("outputs", &Engine::outputs)
      .def_prop_ro("device", &Engine::device)
      .def_prop_ro("runtime", &Engine::runtime)
      .def_prop_ro("path", &Engine::path)
      .def_prop_ro("closed", &Engine::closed)
      .def_prop_ro("cuda_graphs", &Engine::cuda_graphs)
      .def_prop_ro("cuda_graphs_refused", &Engine::cuda_graphs_refused)
      .def_prop_ro("oom_errors", &Engine::oom_errors)
      .def_prop_ro("fallback_runs", &Engine::fallback_runs)
      .def_prop_ro("cooldown_left_s", &Engine::cooldown_left_s)
      .def_prop_ro("has_fallback", &Engine::has_fallback)
      .def(
          "take_fallback_events",
          [](Engine& self) {
            nb::list events;
            for (const ortserve::FallbackEvent& event : self.TakeFallbackEvents()) {
              nb::dict item;
              item["unix_s"] = event.unix_s;
              item["shape"] = nb::cast(event.shape);
              item["reason"] = event.reason;
              item["answered"] = event.answered;
              item["error"] = event.error;
              events.append(item);
            }
            return events;
          },
          "The runs that failed for memory since the last call, oldest first: dicts of unix_s, shape (the first "
          "input's), reason (ORT's error), answered (the CPU session answered it) and error (why not).")
      .def("run", &Run, "feeds"_a, "Run all outputs for feeds {input name: numpy array}.")
      .def("close", &Engine::Close, nb::call_guard<nb::gil_scoped_release>(),
           "Refuse new runs, wait for in-flight ones, release the session. Idempotent.")
      .def("__enter__", [](nb::handle self) { return self; })
      .def("__exit__", [](Engine& self, nb::args) { nb::gil_scoped_release release; self.Close(); })
      .def("__repr__", [](const Engine& self) {
        return "Engine(path='" + self.path() + "', device='" + self.device() + "'" +
               (self.closed() ? ", closed" : "") + ")";
      });
}
