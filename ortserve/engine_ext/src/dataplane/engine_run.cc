// Engine runs (see engine_run.h).
#include "engine_run.h"

#include <algorithm>
#include <exception>
#include <utility>

#include "errors.h"

namespace ortserve {

namespace {

std::string ShapeText(const std::vector<int64_t>& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

}  // namespace

// A ladder's extra rows attend to their first token, so that no row is all padding; their output is dropped.
EngineRun RunEngine(const TextModel& model, bool narrow, const Rows& rows) {
  const size_t n = rows.size();
  size_t longest = 0, real = 0;
  for (const Row& row : rows) {
    longest = std::max(longest, row.ids->size());
    real += row.ids->size();
  }
  const auto [bucket_rows, bucket_width] = BucketShape(static_cast<int>(n), static_cast<int>(longest), model.buckets);
  const size_t padded_rows = static_cast<size_t>(bucket_rows), width = static_cast<size_t>(bucket_width);
  std::vector<int64_t> input_ids(padded_rows * width, model.pad_id);
  std::vector<int64_t> mask(padded_rows * width, 0);
  for (size_t r = 0; r < padded_rows; ++r) {
    const auto row = static_cast<std::ptrdiff_t>(r * width);
    if (r < n) {
      std::copy(rows[r].ids->begin(), rows[r].ids->end(), input_ids.begin() + row);
      std::fill_n(mask.begin() + row, rows[r].ids->size(), int64_t{1});
    } else {
      mask[static_cast<size_t>(row)] = 1;
    }
  }
  const std::vector<int64_t> shape{static_cast<int64_t>(padded_rows), static_cast<int64_t>(width)};
  const size_t nbytes = padded_rows * width * sizeof(int64_t);
  std::vector<InputView> feeds{{"input_ids", "int64", shape, input_ids.data(), nbytes},
                               {"attention_mask", "int64", shape, mask.data(), nbytes}};
  std::vector<int64_t> token_types;
  if (model.token_types) {
    token_types.assign(padded_rows * width, 0);
    for (size_t r = 0; r < n; ++r) {
      const size_t size = rows[r].ids->size(), second = static_cast<size_t>(std::max(rows[r].second, 0));
      if (second > 0 && second < size) {
        std::fill(token_types.begin() + static_cast<std::ptrdiff_t>(r * width + second),
                  token_types.begin() + static_cast<std::ptrdiff_t>(r * width + size), int64_t{1});
      }
    }
    feeds.push_back({"token_type_ids", "int64", shape, token_types.data(), nbytes});
  }
  const Engine& engine = narrow && model.narrow != nullptr ? *model.narrow : *model.wide;
  std::vector<OutputTensor> outputs = engine.Run(feeds);
  for (OutputTensor& output : outputs) {
    if (output.name != model.output) continue;
    const bool per_token = model.token_columns > 0;
    const std::vector<int64_t> expected =
        per_token ? std::vector<int64_t>{static_cast<int64_t>(padded_rows), static_cast<int64_t>(width),
                                         model.token_columns}
                  : std::vector<int64_t>{static_cast<int64_t>(padded_rows), model.columns};
    if (output.shape != expected) {
      throw EngineError("model returned '" + model.output + "' of shape " + ShapeText(output.shape) + ", expected " +
                        ShapeText(expected) + (per_token ? " (a row per token)" : " (one row per text)"));
    }
    if (output.dtype != "float32") {
      throw EngineError("model returned '" + model.output + "' of dtype " + output.dtype + ", expected float32");
    }
    const auto* data = reinterpret_cast<const float*>(output.data.get());
    EngineRun run;
    if (per_token) {
      const size_t row_values = width * static_cast<size_t>(model.token_columns);
      if (row_values > static_cast<size_t>(model.columns)) {
        throw EngineError("a batch " + std::to_string(width) + " tokens wide does not fit a row of " +
                          std::to_string(model.columns) + " values");
      }
      run.outputs.assign(n * static_cast<size_t>(model.columns), 0.0f);
      for (size_t r = 0; r < n; ++r) {  // each row's own tokens; the padding's positions stay zero
        std::copy_n(data + r * row_values, rows[r].ids->size() * static_cast<size_t>(model.token_columns),
                    run.outputs.begin() + static_cast<std::ptrdiff_t>(r * static_cast<size_t>(model.columns)));
      }
    } else {
      run.outputs.assign(data, data + n * static_cast<size_t>(model.columns));  // the ladder's rows dropped
    }
    run.padded_tokens = bucket_rows * bucket_width;
    run.real_tokens = static_cast<int>(real);
    return run;
  }
  throw EngineError("model has no '" + model.output + "' output");
}

Run RunRows(const TextModel& model, bool narrow, const Rows& rows) {
  Run run;
  run.started = NowS();
  try {
    EngineRun out = RunEngine(model, narrow, rows);
    run.outputs = std::move(out.outputs);
    run.padded_tokens = out.padded_tokens;
    run.real_tokens = out.real_tokens;
  } catch (const OutOfMemoryError& e) {
    run.failed = true;
    run.code = Code::kResourceExhausted;
    run.error = e.what();
  } catch (const std::exception& e) {
    run.failed = true;
    run.code = Code::kInternal;
    run.error = e.what();
  }
  run.engine_s = NowS() - run.started;
  return run;
}

Run RunSplit(const TextModel& model, bool narrow, const Rows& rows, const BatchPolicy& policy) {
  std::vector<int> lengths;
  lengths.reserve(rows.size());
  for (const Row& row : rows) lengths.push_back(static_cast<int>(row.ids->size()));
  Run total;
  total.started = NowS();
  for (const auto& [begin, end] : SplitRows(lengths, policy)) {
    const Rows part(rows.begin() + static_cast<std::ptrdiff_t>(begin), rows.begin() + static_cast<std::ptrdiff_t>(end));
    Run run = RunRows(model, narrow, part);
    total.parts.push_back({static_cast<int>(part.size()), run.padded_tokens, run.real_tokens, run.engine_s});
    total.engine_s += run.engine_s;
    total.padded_tokens += run.padded_tokens;
    total.real_tokens += run.real_tokens;
    if (run.failed) {
      total.failed = true;
      total.code = run.code;
      total.error = std::move(run.error);
      return total;
    }
    if (total.outputs.empty()) {
      total.outputs = std::move(run.outputs);
    } else {
      total.outputs.insert(total.outputs.end(), run.outputs.begin(), run.outputs.end());
    }
  }
  return total;
}

}  // namespace ortserve
