// Python binding of the lane threads (lanes.h): one Lanes per server, shared by every version.
#include <nanobind/nanobind.h>

#include <memory>

#include "dataplane_bindings.h"
#include "py_handles.h"

namespace nb = nanobind;
using namespace nb::literals;
using namespace ortserve;

void BindLanes(nb::module_& m) {
  nb::class_<PyLanes>(m, "Lanes", "Lane threads shared by every version, plus wide-run threads.")
      .def(
          "__init__",
          [](PyLanes* self, int lanes, int wide_threads) {
            new (self) PyLanes{std::make_shared<Lanes>(lanes, wide_threads)};
          },
          "lanes"_a, "wide_threads"_a)
      .def_prop_ro("lanes", [](const PyLanes& self) { return self.lanes->lanes(); })
      .def("stop", [](PyLanes& self) { self.lanes->Stop(); }, nb::call_guard<nb::gil_scoped_release>(),
           "Runs what is queued, then joins the threads.")
      .def("pause", [](PyLanes& self) { self.lanes->Pause(); },
           "No thread starts a new task until resume() (tests: hold the engine busy deterministically).")
      .def("resume", [](PyLanes& self) { self.lanes->Resume(); });
}
