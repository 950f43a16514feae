// Python bindings for the native front end (Frontend); its route table is the data plane's `Routes`
// (call_path_bindings.cc).
// The only file of the front end that touches Python: everything here runs on the caller's thread.
#include <nanobind/nanobind.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "frontend.h"
#include "py_handles.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace {

std::string Bytes(const std::optional<nb::bytes>& value) {
  return value ? std::string(value->c_str(), value->size()) : std::string();
}

}  // namespace

void BindFrontend(nb::module_& m) {
  nb::class_<ortserve::Frontend>(m, "Frontend",
                                 "grpc++ server on the public port: native ModelInfer, the rest proxied to backend.")
      .def(
          "__init__",
          [](ortserve::Frontend* self, const std::string& address, const std::string& backend, nb::handle events,
             ortserve::PyRoutes& routes, int max_message_bytes, int max_header_bytes, long long max_texts_per_request, std::optional<nb::bytes> tls_cert,
             std::optional<nb::bytes> tls_key, std::optional<nb::bytes> tls_client_ca, std::vector<std::string> api_keys,
             bool probes_open) {
            if (max_message_bytes < 1) throw nb::value_error("max_message_bytes must be >= 1");
            if (max_header_bytes < 1) throw nb::value_error("max_header_bytes must be >= 1");
            if (max_texts_per_request < 1) throw nb::value_error("max_texts_per_request must be >= 1");
            if (tls_cert.has_value() != tls_key.has_value()) {
              throw nb::value_error("tls_cert and tls_key go together: give both or neither");
            }
            if (tls_client_ca && !tls_cert) throw nb::value_error("tls_client_ca needs tls_cert and tls_key");
            ortserve::FrontendOptions options{address, backend, max_message_bytes, max_header_bytes, max_texts_per_request,
                                              Bytes(tls_cert), Bytes(tls_key), Bytes(tls_client_ca), std::move(api_keys),
                                              probes_open};
            new (self) ortserve::Frontend(std::move(options), ortserve::EventSinkPtr(events), routes.holder);
          },
          "address"_a, "backend"_a, nb::kw_only(), "events"_a, "routes"_a, "max_message_bytes"_a, "max_header_bytes"_a, "max_texts_per_request"_a,
          "tls_cert"_a = nb::none(), "tls_key"_a = nb::none(), "tls_client_ca"_a = nb::none(),
          "api_keys"_a = std::vector<std::string>(), "probes_open"_a = true)
      .def("start", &ortserve::Frontend::Start, nb::call_guard<nb::gil_scoped_release>(),
           "Bind and serve; returns the bound port. RuntimeError naming the address when it cannot bind.")
      .def("set_health", &ortserve::Frontend::SetHealth, "service"_a, "serving"_a,
           nb::call_guard<nb::gil_scoped_release>(),
           "Set a grpc.health.v1 status ('' = the server, also ServerReady); ignored after not_serving().")
      .def("not_serving", &ortserve::Frontend::NotServing, nb::call_guard<nb::gil_scoped_release>(),
           "Every health status NOT_SERVING and ServerReady false from now on (a graceful shutdown's start).")
      .def("shutdown", &ortserve::Frontend::Shutdown, "grace_s"_a, nb::call_guard<nb::gil_scoped_release>(),
           "not_serving(), stop accepting, in-flight calls get grace_s, then the rest are cancelled.")
      .def_prop_ro("in_flight", &ortserve::Frontend::in_flight, "Native ModelInfer calls in progress.")
      .def(
          "passthrough",
          [](const ortserve::Frontend& self) {
            nb::dict counts;
            for (const auto& [reason, count] : self.passthrough()) counts[reason.c_str()] = count;
            return counts;
          },
          "ModelInfer calls passed on to the Python server so far, {reason: count} (every reason listed).");

  m.def(
      "native_frontend_defaults",
      [] {
        const ortserve::FrontendOptions options;
        nb::dict defaults;
        defaults["max_message_bytes"] = options.max_message_bytes;
        defaults["max_header_bytes"] = options.max_header_bytes;
        defaults["max_texts_per_request"] = options.max_texts_per_request;
        return defaults;
      },
      "FrontendOptions' own defaults, under service/config.Settings' names: a test holds them equal.");
}
