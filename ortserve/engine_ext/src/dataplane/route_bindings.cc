// Python bindings of route.h: the bucket and the split the manager routes the Python front end's calls with (the
// native front end uses the same code in C++).
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "route.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace {

// The str's UTF-8, cached by CPython inside the object (valid while it lives). A lone surrogate raises
// UnicodeEncodeError, as str.encode() does, instead of nanobind's generic TypeError.
std::string_view Utf8(const nb::str& text) {
  Py_ssize_t size = 0;
  const char* data = PyUnicode_AsUTF8AndSize(text.ptr(), &size);
  if (data == nullptr) throw nb::python_error();
  return {data, static_cast<size_t>(size)};
}

}  // namespace

void BindRoute(nb::module_& m) {
  m.attr("ROUTE_BUCKETS") = ortserve::kBuckets;

  m.def(
      "route_bucket",
      [](nb::str model, nb::str routing_key) { return ortserve::Bucket(Utf8(model), Utf8(routing_key)); },
      "model"_a, "routing_key"_a,
      "Canary bucket 0..9999 of a routing key: BLAKE2b (8-byte digest) of 'model NUL routing_key', big-endian, "
      "mod 10000; the same in every process and after restarts.");

  m.def(
      "blake2b_digest",
      [](nb::bytes data, long long digest_size) {
        if (digest_size < 1) {
          const std::string message = "blake2b digest size must be 1..64 bytes, got " + std::to_string(digest_size);
          throw nb::value_error(message.c_str());
        }
        const std::vector<uint8_t> digest =
            ortserve::Blake2b(std::string_view(data.c_str(), data.size()), static_cast<size_t>(digest_size));
        return nb::bytes(reinterpret_cast<const char*>(digest.data()), digest.size());
      },
      "data"_a, "digest_size"_a,
      "Unkeyed BLAKE2b of data with a digest_size-byte (1..64) digest, as hashlib.blake2b(data, "
      "digest_size=...).digest().");

  nb::class_<ortserve::Split>(m, "Split", "Weights laid out over the buckets (route.h): oldest version lowest.")
      .def_static(
          "of",
          [](std::vector<std::pair<std::string, int>> weighted) { return ortserve::Split::Of(weighted); },
          "weighted"_a, "[(version, percent)] oldest first; zero weights own no bucket.")
      .def(
          "pick",
          [](const ortserve::Split& self, int bucket) -> std::optional<std::string> {
            const std::string* version = self.Pick(bucket);
            if (version == nullptr) return std::nullopt;
            return *version;
          },
          "bucket"_a, "The version owning bucket, or None.")
      .def_ro("order", &ortserve::Split::order, "Versions with weight, oldest first.")
      .def_ro("upper", &ortserve::Split::upper, "Exclusive upper bucket of each.")
      .def("__eq__", [](const ortserve::Split& a, const ortserve::Split& b) {
        return a.order == b.order && a.upper == b.upper;
      })
      .def("__repr__", [](const ortserve::Split& self) {
        std::string out = "Split(";
        for (size_t i = 0; i < self.order.size(); ++i) {
          out += (i ? ", " : "") + self.order[i] + "<" + std::to_string(self.upper[i]);
        }
        return out + ")";
      });
}
