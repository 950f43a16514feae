// Python bindings for the route helpers of route.h, so tests can hold them against service/router.py.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
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
// UnicodeEncodeError, as str.encode() does in router.bucket, instead of nanobind's generic TypeError.
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
      "Canary bucket 0..9999 of a routing key: equal to ortserve.service.router.bucket(model, routing_key).");

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

  m.def(
      "split_pick",
      [](std::vector<std::string> order, std::vector<int> upper, int bucket) -> std::optional<std::string> {
        if (order.size() != upper.size()) {
          throw nb::value_error(("split_pick: order has " + std::to_string(order.size()) + " versions but upper has " +
                                 std::to_string(upper.size()) + " bounds; pass Split.of(...).order and .upper")
                                    .c_str());
        }
        const ortserve::Split split{std::move(order), std::move(upper)};
        const std::string* version = split.Pick(bucket);
        if (version == nullptr) return std::nullopt;
        return *version;
      },
      "order"_a, "upper"_a, "bucket"_a,
      "The version owning bucket in a split (order oldest first, exclusive upper bounds), or None: "
      "equal to ortserve.service.router.Split(order, upper).pick(bucket).");
}
