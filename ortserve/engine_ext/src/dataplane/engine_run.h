// Engine runs: one batch of token-id rows through a version's session, padded by the one padding rule every run
// follows (the batcher's, and ModelInstance.run's for warm-up). No locks, no state: the caller holds nothing while
// a run goes (runs take milliseconds to seconds).
//
//   EngineRun out = RunEngine(model, narrow, rows);   // throws what the engine throws
//   Run run = RunRows(model, narrow, rows);           // the same, timed, its failure caught as a status
//   Run all = RunSplit(model, narrow, rows, policy);  // a lone call's rows in the runs SplitRows allows
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "batch_policy.h"
#include "clock.h"
#include "engine.h"
#include "status.h"
#include "wordpiece.h"

namespace ortserve {

// What one version's batches run on. Borrowed: the owner (Python's TextModel object) keeps them alive
// until the batcher's Close() returned.
struct TextModel {
  const Engine* wide = nullptr;
  const Engine* narrow = nullptr;        // nullptr: one session does everything
  const WordPiece* tokenizer = nullptr;  // nullptr: the version takes token ids only (SubmitIds)
  std::string output = "logits";         // the graph output every call gets, float32 [rows, columns]
  int columns = 0;                       // its width: the labels of a classifier, the dimension of an embedding
  // A label per token (a token classifier): the graph's output is float32 [rows, tokens, token_columns], and each
  // row answers `columns` (max_seq_len x token_columns) values: its tokens' logits first, zeros after. 0: per row.
  int token_columns = 0;
  int64_t pad_id = 0;
  bool token_types = false;  // the graph takes token_type_ids (zeros)
  ShapeBuckets buckets;      // pad each batch up to this ladder (GPU); empty: to its longest text only
};

// One row of a batch: a text's token ids, and for a pair of texts where the second one begins (its tokens, and the
// [SEP] after them, are token type 1); 0: one text (all type 0).
struct Row {
  const std::vector<int64_t>* ids = nullptr;
  int second = 0;
};
using Rows = std::vector<Row>;

// One batch as the engine ran it: the model's output for the rows (float32 [rows, columns], row-major; the
// ladder's extra rows dropped; per token: each row's positions past its own tokens zeroed) and the tokens it was
// padded to and held.
struct EngineRun {
  std::vector<float> outputs;
  int padded_tokens = 0;  // rows x width of the shape the engine ran (BucketShape applied)
  int real_tokens = 0;
};

// The one padding rule: each row padded with pad_id to the longest, then up to the shape ladder; mask 1/0;
// token_type_ids (when the graph takes them) 0, and 1 from a pair's second text on. Throws what the engine throws (EngineError, OutOfMemoryError, ...).
EngineRun RunEngine(const TextModel& model, bool narrow, const Rows& rows);

// One engine run as a batch path sees it: the outputs or the engine's error as a status, and its timing.
struct Run {
  std::vector<float> outputs;
  bool failed = false;
  Code code = Code::kOk;  // the failure's status: RESOURCE_EXHAUSTED when it ran out of memory, else INTERNAL
  std::string error;
  double started = 0, engine_s = 0;  // Seconds() of Clock
  int padded_tokens = 0, real_tokens = 0;
  struct Part {
    int texts, padded_tokens, real_tokens;
    double engine_s;
  };
  std::vector<Part> parts;  // RunSplit: one per engine run, for the batch events
};

// RunEngine timed, its exceptions caught.
Run RunRows(const TextModel& model, bool narrow, const Rows& rows);

// A lone call's rows in the runs SplitRows allows, one after the other, as one Run: the outputs in call order, the
// engine time and tokens summed, each run's counts in `parts`; the first failure fails the whole call.
Run RunSplit(const TextModel& model, bool narrow, const Rows& rows, const BatchPolicy& policy);

}  // namespace ortserve
