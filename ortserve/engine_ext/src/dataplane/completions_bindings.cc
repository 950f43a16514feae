// Python binding of the completion queue (completions.h): answers for the event loop, through an eventfd.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <memory>

#include "completions.h"
#include "dataplane_bindings.h"
#include "py_handles.h"

namespace nb = nanobind;
using namespace nb::literals;
using namespace ortserve;

void BindCompletions(nb::module_& m) {
  nb::class_<PyCompletions>(m, "Completions",
                            "Answers for an event loop: watch `fd` with loop.add_reader, then drain().")
      .def("__init__", [](PyCompletions* self) { new (self) PyCompletions{std::make_shared<Completions>()}; })
      .def_prop_ro("fd", [](const PyCompletions& self) { return self.completions->fd(); })
      .def(
          "drain",
          [](PyCompletions& self) {
            auto done = self.completions->Drain();
            nb::list out;
            for (auto& [token, result] : done) out.append(nb::make_tuple(token, ResultTuple(result)));
            return out;
          },
          "Every answer queued so far: [(token, (code name, message, output float32 [n, columns] | None, "
          "timings))], oldest first.");
}
