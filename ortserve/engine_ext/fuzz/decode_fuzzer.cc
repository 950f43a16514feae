// Fuzz target: the wire rules (infer_wire.h, through infer_codec.h's protobuf views) on arbitrary bytes, as a
// ModelInfer body arrives.
// Built by scripts/fuzz_native: with libFuzzer (clang, coverage-guided) or with replay_main.cc (any compiler: runs
// the seed corpus once, under ASan/UBSan in the sanitizer job).
//
// Each input is read two ways: as a serialised ModelInferRequest (what arrives on the wire; most mutations break the
// protobuf framing, so this mostly explores the parser's edges), and as a recipe for a request built here (Built
// below: a few bytes choose the shape, huge counts included, the encoding, element lengths, a length prefix nudged
// by a small delta, truncation, outputs and parameters), which keeps the framing valid and puts the mutations where
// the decoder decides.
//
// Besides "no crash, no sanitizer report", it checks what the decoder promises, against independent code here and in
// decode_reference.h:
// - PrepareCall (the request's own id, version and name standing in for headers) keeps the caller's id when it
//   fits, else gives a fresh one and, past the limit, refuses; the routing key is the parameter, else the header,
//   else the id;
// - IsValidUtf8 equals a decode-then-range-check UTF-8 validator on the raw input bytes;
// - a decoded request has one input TEXT, BYTES, shape [N] or [N, 1] with 1 <= N <= max_texts_per_request, exactly N texts,
//   each valid UTF-8 and a view into the request (its bytes_contents, or its raw buffer split the same way by
//   the reference splitter below), and at most one more, TEXT_PAIR, by the same rules with N or 1 elements, read
//   query first: then `texts` are TEXT_PAIR's N views (the one element repeated for [1]) and `pairs` TEXT's; as
//   many outputs as requested, each with classes >= 0; a
//   refused one a message;
// - EncodeOutputs on a request whose outputs pass CheckOutputs writes outputs of the promised shapes and sizes (a
//   reranker's SCORE [rows]; a token classifier's ENTITIES [rows] of JSON arrays, CHARS_READ [rows], TOKEN_LOGITS
//   [rows, T, labels], TOKEN_OFFSETS [rows, T, 2], for token rows of any spans, in range or not).
#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <google/protobuf/stubs/logging.h>

#include "decode_reference.h"
#include "grpc_service.pb.h"
#include "infer_codec.h"
#include "infer_wire.h"
#include "route.h"

namespace {

using decode_reference::ReferenceSplit;
using decode_reference::ReferenceUtf8;

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "decode_fuzzer: check failed: %s\n", what);
    std::abort();
  }
}

bool Inside(std::string_view part, const std::string& whole) {
  return part.data() >= whole.data() && part.data() + part.size() <= whole.data() + whole.size();
}

// The elements of input `index` as the reference reads them (its bytes_contents or its raw buffer), after checking
// what a decoded input must be.
std::vector<std::string_view> ReferenceElements(const inference::ModelInferRequest& request, int index,
                                                long long max_texts_per_request) {
  const auto& tensor = request.inputs(index);
  Check(tensor.datatype() == "BYTES", "decoded an input that is not BYTES");
  const auto& shape = tensor.shape();
  Check(shape.size() == 1 || (shape.size() == 2 && shape[1] == 1), "decoded a shape other than [N] or [N, 1]");
  Check(shape[0] >= 1 && shape[0] <= max_texts_per_request, "decoded a count outside 1..max_texts_per_request");
  std::vector<std::string_view> expected;
  if (request.raw_input_contents_size() > 0) {
    Check(request.raw_input_contents_size() == request.inputs_size() && !tensor.has_contents(),
          "decoded raw next to other contents");
    Check(ReferenceSplit(request.raw_input_contents(index), expected), "decoded a raw buffer the reference refuses");
    for (std::string_view e : expected) {
      Check(Inside(e, request.raw_input_contents(index)), "an element points outside the raw buffer");
    }
  } else {
    for (const std::string& element : tensor.contents().bytes_contents()) expected.emplace_back(element);
  }
  Check(static_cast<int64_t>(expected.size()) == shape[0], "elements disagree with the shape");
  return expected;
}

bool SameViews(const std::vector<std::string_view>& a, const std::vector<std::string_view>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].data() != b[i].data() || a[i].size() != b[i].size()) return false;
  }
  return true;
}

void CheckDecoded(const inference::ModelInferRequest& request, const ortserve::DecodedCall& decoded,
                  long long max_texts_per_request) {
  int text = -1, pair = -1;
  for (int i = 0; i < request.inputs_size(); ++i) {
    const std::string& name = request.inputs(i).name();
    Check(name == "TEXT" || name == "TEXT_PAIR", "decoded an input other than TEXT and TEXT_PAIR");
    int& slot = name == "TEXT" ? text : pair;
    Check(slot < 0, "decoded an input sent twice");
    slot = i;
  }
  Check(text >= 0, "decoded a request without TEXT");
  const std::vector<std::string_view> elements = ReferenceElements(request, text, max_texts_per_request);
  if (pair < 0) {
    Check(SameViews(elements, decoded.texts), "texts are not TEXT's elements");
    Check(decoded.pairs.empty(), "pairs from nowhere");
  } else {
    // A pair is read query first: (TEXT_PAIR, TEXT), one row per element of TEXT.
    Check(SameViews(elements, decoded.pairs), "second texts are not TEXT's elements");
    const std::vector<std::string_view> queries = ReferenceElements(request, pair, max_texts_per_request);
    Check(queries.size() == 1 || queries.size() == elements.size(), "decoded TEXT_PAIR of another count");
    std::vector<std::string_view> expected = queries;
    if (queries.size() == 1) expected.assign(elements.size(), queries[0]);
    Check(SameViews(expected, decoded.texts), "queries are not TEXT_PAIR's elements");
  }
  for (std::string_view t : decoded.texts) Check(ReferenceUtf8(t), "decoded a text that is not UTF-8");
  for (std::string_view t : decoded.pairs) Check(ReferenceUtf8(t), "decoded a second text that is not UTF-8");
  Check(static_cast<int>(decoded.outputs.size()) == request.outputs_size(), "outputs lost or invented");
  for (const auto& out : decoded.outputs) Check(out.classes >= 0, "negative classes");
}

// Floats from the input's bytes, NaN and infinities included.
std::vector<float> FuzzedValues(size_t count, const uint8_t* data, size_t size) {
  std::vector<float> values(count);
  for (size_t i = 0; i < values.size(); ++i) {
    uint32_t bits = 0x3f800000u + static_cast<uint32_t>(i);
    if (size >= 4) std::memcpy(&bits, data + (i * 4) % (size - 3), 4);
    std::memcpy(&values[i], &bits, 4);
  }
  return values;
}

// A JSON array of objects, as far as the encoder's output goes: balanced brackets and braces outside strings, every
// string closed, no raw control character in one.
bool LooksLikeJsonArray(std::string_view json) {
  if (json.size() < 2 || json.front() != '[' || json.back() != ']') return false;
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < json.size(); ++i) {
    const char c = json[i];
    if (in_string) {
      if (static_cast<unsigned char>(c) < 0x20) return false;
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      ++depth;
    } else if (c == ']' || c == '}') {
      if (--depth < 0) return false;
    } else if (std::isalpha(static_cast<unsigned char>(c))) {  // outside strings: null, or a number's exponent
      const bool exponent = (c == 'e') && i > 0 && std::isdigit(static_cast<unsigned char>(json[i - 1]));
      if (!exponent && json.substr(i, 4) != "null") return false;  // nan, inf: not JSON
      if (!exponent) i += 3;
    }
  }
  return depth == 0 && !in_string;
}

// A token classifier's reply: token rows of any length up to a row's width, spans from the input's bytes.
void CheckEncodeTokens(const ortserve::DecodedCall& decoded, const ortserve::VersionOutput& served,
                       const uint8_t* data, size_t size) {
  const int rows = static_cast<int>(decoded.texts.size());
  const size_t labels = served.labels.size(), positions = 6;
  const int columns = static_cast<int>(positions * labels);
  const std::vector<float> values = FuzzedValues(static_cast<size_t>(rows) * columns, data, size);
  ortserve::TokenRows tokens;
  for (int r = 0; r < rows; ++r) {
    const uint8_t b = size ? data[static_cast<size_t>(r) % size] : 0;
    auto& spans = tokens.spans.emplace_back();
    for (size_t t = 0; t < b % (positions + 1); ++t) {
      const uint8_t s = size ? data[(static_cast<size_t>(r) * 7 + t) % size] : 0;
      spans.push_back({static_cast<int64_t>(s % 40) - 4, static_cast<int64_t>(s % 40) + (s >> 6) - 2,
                       (s & 0x10) != 0, (s & 0x20) != 0});
    }
    tokens.chars_read.push_back(static_cast<int64_t>(b));
  }
  const bool raw = decoded.raw_output;
  inference::ModelInferResponse response;
  ortserve::WriteOutputs(response, ortserve::EncodeOutputs(decoded, served, values.data(), rows, columns, &tokens));
  const size_t wanted = decoded.outputs.empty() ? 2 : decoded.outputs.size();
  Check(static_cast<size_t>(response.outputs_size()) == wanted, "EncodeOutputs wrote another number of outputs");
  for (int o = 0; o < response.outputs_size(); ++o) {
    const auto& out = response.outputs(o);
    if (out.name() == ortserve::kEntitiesOutput) {
      Check(out.datatype() == "BYTES" && out.shape_size() == 1 && out.shape(0) == rows, "ENTITIES is not BYTES [rows]");
      std::vector<std::string_view> elements;
      if (raw) {
        Check(ReferenceSplit(response.raw_output_contents(o), elements), "raw ENTITIES do not split");
      } else {
        for (const std::string& e : out.contents().bytes_contents()) elements.emplace_back(e);
      }
      Check(elements.size() == static_cast<size_t>(rows), "ENTITIES size");
      for (std::string_view e : elements) Check(LooksLikeJsonArray(e), "an ENTITIES element is not a JSON array");
    } else if (out.name() == ortserve::kTokenOffsetsOutput) {
      Check(out.datatype() == "INT64" && out.shape_size() == 3 && out.shape(0) == rows && out.shape(2) == 2,
            "TOKEN_OFFSETS is not INT64 [rows, T, 2]");
      const size_t count = static_cast<size_t>(rows) * static_cast<size_t>(out.shape(1)) * 2;
      Check(raw ? response.raw_output_contents(o).size() == 8 * count
                : static_cast<size_t>(out.contents().int64_contents_size()) == count,
            "TOKEN_OFFSETS size");
    } else if (out.name() == ortserve::kCharsReadOutput) {
      Check(out.datatype() == "INT64" && out.shape_size() == 1 && out.shape(0) == rows, "CHARS_READ is not INT64 [rows]");
      Check(raw ? response.raw_output_contents(o).size() == 8 * static_cast<size_t>(rows)
                : out.contents().int64_contents_size() == rows,
            "CHARS_READ size");
    } else {
      Check(out.name() == ortserve::kTokenLogitsOutput && out.datatype() == "FP32" && out.shape_size() == 3 &&
                out.shape(0) == rows && out.shape(2) == static_cast<int64_t>(labels),
            "TOKEN_LOGITS is not FP32 [rows, T, labels]");
      const size_t count = static_cast<size_t>(rows) * static_cast<size_t>(out.shape(1)) * labels;
      Check(raw ? response.raw_output_contents(o).size() == 4 * count
                : static_cast<size_t>(out.contents().fp32_contents_size()) == count,
            "TOKEN_LOGITS size");
    }
  }
}

// EncodeOutputs for a version with `labels` (possibly none), as the front end calls it once the request fits.
void CheckEncode(const inference::ModelInferRequest& request, const ortserve::DecodedCall& decoded,
                 const ortserve::VersionOutput& served, const uint8_t* data, size_t size) {
  (void)request;
  if (ortserve::CheckOutputs(decoded, served, "m")) return;
  if (served.per_token) return CheckEncodeTokens(decoded, served, data, size);
  const int rows = static_cast<int>(decoded.texts.size());
  const int columns = served.labels.empty() ? 3 : static_cast<int>(served.labels.size());
  Check(served.pairs != decoded.pairs.empty(), "CheckOutputs passed TEXT_PAIR where the version does not take it");
  for (const auto& out : decoded.outputs) {
    if (out.classes > 0 && served.labels.size() != static_cast<size_t>(columns)) return;  // the caller's check
  }
  const std::vector<float> values = FuzzedValues(static_cast<size_t>(rows) * columns, data, size);
  const bool raw = decoded.raw_output;
  inference::ModelInferResponse response;
  ortserve::WriteOutputs(response, ortserve::EncodeOutputs(decoded, served, values.data(), rows, columns));
  const size_t wanted = decoded.outputs.empty() ? 1 : decoded.outputs.size();
  Check(static_cast<size_t>(response.outputs_size()) == wanted, "EncodeOutputs wrote another number of outputs");
  Check(raw ? static_cast<size_t>(response.raw_output_contents_size()) == wanted
            : response.raw_output_contents_size() == 0,
        "raw_output_contents disagree with binary_data");
  for (int o = 0; o < response.outputs_size(); ++o) {
    const auto& out = response.outputs(o);
    if (out.name() == "SCORE") {
      Check(!served.score.empty() && out.datatype() == "FP32" && out.shape_size() == 1 && out.shape(0) == rows,
            "SCORE is not a reranker's FP32 [rows]");
      Check(raw ? response.raw_output_contents(o).size() == 4 * static_cast<size_t>(rows)
                : out.contents().fp32_contents_size() == rows,
            "SCORE size");
      continue;
    }
    Check(out.shape_size() == 2 && out.shape(0) == rows, "an output's shape is not [rows, ...]");
    const size_t count = static_cast<size_t>(out.shape(0)) * static_cast<size_t>(out.shape(1));
    if (out.datatype() == "FP32") {
      Check(out.shape(1) == columns, "FP32 output columns");
      Check(raw ? response.raw_output_contents(o).size() == 4 * count
                : static_cast<size_t>(out.contents().fp32_contents_size()) == count,
            "FP32 output size");
    } else {
      Check(out.datatype() == "BYTES", "an output neither FP32 nor BYTES");
      const int64_t k = decoded.outputs[o].classes;
      Check(k > 0 && out.shape(1) == std::min<int64_t>(k, columns), "classification width is not min(k, labels)");
      if (raw) {
        std::vector<std::string_view> elements;
        Check(ReferenceSplit(response.raw_output_contents(o), elements) && elements.size() == count,
              "raw BYTES output does not split into rows x width elements");
      } else {
        Check(static_cast<size_t>(out.contents().bytes_contents_size()) == count, "BYTES output size");
      }
    }
  }
}

// The fuzz input, consumed a byte at a time; zeros once it runs out.
class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  uint8_t Byte() { return at_ < size_ ? data_[at_++] : 0; }
  std::string Bytes(size_t n) {
    n = std::min(n, size_ - at_);
    std::string out(reinterpret_cast<const char*>(data_ + at_), n);
    at_ += n;
    return out;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t at_ = 0;
};

void AppendLe32(std::string& out, uint32_t v) {
  for (int b = 0; b < 4; ++b) out.push_back(static_cast<char>((v >> (8 * b)) & 0xFF));
}

// A request from a recipe: always one TEXT BYTES input, so every input reaches the element checks.
inference::ModelInferRequest Built(Reader& in) {
  inference::ModelInferRequest request;
  request.set_model_name("classifier");
  auto* tensor = request.add_inputs();
  tensor->set_name("TEXT");
  tensor->set_datatype("BYTES");
  const uint8_t flags = in.Byte();
  const int count = in.Byte() % 20;
  std::vector<std::string> elements;
  for (int i = 0; i < count; ++i) elements.push_back(in.Bytes(in.Byte() % 40));
  // The count: the elements' own, or off by a small delta, or any power of two up to 2**62 (a count the elements
  // cannot back, which the decoder must refuse without acting on it).
  int64_t declared = static_cast<int64_t>(elements.size());
  if (flags & 0x02) {
    const uint8_t how = in.Byte();
    declared = how & 0x80 ? int64_t{1} << (how % 63) : declared + static_cast<int8_t>(how << 1) / 2;
  }
  tensor->add_shape(declared);
  if (flags & 0x01) tensor->add_shape((flags & 0x02) ? static_cast<int8_t>(in.Byte()) : 1);
  if (flags & 0x04) {  // raw: length-prefixed, then maybe one prefix nudged, the end cut or padded
    std::string raw;
    std::vector<size_t> prefixes;
    for (const std::string& e : elements) {
      prefixes.push_back(raw.size());
      AppendLe32(raw, static_cast<uint32_t>(e.size()));
      raw += e;
    }
    if ((flags & 0x08) && !prefixes.empty()) {
      const size_t at = prefixes[in.Byte() % prefixes.size()];
      const auto delta = static_cast<int8_t>(in.Byte());
      uint32_t size = 0;
      for (int b = 3; b >= 0; --b) size = (size << 8) | static_cast<unsigned char>(raw[at + b]);
      std::string patched;
      AppendLe32(patched, size + static_cast<uint32_t>(static_cast<int32_t>(delta)));
      raw.replace(at, 4, patched);
    }
    if (flags & 0x10) raw.resize(raw.size() - std::min<size_t>(raw.size(), in.Byte() % 8));
    if (flags & 0x20) raw += in.Bytes(in.Byte() % 6);
    request.add_raw_input_contents(std::move(raw));
  } else {
    for (std::string& e : elements) tensor->mutable_contents()->add_bytes_contents(std::move(e));
  }
  if (flags & 0x40) {
    static constexpr const char* kNames[] = {"LOGITS", "EMBEDDING", "PROBS", "", "ENTITIES", "TOKEN_LOGITS",
                                             "CHARS_READ", "TOKEN_OFFSETS"};
    for (int n = in.Byte() % 4; n > 0; --n) {
      auto* out = request.add_outputs();
      const uint8_t spec = in.Byte();
      out->set_name(kNames[(spec % 4) + ((flags & 0x01) && (spec & 0x40) ? 4 : 0)]);
      auto& params = *out->mutable_parameters();
      switch ((spec >> 2) % 5) {
        case 1: params["classification"].set_int64_param(static_cast<int8_t>(in.Byte())); break;
        case 2: params["classification"].set_uint64_param(spec & 0x80 ? ~uint64_t{0} - in.Byte() : in.Byte()); break;
        case 3: params["classification"].set_string_param("2"); break;
        case 4: params["binary_data"].set_bool_param(spec & 0x80); break;
        default: break;
      }
    }
  }
  if (flags & 0x80) {
    const uint8_t spec = in.Byte();
    auto& params = *request.mutable_parameters();
    if (spec & 0x01) params["routing_key"].set_string_param(in.Bytes(spec % 8));
    if (spec & 0x02) params["routing_key"].set_int64_param(spec);
    static constexpr const char* kModes[] = {"logits", "probabilities", "softmax", ""};
    if (spec & 0x04) params["scores"].set_string_param(kModes[(spec >> 4) % 4]);
    if (spec & 0x08) params["scores"].set_bool_param(true);
  }
  const uint8_t pairs = in.Byte();  // after the older recipe: the committed seeds read 0 here and keep their meaning
  if (pairs & 0x01) {
    auto* second = request.add_inputs();
    second->set_name((pairs & 0x10) ? "TEXT" : "TEXT_PAIR");
    second->set_datatype((pairs & 0x20) ? "FP32" : "BYTES");
    const int n = (pairs & 0x02) ? 1 : count + ((pairs & 0x04) ? 1 : 0);
    second->add_shape(n);
    std::vector<std::string> texts;
    for (int i = 0; i < n; ++i) texts.push_back(in.Bytes(in.Byte() % 20));
    if (flags & 0x04) {
      std::string raw;
      for (const std::string& t : texts) {
        AppendLe32(raw, static_cast<uint32_t>(t.size()));
        raw += t;
      }
      if (!(pairs & 0x08)) request.add_raw_input_contents(std::move(raw));  // else one entry for two inputs
    } else {
      for (std::string& t : texts) second->mutable_contents()->add_bytes_contents(std::move(t));
    }
  }
  const uint8_t aggregation = in.Byte();  // last, for the same reason
  if (aggregation & 0x01) {
    static constexpr const char* kStrategies[] = {"simple", "first", "average", "max", "none", "", "longest", "FIRST"};
    auto& params = *request.mutable_parameters();
    if (aggregation & 0x02) {
      params["aggregation"].set_int64_param(aggregation);
    } else {
      params["aggregation"].set_string_param(kStrategies[(aggregation >> 2) % 8]);
    }
  }
  return request;
}

void Exercise(const inference::ModelInferRequest& request, const uint8_t* data, size_t size) {
  static const ortserve::VersionOutput kPlain{"classifier", "LOGITS", {}};  // a table without labels
  static const ortserve::VersionOutput kLabelled{"classifier", "LOGITS", {"neg", "pos", "x"}};
  static const ortserve::VersionOutput kEmbedding{"embedding", "EMBEDDING", {}};
  static const ortserve::VersionOutput kPairs{"classifier", "LOGITS", {"neg", "pos", "x"}, false, true, ""};
  // As service/served_output.py builds them from bundle/kinds.py's specs.
  static const ortserve::VersionOutput kReranker = [] {
    ortserve::VersionOutput v{"classifier", "SCORE", {"score"}, false, true, "sigmoid"};
    v.also = {"LOGITS"};
    return v;
  }();
  static const ortserve::VersionOutput kTokens = [] {
    ortserve::VersionOutput v{"token-classifier", "ENTITIES", {"O", "B-PER", "I-PER"}};
    v.also = {"CHARS_READ", "TOKEN_LOGITS", "TOKEN_OFFSETS"};
    v.per_token = true;
    return v;
  }();
  // The request's own string fields stand in for the headers PrepareCall reads (any bytes, any length).
  const ortserve::CallHeaders headers{request.id(), request.model_version(),
                                      ortserve::TraceHeaders{request.model_name(), request.id(), request.model_name()}};
  for (const long long max_texts_per_request : {1LL, 16LL, 1LL << 40}) {
    const ortserve::PreparedCall prepared = ortserve::PrepareCall(ortserve::ToWire(request), headers,
                                                                  max_texts_per_request);
    const bool id_fits = !request.id().empty() && request.id().size() <= ortserve::kMaxRequestIdBytes;
    Check(id_fits ? prepared.request_id == request.id() : prepared.request_id.size() == 32,
          "the request id is neither the caller's nor a fresh one");
    if (const auto* error = std::get_if<ortserve::WireError>(&prepared.call)) {
      Check(!error->message.empty() && error->code == ortserve::Code::kInvalidArgument, "a refusal without a message");
      continue;
    }
    Check(request.id().size() <= ortserve::kMaxRequestIdBytes, "an id past the limit was taken");
    const auto& call = std::get<ortserve::DecodedCall>(prepared.call);
    if (!call.routing_key.empty()) {
      const auto it = request.parameters().find("routing_key");
      Check(it != request.parameters().end() && it->second.string_param() == call.routing_key,
            "routing key from nowhere");
    }
    const std::string_view expected_key = !call.routing_key.empty()            ? call.routing_key
                                          : !request.model_version().empty() ? std::string_view(request.model_version())
                                                                              : std::string_view(prepared.request_id);
    Check(prepared.routing_key == expected_key, "the routing key is not the parameter, the header or the id");
    CheckDecoded(request, call, max_texts_per_request);
    for (const auto* served : {&kPlain, &kLabelled, &kEmbedding, &kPairs, &kReranker, &kTokens}) {
      if (served->labels.empty() && served->kind == "classifier") {
        bool classification = false;
        for (const auto& out : call.outputs) classification |= out.classes > 0;
        if (classification) continue;  // the front end passes such calls on (no labels to name)
      }
      CheckEncode(request, call, *served, data, size);
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool quiet = [] {
    google::protobuf::SetLogHandler(nullptr);  // invalid UTF-8 in string fields is expected here, not news
    return true;
  }();
  (void)quiet;
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  Check(ortserve::IsValidUtf8(bytes) == ReferenceUtf8(bytes), "IsValidUtf8 disagrees with the reference");

  inference::ModelInferRequest parsed;
  if (parsed.ParseFromArray(data, static_cast<int>(size))) Exercise(parsed, data, size);
  Reader recipe(data, size);
  Exercise(Built(recipe), data, size);
  return 0;
}
