#include "py_wire.h"

#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>

#include <limits>
#include <utility>

namespace nb = nanobind;

namespace ortserve {

std::string_view BytesView(nb::handle bytes) {
  char* data = nullptr;
  Py_ssize_t size = 0;
  if (PyBytes_AsStringAndSize(bytes.ptr(), &data, &size) != 0) throw nb::python_error();
  return {data, static_cast<size_t>(size)};
}

std::string_view Utf8(nb::handle text) {
  Py_ssize_t size = 0;
  const char* data = PyUnicode_AsUTF8AndSize(text.ptr(), &size);
  if (data == nullptr) throw nb::python_error();
  return {data, static_cast<size_t>(size)};
}

namespace {

// A Python int of any size as the rules read an integer parameter: int64 when it fits, else uint64 when it fits,
// else kBigInt (which every rule refuses by name). JSON carries integers of any size, so the range is the rules'
// to judge, never a failed conversion here.
void ReadInteger(nb::handle value, WireParam& out) {
  int overflow = 0;
  const long long v = PyLong_AsLongLongAndOverflow(value.ptr(), &overflow);
  if (v == -1 && PyErr_Occurred()) throw nb::python_error();  // not an int: a caller's bug, not the client's
  if (overflow == 0) {
    out.kind = WireParam::Kind::kInt64;
    out.int64_value = v;
    return;
  }
  if (overflow > 0) {
    const unsigned long long u = PyLong_AsUnsignedLongLong(value.ptr());
    if (!(u == static_cast<unsigned long long>(-1) && PyErr_Occurred())) {
      out.kind = WireParam::Kind::kUint64;
      out.uint64_value = u;
      return;
    }
    PyErr_Clear();
  }
  out.kind = WireParam::Kind::kBigInt;
  out.big_int_negative = overflow < 0;
}

// A shape's dimension: past int64 it is read as the nearest int64, which the rules refuse as they would that one
// (a count past max_texts_per_request, or below 1).
int64_t Dimension(nb::handle value) {
  int overflow = 0;
  const long long v = PyLong_AsLongLongAndOverflow(value.ptr(), &overflow);
  if (v == -1 && PyErr_Occurred()) throw nb::python_error();
  if (overflow != 0) return overflow > 0 ? std::numeric_limits<int64_t>::max() : std::numeric_limits<int64_t>::min();
  return v;
}

}  // namespace

WireParam ParamOf(nb::handle param) {
  WireParam out;
  if (param.is_none()) return out;
  out.present = true;
  nb::tuple pair = nb::cast<nb::tuple>(param);
  if (pair.size() != 2) throw nb::value_error("a parameter is None or (kind, value)");
  if (pair[0].is_none()) return out;
  const std::string kind = nb::cast<std::string>(pair[0]);
  if (kind == "bool_param") {
    out.kind = WireParam::Kind::kBool;
    out.bool_value = nb::cast<bool>(pair[1]);
  } else if (kind == "int64_param" || kind == "uint64_param") {
    ReadInteger(pair[1], out);
  } else if (kind == "double_param") {
    out.kind = WireParam::Kind::kDouble;
    out.double_value = nb::cast<double>(pair[1]);
  } else if (kind == "string_param") {
    out.kind = WireParam::Kind::kString;
    out.string_value = Utf8(pair[1]);
  } else {
    throw nb::value_error(("unknown parameter kind " + kind).c_str());
  }
  return out;
}

nb::list Strs(const std::vector<std::string>& texts) {
  nb::list out;
  for (const auto& text : texts) {
    out.append(nb::steal<nb::str>(PyUnicode_DecodeUTF8(text.data(), static_cast<Py_ssize_t>(text.size()), "strict")));
  }
  return out;
}

WireRequest RequestOf(nb::list inputs, nb::list outputs, nb::list raw_input_contents, nb::handle scores,
                      nb::handle routing_key, nb::handle aggregation, nb::handle priority,
                      nb::handle prompt_name, nb::handle dimensions, nb::handle embedding_type, nb::handle top_k,
                      nb::handle threshold) {
  WireRequest request;
  for (nb::handle item : inputs) {
    nb::tuple t = nb::cast<nb::tuple>(item);
    if (t.size() != 5) throw nb::value_error("an input is (name, datatype, shape, has_contents, bytes_contents)");
    WireInput& in = request.inputs.emplace_back();
    in.name = Utf8(t[0]);
    in.datatype = Utf8(t[1]);
    for (nb::handle dim : t[2]) in.shape.push_back(Dimension(dim));
    in.has_contents = nb::cast<bool>(t[3]);
    for (nb::handle element : t[4]) in.bytes_contents.push_back(BytesView(element));
  }
  for (nb::handle item : outputs) {
    nb::tuple t = nb::cast<nb::tuple>(item);
    if (t.size() != 3) throw nb::value_error("an output is (name, classification, binary_data)");
    WireOutput& out = request.outputs.emplace_back();
    out.name = Utf8(t[0]);
    out.classification = ParamOf(t[1]);
    out.binary_data = ParamOf(t[2]);
  }
  for (nb::handle raw : raw_input_contents) request.raw_input_contents.push_back(BytesView(raw));
  request.scores = ParamOf(scores);
  request.routing_key = ParamOf(routing_key);
  request.aggregation = ParamOf(aggregation);
  request.priority = ParamOf(priority);
  request.prompt_name = ParamOf(prompt_name);
  request.dimensions = ParamOf(dimensions);
  request.embedding_type = ParamOf(embedding_type);
  request.top_k = ParamOf(top_k);
  request.threshold = ParamOf(threshold);
  return request;
}

OwnedWireCall Own(const DecodedCall& call) {
  OwnedWireCall owned;
  owned.texts.reserve(call.texts.size());
  for (std::string_view text : call.texts) owned.texts.emplace_back(text);
  owned.pairs.reserve(call.pairs.size());
  for (std::string_view text : call.pairs) owned.pairs.emplace_back(text);
  for (const auto& out : call.outputs) owned.outputs.emplace_back(std::string(out.name), out.classes);
  owned.probabilities = call.probabilities;
  owned.raw_output = call.raw_output;
  owned.routing_key = std::string(call.routing_key);
  owned.aggregation = call.aggregation;
  owned.bulk = call.bulk;
  if (call.prompt_name) owned.prompt_name = std::string(*call.prompt_name);
  owned.dimensions = call.dimensions;
  owned.embedding_type = call.embedding_type;
  owned.top_k = call.top_k;
  owned.threshold = call.threshold;
  owned.sparse_bound = call.sparse_bound;
  return owned;
}

CallHeaders CallHeadersOf(nb::tuple headers) {
  if (headers.size() != 9) throw nb::value_error("headers are the 9 of CALL_HEADERS, in order");
  return CallHeaders{Utf8(headers[0]), Utf8(headers[1]),
                     TraceHeaders{Utf8(headers[2]), Utf8(headers[3]), Utf8(headers[4]), Utf8(headers[5]),
                                  Utf8(headers[6]), Utf8(headers[7]), Utf8(headers[8])}};
}

TokenRows TokenRowsOf(nb::handle rows) {
  TokenRows token_rows;
  for (nb::handle item : rows) {
    nb::tuple row = nb::cast<nb::tuple>(item);
    if (row.size() != 2) throw nb::value_error("a token row is (spans int64 [T, 4], chars_read)");
    auto spans = nb::cast<nb::ndarray<const int64_t, nb::ndim<2>, nb::c_contig, nb::device::cpu>>(row[0]);
    if (spans.shape(1) != 4) throw nb::value_error("spans are int64 [T, 4]: start, end, is_subword, special");
    std::vector<TokenSpan>& out = token_rows.spans.emplace_back();
    for (size_t t = 0; t < spans.shape(0); ++t) {
      const int64_t* s = spans.data() + t * 4;
      out.push_back({s[0], s[1], s[2] != 0, s[3] != 0});
    }
    token_rows.chars_read.push_back(nb::cast<int64_t>(row[1]));
  }
  return token_rows;
}

nb::tuple TraceTuple(const TraceContext& trace) {
  return nb::make_tuple(trace.trace_id, trace.parent_span_id, trace.sampled, trace.tracestate);
}

nb::list ReplyTensors(std::vector<ReplyTensor>& tensors) {
  nb::list out;
  for (auto& t : tensors) {
    nb::object payload;
    if (t.raw) {
      payload = nb::bytes(t.raw_bytes.data(), t.raw_bytes.size());
    } else if (t.datatype == "FP32") {
      nb::list floats;
      for (float v : t.fp32) floats.append(v);
      payload = floats;
    } else if (t.datatype == "INT64" || t.datatype == "INT8" || t.datatype == "UINT8") {
      nb::list ints;
      for (int64_t v : t.int64) ints.append(v);
      payload = ints;
    } else {
      nb::list elements;
      for (const auto& e : t.bytes) elements.append(nb::bytes(e.data(), e.size()));
      payload = elements;
    }
    nb::list dims;
    for (int64_t dim : t.shape) dims.append(dim);
    out.append(nb::make_tuple(t.name, t.datatype, nb::tuple(dims), t.raw, payload));
  }
  return out;
}

}  // namespace ortserve
