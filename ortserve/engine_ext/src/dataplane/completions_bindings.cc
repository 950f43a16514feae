// Python binding of the completion queue (completions.h): answers for the event loop, through an eventfd.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <memory>

#include "completions.h"
#include "dataplane_bindings.h"
#include "py_handles.h"
#include "py_wire.h"

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
            for (Completion& answer : done) {
              if (!answer.reply) {
                out.append(nb::make_tuple(answer.token, ResultTuple(answer.result)));
                continue;
              }
              // A started call's: its reply's tensors in the output's place.
              const InferResult& result = answer.result;
              nb::object tensors = result.code == Code::kOk ? nb::object(ReplyTensors(*answer.reply)) : nb::none();
              out.append(nb::make_tuple(answer.token, nb::make_tuple(CodeName(result.code), result.message, tensors,
                                                                     Timings(result))));
            }
            return out;
          },
          "Every answer queued so far: [(token, (code name, message, output float32 [n, columns] | None, "
          "timings))], oldest first; a start_call's has the reply's tensors (encode_outputs') as its output.");
}
