// Python str sequences as UTF-8 views, for bindings that hand texts to C++ with the GIL released.
#pragma once

#include <nanobind/nanobind.h>

#include <string>
#include <string_view>
#include <vector>

namespace ortserve {

// UTF-8 views into the str objects of `texts` (CPython caches their UTF-8), valid while `keep` holds them.
// TypeError for a bare str or a non-str element; the str's own error for one that has no UTF-8 (a lone surrogate).
inline std::vector<std::string_view> TextViews(nanobind::handle texts, std::vector<nanobind::object>& keep) {
  namespace nb = nanobind;
  if (PyUnicode_Check(texts.ptr())) throw nb::type_error("texts must be a sequence of str, not a str");
  std::vector<std::string_view> views;
  for (nb::handle text : texts) {
    if (!PyUnicode_Check(text.ptr())) {
      throw nb::type_error(("texts must hold str, got " + nb::cast<std::string>(nb::type_name(text.type()))).c_str());
    }
    Py_ssize_t size = 0;
    const char* data = PyUnicode_AsUTF8AndSize(text.ptr(), &size);
    if (data == nullptr) throw nb::python_error();
    keep.push_back(nb::borrow(text));
    views.emplace_back(data, static_cast<size_t>(size));
  }
  return views;
}

}  // namespace ortserve
