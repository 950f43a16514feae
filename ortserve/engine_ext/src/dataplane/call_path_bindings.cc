// Python bindings of the call path (call_path.h): `Routes`, the route table both front ends read (the data plane owns
// it; the manager's swaps replace it), and `start_call`, a Python front end's ModelInfer in one crossing: prepared,
// routed, checked, leased, prompted and submitted here; its answer reaches the loop as the reply's tensors
// (Completions), encoded and with the lease released on the thread that answered it.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "call_path.h"
#include "dataplane_bindings.h"
#include "py_handles.h"
#include "py_wire.h"
#include "shadow_copy.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace ortserve {
namespace {

// {model: (split order, split upper, {version: ServedVersion}[, {version: VersionOutput}[, shadow]])}
// -> one immutable RouteTable. The fourth element is what each version takes and answers (ServedOutput.wire, copied);
// without it (or for a version it does not list) a version answers LOGITS and sends classification requests to the
// Python server. The fifth, None or (version, percent, keep texts): the model's shadow (shadow_copy.h).
std::shared_ptr<const RouteTable> ToRouteTable(nb::dict routes) {
  auto table = std::make_shared<RouteTable>();
  for (auto [key, value] : routes) {
    const std::string model = nb::cast<std::string>(key);
    nb::tuple entry = nb::cast<nb::tuple>(value);
    if (entry.size() < 3 || entry.size() > 5) {
      throw nb::value_error(
          ("routes['" + model + "'] must be (split order, split upper, versions[, outputs[, shadow]])").c_str());
    }
    ModelRoute route;
    for (nb::handle name : entry[0]) route.split.order.push_back(nb::cast<std::string>(name));
    for (nb::handle upper : entry[1]) route.split.upper.push_back(nb::cast<int>(upper));
    if (route.split.order.size() != route.split.upper.size()) {
      throw nb::value_error(("routes['" + model + "']: split order and split upper differ in length").c_str());
    }
    for (auto [name, version] : nb::cast<nb::dict>(entry[2])) {
      route.versions[nb::cast<std::string>(name)] = ServedVersionPtr(version);
    }
    if (entry.size() >= 4) {
      for (auto [name, served] : nb::cast<nb::dict>(entry[3])) {
        route.outputs[nb::cast<std::string>(name)] =
            std::make_shared<const VersionOutput>(nb::cast<const VersionOutput&>(served));
      }
    }
    if (entry.size() == 5 && !entry[4].is_none()) {
      nb::tuple shadow = nb::cast<nb::tuple>(entry[4]);
      const int percent = shadow.size() == 3 ? nb::cast<int>(shadow[1]) : -1;
      if (percent < 1 || percent > 100) {
        throw nb::value_error(("routes['" + model + "']: shadow must be (version, percent 1..100, keep texts)").c_str());
      }
      route.shadow = nb::cast<std::string>(shadow[0]);
      route.shadow_buckets = percent * (kBuckets / 100);
      route.shadow_texts = nb::cast<bool>(shadow[2]);
    }
    table->models.emplace(model, std::move(route));
  }
  return table;
}

// What a started call owns while the batcher has it: the call (the request's views die with the crossing), the
// prompted texts it reads, a token classifier's tokens, its lease (released once answered, or when the call is
// dropped unsubmitted: a version on HF tokenizers waits for Python's ids).
struct StartedState {
  OwnedWireCall owned;
  DecodedCall call;  // views into `owned`, its texts into `prompted` when the call names a prompt
  std::vector<std::string> prompted;
  TokenRows tokens;
  RoutedCall routed;
  std::shared_ptr<ShadowCopy> shadow;  // the call's copy to the model's shadow version, if it is sampled
  std::string model;
  std::shared_ptr<Completions> completions;
  uint64_t token = 0;
  std::mutex mutex;  // guards what follows
  bool submitted = false, leased = true;

  StartedState() = default;
  StartedState(const StartedState&) = delete;
  StartedState& operator=(const StartedState&) = delete;
  ~StartedState() { Release(); }

  void Release() {
    std::lock_guard<std::mutex> lock(mutex);
    if (leased && routed.version) routed.version->Release();
    leased = false;
  }
  bool per_token() const { return routed.served->per_token; }
  // The texts the model reads: each after the call's prompt, else as sent.
  const std::vector<std::string>& read() const { return prompted.empty() ? owned.texts : prompted; }
};

// The call's answer: the reply's tensors (ReplyOf) queued under its token once the lease is back.
InferDone Answered(std::shared_ptr<StartedState> state) {
  return [state = std::move(state)](InferResult&& result) {
    if (state->shadow) state->shadow->Live(result, state->per_token() ? &state->tokens : nullptr);
    std::vector<ReplyTensor> tensors = ReplyOf(result, state->call, *state->routed.served,
                                               state->per_token() ? &state->tokens : nullptr, state->model,
                                               state->routed.version_name);
    state->Release();
    result.logits = {};  // the reply holds them now
    state->completions->Push(Completion{state->token, std::move(result), std::move(tensors)});
  };
}

// A call start_call routed: what is left to Python of it.
struct PyStartedCall {
  std::shared_ptr<StartedState> state;
  CallHandle handle;
};

// The call's characters (code points: UTF-8 bytes that do not continue one), its pairs' included.
size_t TextChars(const DecodedCall& call) {
  size_t total = 0;
  auto count = [&](std::string_view text) {
    for (unsigned char byte : text) total += (byte & 0xC0) != 0x80;
  };
  for (std::string_view text : call.texts) count(text);
  for (std::string_view text : call.pairs) count(text);
  return total;
}

// (request_id, trace, error, too_many_texts, passed, version, route, texts, StartedCall | None, tokenize):
// inference.Started. `tokenize`: (texts, pairs | None) a version on HF tokenizers needs as ids, else None.
nb::tuple Answer(const std::string& request_id, const TraceContext& trace, std::optional<std::string> error,
                 bool too_many_texts, std::optional<std::string> passed, int texts,
                 std::optional<PyStartedCall> started = std::nullopt, bool needs_ids = false) {
  std::string version, route;
  nb::object call = nb::none(), tokenize = nb::none();
  if (started) {
    const StartedState& state = *started->state;
    version = state.routed.version_name;
    route = state.routed.route;
    if (needs_ids) {
      tokenize = nb::make_tuple(Strs(state.read()), state.owned.pairs.empty() ? nb::object(nb::none())
                                                                      : nb::object(Strs(state.owned.pairs)));
    }
    call = nb::cast(std::move(*started));
  }
  return nb::make_tuple(request_id, TraceTuple(trace), error, too_many_texts, passed, version, route, texts, call,
                        tokenize);
}

nb::tuple StartCall(PyRoutes& routes, nb::str model, nb::str version, nb::list inputs, nb::list outputs,
                    nb::list raw_input_contents, nb::handle scores, nb::handle routing_key,
                    long long max_texts_per_request, nb::handle aggregation, nb::handle priority,
                    nb::handle prompt_name, nb::handle dimensions, nb::handle embedding_type, nb::tuple headers,
                    std::optional<double> timeout_s,
                    PyCompletions& completions, uint64_t token, std::optional<long long> inline_chars,
                    nb::handle top_k, nb::handle threshold) {
  PreparedCall prepared = PrepareCall(RequestOf(inputs, outputs, raw_input_contents, scores, routing_key,
                                                aggregation, priority, prompt_name, dimensions, embedding_type,
                                                top_k, threshold),
                                      CallHeadersOf(headers), max_texts_per_request);
  const std::string& id = prepared.request_id;
  if (const auto* error = std::get_if<WireError>(&prepared.call)) {
    return Answer(id, prepared.trace, error->message, error->too_many_texts, std::nullopt, 0);
  }
  const DecodedCall& decoded = std::get<DecodedCall>(prepared.call);
  const int texts = static_cast<int>(decoded.texts.size());
  if (inline_chars && TextChars(decoded) > static_cast<size_t>(*inline_chars)) {
    return Answer(id, prepared.trace, std::nullopt, false, "long_texts", texts);
  }
  const std::string model_name(Utf8(model));
  auto routed = RouteCall(routes.holder->Load(), model_name, Utf8(version), prepared.routing_key, decoded,
                          /*caller_tokenizes=*/true);
  if (const auto* miss = std::get_if<CallMiss>(&routed)) {
    if (miss->refused) return Answer(id, prepared.trace, miss->refused->message, false, std::nullopt, texts);
    return Answer(id, prepared.trace, std::nullopt, false, kPassthroughReasons[static_cast<size_t>(miss->reason)],
                  texts);
  }
  auto state = std::make_shared<StartedState>();
  state->owned = Own(decoded);  // the request's views die with this crossing
  state->call = state->owned.View();
  state->routed = std::get<RoutedCall>(std::move(routed));
  state->shadow = ShadowCopy::Of(state->routed, model_name, state->call, id);
  state->model = model_name;
  state->completions = completions.completions;
  state->token = token;
  state->prompted = PromptedTexts(state->call, *state->routed.served);
  if (!state->prompted.empty()) state->call.texts.assign(state->prompted.begin(), state->prompted.end());
  PyStartedCall started{state, nullptr};
  Batcher& batcher = state->routed.version->batcher();
  if (!batcher.tokenizes()) {
    // Python tokenizes (HF tokenizers), unless the queue would refuse the call at one token a text anyway.
    std::optional<InferResult> refusal = batcher.Refusal(texts, DeadlineIn(timeout_s), state->call.bulk);
    if (!refusal) return Answer(id, prepared.trace, std::nullopt, false, std::nullopt, texts, std::move(started), true);
    state->shadow = nullptr;  // refused: nothing to compare
    state->submitted = true;
    Answered(state)(std::move(*refusal));
    return Answer(id, prepared.trace, std::nullopt, false, std::nullopt, texts, std::move(started));
  }
  state->submitted = true;
  {
    nb::gil_scoped_release release;
    started.handle = batcher.Submit(state->call.texts, DeadlineIn(timeout_s), Answered(state),
                                    /*may_run_here=*/false, state->call.pairs, state->call.bulk,
                                    state->per_token() ? &state->tokens : nullptr);
    if (state->shadow) state->shadow->Submit(state->owned.View(), DeadlineIn(timeout_s));
  }
  return Answer(id, prepared.trace, std::nullopt, false, std::nullopt, texts, std::move(started));
}

void SubmitIds(PyStartedCall& self, nb::handle ids, std::optional<double> timeout_s, double tokenize_s,
               std::vector<int> seconds, nb::handle tokens) {
  StartedState& state = *self.state;
  {
    std::lock_guard<std::mutex> lock(state.mutex);
    if (state.submitted || !state.leased) throw nb::value_error("submit_ids: the call was submitted or cancelled");
    state.submitted = true;
  }
  std::vector<std::vector<int64_t>> rows = IdRows(ids);
  if (!tokens.is_none()) state.tokens = TokenRowsOf(tokens);
  Batcher& batcher = state.routed.version->batcher();
  nb::gil_scoped_release release;
  self.handle = batcher.SubmitIds(std::move(rows), DeadlineIn(timeout_s), Answered(self.state), tokenize_s,
                                  std::move(seconds), state.call.bulk);
  if (state.shadow) state.shadow->Submit(state.owned.View(), DeadlineIn(timeout_s));
}

}  // namespace
}  // namespace ortserve

void BindCallPath(nb::module_& m) {
  nb::class_<ortserve::PyRoutes>(m, "Routes",
                                 "The route table both front ends read: the data plane owns it, the manager replaces "
                                 "it on every swap (set), and a call reads one snapshot, the old table or the new.")
      .def(nb::init<>())
      .def(
          "set",
          [](ortserve::PyRoutes& self, nb::dict routes) { self.holder->Store(ortserve::ToRouteTable(routes)); },
          "routes"_a,
          "Replace the table: {model: (split order, split upper, {version: ServedVersion}[, {version: "
          "VersionOutput}])}; a version without a VersionOutput answers LOGITS and passes classification on.");

  nb::class_<ortserve::PyStartedCall>(m, "StartedCall", "A ModelInfer start_call routed and leased.")
      .def("submit_ids", &ortserve::SubmitIds, "ids"_a, "timeout_s"_a.none(), "tokenize_s"_a,
           "seconds"_a = std::vector<int>{}, "tokens"_a.none() = nb::none(),
           "A version on HF tokenizers: the texts start_call gave to tokenize, as ids (one int64 array per row; "
           "`seconds`: per pair where its second text begins; `tokens`: a token classifier's [(spans int64 [T, 4], "
           "chars_read)] per row), into the batcher; the answer arrives as start_call's.")
      .def(
          "cancel",
          [](ortserve::PyStartedCall& self) {
            bool submitted;
            {
              std::lock_guard<std::mutex> lock(self.state->mutex);
              submitted = self.state->submitted;
            }
            if (!submitted) {  // never reached the batcher: nothing will answer it, its lease goes back now
              self.state->Release();
              return;
            }
            nb::gil_scoped_release release;
            if (self.handle) self.state->routed.version->batcher().Cancel(self.handle);
          },
          "The caller went away: its queued texts leave the queue and it is answered CANCELLED unless done already; "
          "one never submitted gives its lease back.");

  m.def("start_call", &ortserve::StartCall, "routes"_a, "model"_a, "version"_a, "inputs"_a, "outputs"_a,
        "raw_input_contents"_a, "scores"_a.none(), "routing_key"_a.none(), "max_texts_per_request"_a,
        "aggregation"_a.none(), "priority"_a.none(), "prompt_name"_a.none(), "dimensions"_a.none(),
        "embedding_type"_a.none(), "headers"_a,
        "timeout_s"_a.none(), "completions"_a, "token"_a, "inline_chars"_a.none(), "top_k"_a.none() = nb::none(),
        "threshold"_a.none() = nb::none(),
        "A ModelInfer in one crossing (call_path.h): prepare_call's steps, the version (pin, else the split), "
        "check_outputs, its lease, the prompt, and the batcher (tokenized here, GIL released). Returns (request_id, "
        "trace, error, too_many_texts, passed, version, route, texts, StartedCall | None, tokenize): error the "
        "rules' refusal, passed why the data plane left the call to Python (a passthrough reason, or 'long_texts': "
        "its texts pass inline_chars characters, None: any, so start it again off the event loop), tokenize the "
        "(texts, pairs | None) a version on HF tokenizers needs as ids (StartedCall.submit_ids), else None. A "
        "routed call's answer arrives in `completions` under `token` as (code, message, the reply's tensors as "
        "encode_outputs gives them | None, timings).");
}
