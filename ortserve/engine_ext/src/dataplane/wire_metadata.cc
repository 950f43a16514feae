// What a call's metadata decides (infer_wire.h): its request id, its routing key, a refusal's pushback, its trace
// context (W3C or B3); PrepareCall puts them and Decode in one order for both front ends.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>
#include <string>
#include <utility>
#include <variant>

#include "infer_wire.h"
#include "wire_text.h"

namespace ortserve {

std::string NewRequestId() {
  thread_local std::mt19937_64 rng{std::random_device{}() ^
                                   static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count())};
  static const char* hex = "0123456789abcdef";
  std::string id(32, '0');
  for (int half = 0; half < 2; ++half) {
    uint64_t v = rng();
    for (int i = 0; i < 16; ++i, v >>= 4) id[half * 16 + i] = hex[v & 0xF];
  }
  return id;
}

RequestIdChoice ChooseRequestId(std::string_view header) {
  if (!header.empty() && header.size() <= kMaxRequestIdBytes) return {std::string(header), std::nullopt};
  RequestIdChoice choice{NewRequestId(), std::nullopt};
  if (header.size() > kMaxRequestIdBytes) {
    choice.error = Invalid("x-request-id is " + std::to_string(header.size()) + " bytes; at most " +
                           std::to_string(kMaxRequestIdBytes));
  }
  return choice;
}

std::string_view ChooseRoutingKey(std::string_view param, std::string_view header, std::string_view request_id) {
  if (!param.empty()) return param;
  if (!header.empty()) return header;
  return request_id;
}

long long PushbackMs(double retry_after_s) {
  // Half to even (std::nearbyint in the default rounding mode), so a hint of 0.0025 s is 2 ms, as Python's round().
  return std::max(1LL, static_cast<long long>(std::nearbyint(retry_after_s * 1000)));
}

namespace {

bool IsHex(std::string_view s, size_t n) {
  if (s.size() != n) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

bool AllZero(std::string_view s) { return s.find_first_not_of('0') == std::string_view::npos; }

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'F') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

// A B3 trace id: 32 hex digits, or 16 left-padded to 32; "" when neither (or all zeros).
std::string B3TraceId(std::string_view raw) {
  const std::string id = Lower(raw);
  if (IsHex(id, 32) && !AllZero(id)) return id;
  if (IsHex(id, 16) && !AllZero(id)) return std::string(16, '0') + id;
  return "";
}

std::string B3SpanId(std::string_view raw) {
  const std::string id = Lower(raw);
  return IsHex(id, 16) && !AllZero(id) ? id : "";
}

// W3C Trace Context, level 1: version-trace_id-parent_id-flags; a later version may append fields after a '-'.
bool ParseTraceparent(std::string_view value, TraceContext& out) {
  if (value.size() < 55 || value[2] != '-' || value[35] != '-' || value[52] != '-') return false;
  const std::string_view version = value.substr(0, 2), trace = value.substr(3, 32), parent = value.substr(36, 16),
                         flags = value.substr(53, 2);
  if (!IsHex(version, 2) || version == "ff" || !IsHex(trace, 32) || !IsHex(parent, 16) || !IsHex(flags, 2)) {
    return false;
  }
  if (AllZero(trace) || AllZero(parent)) return false;
  if (version == "00" ? value.size() != 55 : (value.size() > 55 && value[55] != '-')) return false;
  out.trace_id = std::string(trace);
  out.parent_span_id = std::string(parent);
  const int bits = std::stoi(std::string(flags), nullptr, 16);
  out.sampled = bits & 1;
  return true;
}

}  // namespace

TraceContext ParseTraceContext(const TraceHeaders& headers) {
  TraceContext out;
  if (ParseTraceparent(headers.traceparent, out)) {
    out.tracestate = std::string(headers.tracestate);
    return out;
  }
  if (!headers.b3.empty()) {  // {trace}-{span}[-{sampling}[-{parent}]], or a lone sampling decision
    if (headers.b3 == "0" || headers.b3 == "1" || headers.b3 == "d") {
      out.sampled = headers.b3 == "0" ? 0 : 1;
      return out;
    }
    const size_t first = headers.b3.find('-');
    const size_t second = first == std::string_view::npos ? first : headers.b3.find('-', first + 1);
    const std::string trace = B3TraceId(headers.b3.substr(0, first));
    const std::string span = first == std::string_view::npos
                                 ? ""
                                 : B3SpanId(headers.b3.substr(first + 1, second == std::string_view::npos
                                                                              ? std::string_view::npos
                                                                              : second - first - 1));
    if (!trace.empty() && !span.empty()) {
      out.trace_id = trace;
      out.parent_span_id = span;
      if (second != std::string_view::npos) {
        const std::string_view sampling = headers.b3.substr(second + 1, 1);
        out.sampled = sampling == "0" ? 0 : (sampling == "1" || sampling == "d") ? 1 : -1;
      }
      return out;
    }
    return TraceContext{};
  }
  const std::string trace = B3TraceId(headers.b3_trace_id), span = B3SpanId(headers.b3_span_id);
  if (!trace.empty() && !span.empty()) {
    out.trace_id = trace;
    out.parent_span_id = span;
  }
  if (headers.b3_flags == "1") {
    out.sampled = 1;
  } else if (headers.b3_sampled == "1" || headers.b3_sampled == "true") {
    out.sampled = 1;
  } else if (headers.b3_sampled == "0" || headers.b3_sampled == "false") {
    out.sampled = 0;
  }
  return out;
}

PreparedCall PrepareCall(const WireRequest& request, const CallHeaders& headers, long long max_texts_per_request) {
  RequestIdChoice id = ChooseRequestId(headers.request_id);
  PreparedCall prepared{std::move(id.id), ParseTraceContext(headers.trace), WireError{}, {}};
  if (id.error) {
    prepared.call = std::move(*id.error);
    return prepared;
  }
  prepared.call = Decode(request, max_texts_per_request);
  if (const auto* call = std::get_if<DecodedCall>(&prepared.call)) {
    prepared.routing_key = std::string(ChooseRoutingKey(call->routing_key, headers.routing_key, prepared.request_id));
  }
  return prepared;
}

}  // namespace ortserve
