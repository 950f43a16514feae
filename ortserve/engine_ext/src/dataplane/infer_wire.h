// The wire rules of a KServe V2 ModelInfer call, over plain views of the request: no protobuf here, so that every
// build has them and every front end uses them (the native grpc++ one through infer_codec.h, the Python grpc.aio
// one through the bindings). What a call may carry and what it is told when it may not (the one implementation of
// each message), how its request id and routing key are chosen, what its reply holds.
//
//   Decode(request, max_texts_per_request) -> texts (and pairs), outputs, score mode, raw output | INVALID_ARGUMENT
//   CheckOutputs(call, version)     -> the inputs are what the leased version takes (TEXT_PAIR exactly when it takes
//                                      pairs), the requested outputs what it answers, the prompt one it keeps and
//                                      the dimensions a width it was trained for | INVALID_ARGUMENT
//   PromptedTexts(call, version)    -> the texts the model reads: each after the call's prompt
//   EncodeOutputs(call, version, values[, tokens]) -> the reply's output tensors (a token classifier's entities)
//   RequestId(header), RoutingKey(param, header, id), PushbackMs(retry_after_s)
//   PrepareCall(request, headers)   -> request id, trace context, Decode, routing key: a call's first steps
//
// One header, a file per part: wire_decode.cc (Decode), wire_check.cc (CheckOutputs), wire_encode.cc (EncodeOutputs),
// wire_metadata.cc (request id, routing key, pushback, trace context, PrepareCall), wire_text.cc (UTF-8, repr, the messages'
// quoting: wire_text.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "embedding_types.h"
#include "entities.h"
#include "route.h"
#include "status.h"

namespace ortserve {

constexpr const char* kTextInput = "TEXT";
constexpr const char* kPairInput = "TEXT_PAIR";  // a cross-encoder's queries, read first (DecodedCall)
constexpr const char* kScoreOutput = "SCORE";    // a one-output cross-encoder's activated score, FP32 [N]
constexpr const char* kClassifierOutput = "LOGITS";
constexpr const char* kEmbeddingOutput = "EMBEDDING";
// A token classifier (VersionOutput::per_token) answers ENTITIES BYTES [N] (one JSON array per text) and CHARS_READ
// INT64 [N] (how much of each text it read); TOKEN_LOGITS FP32 [N, T, labels] and TOKEN_OFFSETS INT64 [N, T, 2] (each
// token's span) on request.
constexpr const char* kEntitiesOutput = "ENTITIES";
constexpr const char* kTokenLogitsOutput = "TOKEN_LOGITS";
constexpr const char* kTokenOffsetsOutput = "TOKEN_OFFSETS";
constexpr const char* kCharsReadOutput = "CHARS_READ";
// A sparse embedding model (VersionOutput::sparse) answers each text's kept weights (sparse_entries.h) as three
// outputs: SPARSE_INDICES INT64 [E] (the vocabulary columns, ascending within a text), SPARSE_VALUES FP32 [E] (their
// weights) and SPARSE_COUNTS INT64 [N] (how many of the E entries are each text's, texts in order).
constexpr const char* kSparseIndicesOutput = "SPARSE_INDICES";
constexpr const char* kSparseValuesOutput = "SPARSE_VALUES";
constexpr const char* kSparseCountsOutput = "SPARSE_COUNTS";
constexpr const char* kPriorityParam = "priority";  // "interactive" or "bulk"; absent: by size (bulk_min_texts)
constexpr const char* kAggregationParam = "aggregation";  // how ENTITIES groups tokens (entities.h), default simple
constexpr const char* kClassificationParam = "classification";  // a requested output's top-k
constexpr const char* kScoresParam = "scores";                  // "logits" (default) or "probabilities"
constexpr const char* kRoutingKeyParam = "routing_key";
constexpr const char* kPromptNameParam = "prompt_name";  // one of the version's prompts, put before each text
constexpr const char* kDimensionsParam = "dimensions";   // an embedding's width to truncate to (Matryoshka)
constexpr const char* kEmbeddingTypeParam = "embedding_type";  // float, int8, uint8, binary, ubinary (embedding_types.h)
constexpr const char* kTopKParam = "top_k";          // a sparse embedding's most entries per text (>= 1)
constexpr const char* kThresholdParam = "threshold";  // a sparse embedding's least weight kept (exclusive, >= 0)
constexpr const char* kBinaryDataParam = "binary_data";
// The longest x-request-id a caller may send: it is echoed in the reply's trailers (a gRPC client refuses trailers
// past 16 KiB) and logged.
constexpr size_t kMaxRequestIdBytes = 256;

// One InferParameter of a map: whether the key is there, which of its oneof fields is set, and that value.
struct WireParam {
  // kBigInt: an integer outside int64 and uint64 (JSON's integers have no size), refused by every rule.
  enum class Kind { kNone, kBool, kInt64, kString, kDouble, kUint64, kBigInt };
  bool present = false;
  Kind kind = Kind::kNone;
  bool bool_value = false;
  bool big_int_negative = false;  // kBigInt: below int64's range (else above uint64's)
  int64_t int64_value = 0;
  uint64_t uint64_value = 0;
  double double_value = 0;
  std::string_view string_value;
  const char* KindName() const;  // "bool_param", ..., "no value"
};

struct WireInput {
  std::string_view name, datatype;
  std::vector<int64_t> shape;
  bool has_contents = false;  // the contents message is set (whatever it holds)
  std::vector<std::string_view> bytes_contents;
};

struct WireOutput {
  std::string_view name;
  WireParam classification, binary_data;
};

// The parts of a ModelInferRequest the rules read; the views point into the caller's request.
struct WireRequest {
  std::vector<WireInput> inputs;
  std::vector<WireOutput> outputs;
  std::vector<std::string_view> raw_input_contents;
  WireParam scores, routing_key, aggregation, priority, prompt_name, dimensions, embedding_type, top_k, threshold;
};

struct RequestedOutput {
  std::string_view name;
  int64_t classes = 0;  // k of the classification extension; 0: the output tensor itself
};

// A call the rules accept; views into the request.
// Rows in the order the model reads them: without TEXT_PAIR, `texts` is TEXT and `pairs` empty; with it (a
// cross-encoder), row i is the pair (TEXT_PAIR[i] or its one element, TEXT[i]): the query first, as cross-encoders
// are trained, so `texts` holds the queries and `pairs` TEXT's elements (one row, one answer, per element of TEXT).
struct DecodedCall {
  std::vector<std::string_view> texts;   // TEXT, or each row's query (TEXT_PAIR, a [1] input repeated)
  std::vector<std::string_view> pairs;   // with TEXT_PAIR: TEXT's elements, each row's second text; else empty
  std::vector<RequestedOutput> outputs;  // as requested; empty: the version's output tensor
  bool probabilities = false;            // scores = "probabilities"
  bool raw_output = true;                // binary_data: the first requested output with a bool decides
  std::string_view routing_key;          // the routing_key parameter; "" when absent
  std::optional<Aggregation> aggregation;  // the aggregation parameter; nullopt when absent (simple)
  std::optional<bool> bulk;                // the priority parameter: true for "bulk"; nullopt when absent
  std::optional<std::string_view> prompt_name;  // the prompt_name parameter; nullopt when absent
  int64_t dimensions = 0;                       // the dimensions parameter (>= 1); 0 when absent: the full width
  EmbeddingType embedding_type = EmbeddingType::kFloat;  // the embedding_type parameter; float when absent
  int64_t top_k = 0;         // the top_k parameter (>= 1); 0 when absent: every weight above the threshold
  double threshold = 0;      // the threshold parameter (finite, >= 0); 0 when absent: every non-zero weight
  bool sparse_bound = false;  // top_k or threshold was sent (CheckOutputs: a sparse embedding model's only)
};

struct WireError {
  Code code = Code::kInvalidArgument;
  std::string message;
  bool too_many_texts = false;  // past max_texts_per_request: HTTP answers it 413 (Payload Too Large), gRPC as any
};

// The call's texts and outputs, or the first rule it breaks, with the message a caller can act on:
// one input TEXT, BYTES, shape [N] or [N, 1], 1 <= N <= max_texts_per_request, N strict UTF-8 elements in contents.bytes_contents
// or in its raw_input_contents entry (each a 4-byte little-endian length, then the bytes); at most one more input,
// TEXT_PAIR, by the same rules with N or 1 elements (raw: one raw_input_contents entry per input); each output name
// once, a classification parameter an integer >= 1; scores "logits" or "probabilities", with a classification
// output; routing_key a string; aggregation a string naming one of entities.h's strategies; priority "interactive"
// or "bulk"; prompt_name a string; dimensions an integer >= 1; embedding_type a string naming one of
// embedding_types.h's types; top_k an integer >= 1; threshold a finite number >= 0.
std::variant<DecodedCall, WireError> Decode(const WireRequest& request, long long max_texts_per_request);

// What a loaded version takes and answers (route.h VersionOutput): TEXT_PAIR exactly when it takes pairs; every
// requested output is one it answers (its output, a reranker's LOGITS beside SCORE, a token classifier's
// TOKEN_LOGITS and CHARS_READ beside ENTITIES), classification only on a classifier's LOGITS, aggregation only for a
// token classifier; prompt_name one of the version's prompts (the message lists them); dimensions only for an
// embedding model, one of its widths (its own, or one it was trained to be truncated to: the message lists them);
// embedding_type other than float only for an embedding model, int8 and uint8 only at a width whose ranges its
// manifest recorded (VersionOutput::ranges); top_k and threshold only for a sparse embedding model (which refuses
// dimensions and every embedding_type but float: its width is its vocabulary).
// `model` names the model in the message.
std::optional<WireError> CheckOutputs(const DecodedCall& call, const VersionOutput& version, std::string_view model);

// The texts the model reads for a call that passed CheckOutputs: each after the call's prompt (the prompt's text,
// then the text, as sentence-transformers' encode(prompt_name=) puts it); empty when the call names no prompt (the
// model reads `call.texts` as sent).
std::vector<std::string> PromptedTexts(const DecodedCall& call, const VersionOutput& version);

// One output tensor of the reply: raw (little-endian numbers, or length-prefixed strings) for raw_output_contents,
// else its contents (fp32, int64 or bytes).
struct ReplyTensor {
  std::string name, datatype;  // "FP32", "INT64", "INT8", "UINT8" or "BYTES"
  std::vector<int64_t> shape;
  bool raw = true;
  std::string raw_bytes;
  std::vector<float> fp32;
  std::vector<int64_t> int64;  // INT64, and INT8 / UINT8 (V2's int_contents / uint_contents)
  std::vector<std::string> bytes;
};

// The reply's outputs for a call that passed CheckOutputs: the version's output FP32 [rows, columns] when none
// was requested, else each requested one, a classification one as BYTES [rows, min(k, labels)] of
// "score:index:label" (classification.h; probabilities a sigmoid per label for a multi_label version), SCORE as
// FP32 [rows] of the one column through the version's score activation. `values` is row-major rows x columns.
// With dimensions k < columns (an embedding model's), each row is its first k values renormalised to unit L2
// length (as sentence-transformers' truncate_dim with normalize_embeddings, and OpenAI's dimensions): [rows, k].
// With embedding_type other than float, EMBEDDING is those values quantized (embedding_types.h, the ranges of the
// width answered): INT8 or UINT8 [rows, k], or [rows, ceil(k / 8)] of packed bits.
// A token classifier (`tokens` required): each row of `values` holds its tokens' logits (labels floats each) from
// its start; ENTITIES BYTES [rows] of JSON arrays of {"label", "score", "start", "end", "text"} (and "index", the
// token's position, with aggregation none), grouped by the call's aggregation (entities.h; "O" left out), offsets
// in code points of the caller's text; CHARS_READ INT64 [rows]; TOKEN_LOGITS FP32 [rows, T, labels], T the call's
// most tokens, zeros past a text's own; TOKEN_OFFSETS INT64 [rows, T, 2], each token's start and end (a special
// token's (0, 0)), -1 past a text's own. None requested: ENTITIES and CHARS_READ.
// A sparse embedding model: each row's entries by SparseEntries (sparse_entries.h) with the call's top_k and
// threshold, as SPARSE_INDICES, SPARSE_VALUES and SPARSE_COUNTS (each requested one, else all three, in that order).
std::vector<ReplyTensor> EncodeOutputs(const DecodedCall& call, const VersionOutput& version, const float* values,
                                        int rows, int columns, const TokenRows* tokens = nullptr);

// The caller's x-request-id when it fits (1..kMaxRequestIdBytes bytes), else a fresh 32-hex-digit id; `error` when
// the caller's is too long (the call is refused, answered under the fresh id).
struct RequestIdChoice {
  std::string id;
  std::optional<WireError> error;
};
RequestIdChoice ChooseRequestId(std::string_view header);
std::string NewRequestId();

// The key the canary bucket hashes: the routing_key parameter, else the x-routing-key header, else the request id
// (then a caller is not sticky).
std::string_view ChooseRoutingKey(std::string_view param, std::string_view header, std::string_view request_id);

// The grpc-retry-pushback-ms a refusal carries: the queued work's drain time in ms, half to even, at least 1.
long long PushbackMs(double retry_after_s);

// A caller's trace context, from its W3C `traceparent` (and `tracestate`), else its B3 headers (the single `b3`,
// else `x-b3-traceid`, `x-b3-spanid`, `x-b3-sampled`, `x-b3-flags`), as a mesh (Istio, Envoy) propagates them.
// Invalid or absent: trace_id "" (the call starts a trace of its own).
struct TraceHeaders {
  std::string_view traceparent, tracestate, b3, b3_trace_id, b3_span_id, b3_sampled, b3_flags;
};
struct TraceContext {
  std::string trace_id;        // 32 lowercase hex digits (a 64-bit B3 id left-padded with zeros); "" when none
  std::string parent_span_id;  // 16 lowercase hex digits: the caller's span; "" when it sent none
  int sampled = -1;            // the caller's decision: 1 yes, 0 no, -1 none (the server's ratio decides)
  std::string tracestate;      // passed on with a valid traceparent only
};
TraceContext ParseTraceContext(const TraceHeaders& headers);

// The headers a ModelInfer's first steps read (lower-case names, "" when absent).
struct CallHeaders {
  std::string_view request_id, routing_key;  // x-request-id, x-routing-key
  TraceHeaders trace;
};

// The first steps of every ModelInfer, in one order whichever front end received it: its request id, its caller's
// trace context, the call by the wire rules and its canary key. `call` holds the refusal when the caller's id is too
// long (checked first) or a rule is broken; the id is chosen even then, so that the refusal goes back under it.
struct PreparedCall {
  std::string request_id;
  TraceContext trace;
  std::variant<DecodedCall, WireError> call;  // views into the request, as Decode's
  std::string routing_key;  // the parameter, else the header, else the request id; "" for a refused call
};
PreparedCall PrepareCall(const WireRequest& request, const CallHeaders& headers, long long max_texts_per_request);

// Strict UTF-8 as Python's bytes.decode("utf-8"): no overlongs, no surrogates, nothing past U+10FFFF. On failure,
// `reason` and `at` say what Python's UnicodeDecodeError says.
bool IsValidUtf8(std::string_view bytes, const char** reason = nullptr, size_t* at = nullptr);

// Python's repr() of a str, for names quoted in messages (printable non-ASCII kept as is, C0/C1 controls escaped).
std::string PyRepr(std::string_view text);

}  // namespace ortserve
