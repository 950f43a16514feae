// Python bindings of the wire rules (infer_wire.h): the Python front end decodes, checks and encodes every ModelInfer
// with them, so both front ends answer each call by the one implementation.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "infer_wire.h"
#include "py_wire.h"
#include "route.h"
#include "sparse_entries.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace {

using ortserve::OwnedWireCall;
using ortserve::Own;
using ortserve::RequestOf;
using ortserve::Strs;
using ortserve::Utf8;

// A call the rules refuse, raised in Python as engine_ext.WireError(message); every such refusal is
// INVALID_ARGUMENT (the rules decide nothing else). One past max_texts_per_request is its subclass
// WireTooManyTexts, which HTTP answers 413.
struct WireRefusal : std::runtime_error {
  using std::runtime_error::runtime_error;
};
struct WireTooManyTexts : WireRefusal {
  using WireRefusal::WireRefusal;
};

[[noreturn]] void Raise(const ortserve::WireError& error) {
  if (error.too_many_texts) throw WireTooManyTexts(error.message);
  throw WireRefusal(error.message);
}

struct OwnedPreparedCall {
  std::string request_id;
  ortserve::TraceContext trace;
  OwnedWireCall call;  // empty when refused
  std::string routing_key;
  std::optional<std::string> error;
  bool too_many_texts = false;
};

}  // namespace

void BindWire(nb::module_& m) {
  nb::class_<ortserve::VersionOutput>(
      m, "VersionOutput",
      "What a loaded version takes and answers, as the wire rules read it (route.h): built once per version from its "
      "kind's spec and manifest (service/served_output.py), read by both front ends.")
      .def(
          "__init__",
          [](ortserve::VersionOutput* self, std::string kind, std::string output, std::vector<std::string> labels,
             bool multi_label, bool pairs, std::string score, std::map<std::string, std::string> prompts,
             std::vector<int64_t> widths, std::vector<std::string> also, bool per_token,
             std::map<int64_t, std::vector<float>> ranges, bool sparse) {
            auto* v = new (self) ortserve::VersionOutput();
            v->kind = std::move(kind);
            v->name = std::move(output);
            v->labels = std::move(labels);
            v->multi_label = multi_label;
            v->pairs = pairs;
            v->score = std::move(score);
            v->prompts = std::move(prompts);
            v->widths = std::move(widths);
            v->ranges = std::move(ranges);
            v->also = std::move(also);
            v->per_token = per_token;
            v->sparse = sparse;
          },
          "kind"_a, "output"_a, nb::kw_only(), "labels"_a = std::vector<std::string>(), "multi_label"_a = false,
          "pairs"_a = false, "score"_a = "", "prompts"_a = std::map<std::string, std::string>(),
          "widths"_a = std::vector<int64_t>(), "also"_a = std::vector<std::string>(), "per_token"_a = false,
          "ranges"_a = std::map<int64_t, std::vector<float>>(), "sparse"_a = false,
          "kind (for messages), output (the default reply output's name), labels, multi_label, pairs (takes "
          "TEXT_PAIR), score (a reranker's activation), prompts {name: text}, widths (an embedding's, its own "
          "first), also (the outputs a call may ask for besides output), per_token (a row per token), ranges {width: "
          "starts then ends, 2 x width floats} (an embedding's calibrated ranges, for int8 and uint8), sparse (a sparse "
          "embedding's vocabulary weights: replies carry the kept entries).")
      .def_ro("kind", &ortserve::VersionOutput::kind)
      .def_ro("output", &ortserve::VersionOutput::name)
      .def_ro("labels", &ortserve::VersionOutput::labels)
      .def_ro("also", &ortserve::VersionOutput::also)
      .def_ro("per_token", &ortserve::VersionOutput::per_token)
      .def_ro("sparse", &ortserve::VersionOutput::sparse)
      .def_ro("ranges", &ortserve::VersionOutput::ranges);
  m.attr("TEXT_INPUT") = ortserve::kTextInput;
  m.attr("PAIR_INPUT") = ortserve::kPairInput;
  m.attr("SCORE_OUTPUT") = ortserve::kScoreOutput;
  m.attr("CLASSIFIER_OUTPUT") = ortserve::kClassifierOutput;
  m.attr("EMBEDDING_OUTPUT") = ortserve::kEmbeddingOutput;
  m.attr("ENTITIES_OUTPUT") = ortserve::kEntitiesOutput;
  m.attr("TOKEN_LOGITS_OUTPUT") = ortserve::kTokenLogitsOutput;
  m.attr("TOKEN_OFFSETS_OUTPUT") = ortserve::kTokenOffsetsOutput;
  m.attr("CHARS_READ_OUTPUT") = ortserve::kCharsReadOutput;
  m.attr("SPARSE_INDICES_OUTPUT") = ortserve::kSparseIndicesOutput;
  m.attr("SPARSE_VALUES_OUTPUT") = ortserve::kSparseValuesOutput;
  m.attr("SPARSE_COUNTS_OUTPUT") = ortserve::kSparseCountsOutput;
  m.attr("TOP_K_PARAM") = ortserve::kTopKParam;
  m.attr("THRESHOLD_PARAM") = ortserve::kThresholdParam;
  m.attr("MAX_REQUEST_ID_BYTES") = ortserve::kMaxRequestIdBytes;
  m.attr("EMBEDDING_TYPE_PARAM") = ortserve::kEmbeddingTypeParam;
  {
    nb::list types;
    for (const char* name : {"float", "int8", "uint8", "binary", "ubinary"}) {
      if (ortserve::ParseEmbeddingType(name)) types.append(name);
    }
    m.attr("EMBEDDING_TYPES") = nb::tuple(types);  // the embedding_type parameter's values (embedding_types.h)
  }
  m.def(
      "quantize_embeddings",
      [](nb::ndarray<const float, nb::ndim<2>, nb::c_contig, nb::device::cpu> values, const std::string& type,
         std::optional<std::vector<float>> ranges) {
        const auto parsed = ortserve::ParseEmbeddingType(type);
        if (!parsed || *parsed == ortserve::EmbeddingType::kFloat) {
          throw nb::value_error("type must be a compact one: 'int8', 'uint8', 'binary' or 'ubinary'");
        }
        const int rows = static_cast<int>(values.shape(0)), columns = static_cast<int>(values.shape(1));
        if (ortserve::NeedsRanges(*parsed) && (!ranges || ranges->size() != 2 * static_cast<size_t>(columns))) {
          throw nb::value_error("int8 and uint8 need ranges: 2 x columns floats, starts then ends");
        }
        const std::vector<uint8_t> out =
            ortserve::Quantize(values.data(), rows, columns, *parsed, ranges ? ranges->data() : nullptr);
        return nb::make_tuple(nb::bytes(reinterpret_cast<const char*>(out.data()), out.size()),
                              ortserve::Signed(*parsed) ? "INT8" : "UINT8",
                              ortserve::QuantizedColumns(*parsed, columns));
      },
      "values"_a, "type"_a, "ranges"_a.none() = nb::none(),
      "The wire rules' compact embedding (embedding_types.h) of float32 [rows, columns]: (bytes, datatype, "
      "columns of the reply), one byte a value; ranges: starts then ends (int8, uint8).");
  m.def(
      "sparse_entries",
      [](nb::ndarray<const float, nb::ndim<2>, nb::c_contig, nb::device::cpu> values, int64_t top_k,
         double threshold) {
        ortserve::SparseRows rows;
        try {
          rows = ortserve::SparseEntries(values.data(), static_cast<int>(values.shape(0)),
                                         static_cast<int>(values.shape(1)), top_k, threshold);
        } catch (const std::invalid_argument& e) {
          throw nb::value_error(e.what());
        }
        auto* coordinates = new std::vector<int64_t>(std::move(rows.coordinates));
        nb::capsule coordinates_owner(
            coordinates, [](void* p) noexcept { delete static_cast<std::vector<int64_t>*>(p); });
        auto* weights = new std::vector<float>(std::move(rows.weights));
        nb::capsule weights_owner(weights, [](void* p) noexcept { delete static_cast<std::vector<float>*>(p); });
        const size_t pairs[2] = {weights->size(), 2}, entries[1] = {weights->size()};
        return nb::make_tuple(
            nb::ndarray<nb::numpy, int64_t, nb::ndim<2>>(coordinates->data(), 2, pairs, coordinates_owner),
            nb::ndarray<nb::numpy, float, nb::ndim<1>>(weights->data(), 1, entries, weights_owner));
      },
      "values"_a, "top_k"_a = 0, "threshold"_a = 0.0,
      "The wire rules' sparse embedding entries (sparse_entries.h) of float32 [rows, columns] weights: (int64 "
      "[entries, 2] of (row, column), float32 [entries]), each row's weights above threshold, at most top_k of them "
      "(0: no bound), the largest, a tie to the lower column; ascending columns within a row. ValueError for top_k "
      "< 0 or a threshold not finite and >= 0.");
  nb::exception<WireRefusal> wire_error(m, "WireError", PyExc_ValueError);
  nb::exception<WireTooManyTexts>(m, "WireTooManyTexts", wire_error);

  nb::class_<OwnedWireCall>(m, "DecodedCall", "A ModelInfer call the wire rules accepted.")
      .def_prop_ro("texts", [](const OwnedWireCall& self) { return Strs(self.texts); })
      .def_prop_ro(
          "pairs", [](const OwnedWireCall& self) -> nb::object {
            return self.pairs.empty() ? nb::none() : nb::object(Strs(self.pairs));
          },
          "with TEXT_PAIR, each row's second text (TEXT's elements; `texts` then holds each row's query, TEXT_PAIR, "
          "read first); None when the call sent none")
      .def_ro("outputs", &OwnedWireCall::outputs, "[(name, classification k or 0)] as requested; [] = the version's tensor")
      .def_ro("probabilities", &OwnedWireCall::probabilities)
      .def_ro("raw_output", &OwnedWireCall::raw_output)
      .def_ro("routing_key", &OwnedWireCall::routing_key, "the routing_key parameter; '' when absent")
      .def_ro("bulk", &OwnedWireCall::bulk, "the priority parameter: True for bulk, False for interactive, None "
              "when absent (the batcher decides by the call's size)")
      .def_ro("prompt_name", &OwnedWireCall::prompt_name, "the prompt_name parameter; None when absent")
      .def_ro("dimensions", &OwnedWireCall::dimensions,
              "the dimensions parameter (the embedding width to truncate to); 0 when absent")
      .def_prop_ro(
          "embedding_type",
          [](const OwnedWireCall& self) { return std::string(ortserve::EmbeddingTypeName(self.embedding_type)); },
          "the embedding_type parameter ('float' when absent)")
      .def_ro("top_k", &OwnedWireCall::top_k, "the top_k parameter (a sparse embedding's most entries); 0 when absent")
      .def_ro("threshold", &OwnedWireCall::threshold,
              "the threshold parameter (a sparse embedding's least weight kept, exclusive); 0 when absent");

  m.def(
      "decode_call",
      [](nb::list inputs, nb::list outputs, nb::list raw_input_contents, nb::handle scores, nb::handle routing_key,
         long long max_texts_per_request, nb::handle aggregation, nb::handle priority, nb::handle prompt_name,
         nb::handle dimensions, nb::handle embedding_type, nb::handle top_k, nb::handle threshold) {
        auto decoded = ortserve::Decode(RequestOf(inputs, outputs, raw_input_contents, scores, routing_key,
                                                  aggregation, priority, prompt_name, dimensions, embedding_type,
                                                  top_k, threshold),
                                        max_texts_per_request);
        if (auto* error = std::get_if<ortserve::WireError>(&decoded)) Raise(*error);
        return Own(std::get<ortserve::DecodedCall>(decoded));
      },
      "inputs"_a, "outputs"_a, "raw_input_contents"_a, "scores"_a.none(), "routing_key"_a.none(), "max_texts_per_request"_a,
      "aggregation"_a.none() = nb::none(), "priority"_a.none() = nb::none(), "prompt_name"_a.none() = nb::none(),
      "dimensions"_a.none() = nb::none(), "embedding_type"_a.none() = nb::none(), "top_k"_a.none() = nb::none(),
      "threshold"_a.none() = nb::none(),
      "The call's texts and outputs by the wire rules, or WireError naming the first rule it breaks. inputs: "
      "[(name, datatype, shape, has_contents, [bytes])]; outputs: [(name, classification, binary_data)]; a "
      "parameter: None when absent, else (WhichOneof('parameter_choice'), value).");

  nb::class_<OwnedPreparedCall>(m, "PreparedCall", "A ModelInfer's first steps (infer_wire.h PrepareCall).")
      .def_ro("request_id", &OwnedPreparedCall::request_id)
      .def_prop_ro("trace", [](const OwnedPreparedCall& self) { return ortserve::TraceTuple(self.trace); },
                   "(trace_id, parent_span_id, sampled, tracestate), as parse_trace_context gives them")
      .def_ro("call", &OwnedPreparedCall::call, "the DecodedCall (empty when refused)")
      .def_ro("routing_key", &OwnedPreparedCall::routing_key, "the canary key ('' when refused)")
      .def_ro("error", &OwnedPreparedCall::error, "the INVALID_ARGUMENT message when refused, else None")
      .def_ro("too_many_texts", &OwnedPreparedCall::too_many_texts,
              "refused for more texts than max_texts_per_request (HTTP answers 413)");
  m.def(
      "prepare_call",
      [](nb::list inputs, nb::list outputs, nb::list raw_input_contents, nb::handle scores, nb::handle routing_key,
         long long max_texts_per_request, nb::handle aggregation, nb::handle priority, nb::handle prompt_name,
         nb::handle dimensions, nb::handle embedding_type, nb::tuple headers, nb::handle top_k,
         nb::handle threshold) {
        ortserve::PreparedCall prepared = ortserve::PrepareCall(
            RequestOf(inputs, outputs, raw_input_contents, scores, routing_key, aggregation, priority, prompt_name,
                      dimensions, embedding_type, top_k, threshold),
            ortserve::CallHeadersOf(headers), max_texts_per_request);
        OwnedPreparedCall owned;
        owned.request_id = std::move(prepared.request_id);
        owned.trace = std::move(prepared.trace);
        if (const auto* error = std::get_if<ortserve::WireError>(&prepared.call)) {
          owned.error = error->message;
          owned.too_many_texts = error->too_many_texts;
        } else {
          owned.call = Own(std::get<ortserve::DecodedCall>(prepared.call));
          owned.routing_key = std::move(prepared.routing_key);
        }
        return owned;
      },
      "inputs"_a, "outputs"_a, "raw_input_contents"_a, "scores"_a.none(), "routing_key"_a.none(),
      "max_texts_per_request"_a, "aggregation"_a.none(), "priority"_a.none(), "prompt_name"_a.none(),
      "dimensions"_a.none(), "embedding_type"_a.none(), "headers"_a, "top_k"_a.none() = nb::none(),
      "threshold"_a.none() = nb::none(),
      "A ModelInfer's first steps in one call, as the native front end takes them: the request id, the trace "
      "context, decode_call's call and the routing key; headers: (x-request-id, x-routing-key, traceparent, "
      "tracestate, b3, x-b3-traceid, x-b3-spanid, x-b3-sampled, x-b3-flags), '' when absent.");

  m.def(
      "check_outputs",
      [](const OwnedWireCall& call, const ortserve::VersionOutput& version, const std::string& model) {
        if (auto error = ortserve::CheckOutputs(call.View(), version, model)) Raise(*error);
      },
      "call"_a, "version"_a, "model"_a,
      "WireError unless the call sends TEXT_PAIR exactly when the version takes pairs, every requested output is "
      "one it answers, classification only on a classifier's LOGITS, prompt_name one of its prompts and dimensions "
      "one of its widths.");
  m.def(
      "prompted_texts",
      [](const OwnedWireCall& call, const ortserve::VersionOutput& version) {
        const std::vector<std::string> prompted = ortserve::PromptedTexts(call.View(), version);
        return Strs(prompted.empty() ? call.texts : prompted);
      },
      "call"_a, "version"_a,
      "The texts the model reads for a call check_outputs passed: each after the prompt the call names (its text, "
      "then the text), else the texts as sent.");

  m.def(
      "encode_outputs",
      [](const OwnedWireCall& call, const ortserve::VersionOutput& version,
         nb::ndarray<const float, nb::ndim<2>, nb::c_contig, nb::device::cpu> values, nb::handle tokens) {
        const int rows = static_cast<int>(values.shape(0));
        const int columns = static_cast<int>(values.shape(1));
        std::optional<ortserve::TokenRows> token_rows;
        if (!tokens.is_none()) token_rows = ortserve::TokenRowsOf(tokens);
        for (const auto& [name, k] : call.outputs) {
          if (k > 0 && version.labels.size() != static_cast<size_t>(columns)) {
            throw nb::value_error(("values have " + std::to_string(columns) + " columns for " +
                                   std::to_string(version.labels.size()) + " labels").c_str());
          }
        }
        std::vector<ortserve::ReplyTensor> tensors;
        {
          nb::gil_scoped_release release;
          tensors = ortserve::EncodeOutputs(call.View(), version, values.data(), rows, columns,
                                            token_rows ? &*token_rows : nullptr);
        }
        return ortserve::ReplyTensors(tensors);
      },
      "call"_a, "version"_a, "values"_a, "tokens"_a.none() = nb::none(),
      "The reply's outputs for values (float32 [rows, columns]): [(name, datatype, shape, raw, payload)], shape a "
      "tuple of dims, payload the raw_output_contents bytes when raw, else the contents (a list of floats, ints or "
      "bytes); tokens: a per-token version's [(spans int64 [T, 4] of start, end, is_subword, special; "
      "chars_read)] per row, row r of values holding its T tokens' logits first.");

  m.def(
      "parse_trace_context",
      [](nb::str traceparent, nb::str tracestate, nb::str b3, nb::str b3_trace_id, nb::str b3_span_id,
         nb::str b3_sampled, nb::str b3_flags) {
        ortserve::TraceContext trace = ortserve::ParseTraceContext(ortserve::TraceHeaders{
            Utf8(traceparent), Utf8(tracestate), Utf8(b3), Utf8(b3_trace_id), Utf8(b3_span_id), Utf8(b3_sampled),
            Utf8(b3_flags)});
        return ortserve::TraceTuple(trace);
      },
      "traceparent"_a, "tracestate"_a, "b3"_a, "b3_trace_id"_a, "b3_span_id"_a, "b3_sampled"_a, "b3_flags"_a,
      "(trace_id, parent_span_id, sampled, tracestate) of a caller's W3C or B3 trace headers (infer_wire.h); "
      "trace_id '' when none is valid, sampled 1, 0 or -1 (none).");
  m.def("pushback_ms", &ortserve::PushbackMs, "retry_after_s"_a,
        "grpc-retry-pushback-ms of a refusal: the drain time in ms, half to even, at least 1.");
}
