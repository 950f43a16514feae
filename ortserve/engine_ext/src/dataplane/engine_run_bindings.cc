// Python binding of what a version's batches run on (engine_run.h): TextModel, and its run() for warm-up and
// tests, padded as the batcher pads every run.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <string>
#include <utility>
#include <vector>

#include "dataplane_bindings.h"
#include "engine.h"
#include "engine_run.h"
#include "py_handles.h"
#include "wordpiece.h"

namespace nb = nanobind;
using namespace nb::literals;
using namespace ortserve;

void BindEngineRun(nb::module_& m) {
  nb::class_<PyTextModel>(m, "TextModel", "What one version's batches run on: sessions, tokenizer, output.")
      .def(
          "__init__",
          [](PyTextModel* self, const Engine& wide, const Engine* narrow, const WordPiece* tokenizer,
             std::string output, int columns, int64_t pad_id, bool token_types, std::vector<int> bucket_rows,
             std::vector<int> bucket_tokens, int token_columns) {
            if (token_columns < 0 || (token_columns > 0 && columns % token_columns != 0)) {
              throw nb::value_error("token_columns must be 0 (a row per text) or divide columns");
            }
            new (self) PyTextModel{TextModel{&wide, narrow, tokenizer, std::move(output), columns, token_columns,
                                             pad_id, token_types,
                                             ShapeBuckets{std::move(bucket_rows), std::move(bucket_tokens)}}};
          },
          nb::kw_only(), "wide"_a, "narrow"_a.none(), "tokenizer"_a.none(), "output"_a, "columns"_a, "pad_id"_a,
          "token_types"_a, "bucket_rows"_a = std::vector<int>{}, "bucket_tokens"_a = std::vector<int>{},
          "token_columns"_a = 0,
          // Argument 1 is self: the sessions and the tokenizer live at least as long as this object.
          nb::keep_alive<1, 2>(), nb::keep_alive<1, 3>(), nb::keep_alive<1, 4>())
      .def(
          "run",
          [](const PyTextModel& self, nb::handle ids, bool narrow, std::vector<int> seconds) {
            const std::vector<std::vector<int64_t>> rows = IdRows(ids);
            if (rows.empty()) throw nb::value_error("run needs at least one row of token ids");
            if (!seconds.empty() && seconds.size() != rows.size()) {
              throw nb::value_error("seconds needs one entry per row (or none)");
            }
            Rows views;
            for (size_t r = 0; r < rows.size(); ++r) {
              if (rows[r].empty()) throw nb::value_error("every row needs at least one token id");
              views.push_back({&rows[r], seconds.empty() ? 0 : seconds[r]});
            }
            auto* out = new std::vector<float>();
            nb::capsule owner(out, [](void* p) noexcept { delete static_cast<std::vector<float>*>(p); });
            {
              nb::gil_scoped_release release;
              *out = RunEngine(self.model, narrow, views).outputs;
            }
            const size_t shape[2] = {rows.size(), static_cast<size_t>(self.model.columns)};
            return nb::ndarray<nb::numpy, float, nb::ndim<2>>(out->data(), 2, shape, owner);
          },
          "ids"_a, "narrow"_a = false, "seconds"_a = std::vector<int>{},
          "One batch through the engine, padded as the batcher pads every run (GIL released): the output float32 "
          "[rows, columns] for token-id rows (int64 arrays; `seconds`: where each pair's second text begins, 0 for "
          "one text). For warm-up and tests.")
      .def_prop_ro("output", [](const PyTextModel& self) { return self.model.output; })
      .def_prop_ro("columns", [](const PyTextModel& self) { return self.model.columns; })
      .def_prop_ro("token_columns", [](const PyTextModel& self) { return self.model.token_columns; },
                   "Labels per token of a token classifier (each row then holds columns / token_columns tokens); 0: "
                   "a row per text.")
      .def_prop_ro("tokenizes", [](const PyTextModel& self) { return self.model.tokenizer != nullptr; },
                   "Whether the batcher tokenizes texts itself (the C++ WordPiece) or takes token ids.");
}
