#include "frontend.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/support/proto_buffer_reader.h>

#include <google/protobuf/arena.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <iterator>
#include <cmath>
#include <map>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "api_keys.h"
#include "grpc_service.grpc.pb.h"
#include "infer_codec.h"
#include "frontend_proxy.h"
#include "served_version.h"
#include "shadow_copy.h"

namespace ortserve {
namespace {

using inference::GRPCInferenceService;

constexpr const char* kService = "/inference.GRPCInferenceService/";

std::string_view View(grpc::string_ref s) { return {s.data(), s.size()}; }

// The last value of a client metadata key (dict(invocation_metadata()) in Python keeps the last), or "".
std::string_view ClientHeader(const grpc::ServerContextBase& ctx, std::string_view key) {
  std::string_view value;
  const auto& md = ctx.client_metadata();
  auto [begin, end] = md.equal_range(grpc::string_ref(key.data(), key.size()));
  for (auto it = begin; it != end; ++it) value = View(it->second);
  return value;
}

// The server context's deadline on the steady clock; nullopt when the client set none.
std::optional<Clock::time_point> SteadyDeadline(const grpc::ServerContextBase& ctx) {
  const auto deadline = ctx.deadline();
  if (deadline == std::chrono::system_clock::time_point::max()) return std::nullopt;
  const auto left = deadline - std::chrono::system_clock::now();
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(left);
}

// The parsed request, on an arena: the texts handed to the batcher are views into it.
struct ParsedRequest {
  google::protobuf::Arena arena;
  inference::ModelInferRequest* request = google::protobuf::Arena::CreateMessage<inference::ModelInferRequest>(&arena);
};

}  // namespace

struct Frontend::Impl {
  FrontendOptions options;
  std::shared_ptr<EventSink> events;
  std::shared_ptr<const RouteHolder> routes;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<grpc::GenericStub> stub;
  std::atomic<int> in_flight{0};
  std::array<std::atomic<long long>, std::size(kPassthroughReasons)> passed_on{};  // by kPassthroughReasons index

  // Declared before `server`: a grpc::Server must go before the services it serves.
  std::unique_ptr<grpc::Service> inference_service;
  std::unique_ptr<grpc::CallbackGenericService> generic_service;

  std::mutex mutex;  // guards what follows
  std::unique_ptr<grpc::Server> server;
  std::map<std::string, bool> health;  // set before Start()
  std::atomic<bool> ready{false};      // ServerReady: the health of "" (the whole server)
  bool started = false, stopped = false, not_serving = false;

  grpc::ServerUnaryReactor* ModelInfer(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
                                       grpc::ByteBuffer* response);
  // UNAUTHENTICATED, finished, when API keys are set and the call sends none of them; nullptr when it may go on.
  grpc::ServerUnaryReactor* Unauthenticated(grpc::CallbackServerContext* ctx, bool probe) const;
  grpc::ServerUnaryReactor* Proxy(const char* method, grpc::CallbackServerContext* ctx,
                                  const grpc::ByteBuffer* request, grpc::ByteBuffer* response) {
    return ProxyUnary(*stub, std::string(kService) + method, ctx, request, response);
  }
  // A ModelInfer the native path does not serve, counted by why.
  grpc::ServerUnaryReactor* PassOn(Passthrough reason, grpc::CallbackServerContext* ctx,
                                   const grpc::ByteBuffer* request, grpc::ByteBuffer* response) {
    passed_on[static_cast<size_t>(reason)].fetch_add(1, std::memory_order_relaxed);
    return Proxy("ModelInfer", ctx, request, response);
  }
};

namespace {

bool Parse(const grpc::ByteBuffer* buffer, google::protobuf::Message* request) {
  // The reader only reads: the same buffer is forwarded as is when the call is proxied.
  grpc::ProtoBufferReader reader(const_cast<grpc::ByteBuffer*>(buffer));
  return request->ParseFromZeroCopyStream(&reader);
}

// The inference service, registered (so that reflection lists it) with every method raw: ModelInfer is
// parsed here only when it may be served natively; ServerLive and ServerReady are answered here (an empty call
// must not cost a hop to Python: clients poll them, and they are the benchmark's floor for a native call); the
// others go to the backend byte for byte.
using RawInferenceBase = GRPCInferenceService::WithRawCallbackMethod_ServerLive<
    GRPCInferenceService::WithRawCallbackMethod_ServerReady<GRPCInferenceService::WithRawCallbackMethod_ModelReady<
        GRPCInferenceService::WithRawCallbackMethod_ServerMetadata<
            GRPCInferenceService::WithRawCallbackMethod_ModelMetadata<
                GRPCInferenceService::WithRawCallbackMethod_ModelInfer<GRPCInferenceService::Service>>>>>>;

class InferenceService final : public RawInferenceBase {
 public:
  explicit InferenceService(Frontend::Impl& impl) : impl_(impl) {}
  using Ctx = grpc::CallbackServerContext;
  using Buf = grpc::ByteBuffer;
  // Live while this process answers, as the Python handler says.
  grpc::ServerUnaryReactor* ServerLive(Ctx* c, const Buf* q, Buf* r) override {
    if (auto* refused = impl_.Unauthenticated(c, /*probe=*/true)) return refused;
    inference::ServerLiveRequest request;
    inference::ServerLiveResponse reply;
    reply.set_live(true);
    return Answer("ServerLive", c, q, r, request, reply);
  }
  // Ready as the health of "" the owner sets (ready for traffic; NOT_SERVING from the start of a shutdown).
  grpc::ServerUnaryReactor* ServerReady(Ctx* c, const Buf* q, Buf* r) override {
    if (auto* refused = impl_.Unauthenticated(c, /*probe=*/true)) return refused;
    inference::ServerReadyRequest request;
    inference::ServerReadyResponse reply;
    reply.set_ready(impl_.ready.load());
    return Answer("ServerReady", c, q, r, request, reply);
  }
  grpc::ServerUnaryReactor* ModelReady(Ctx* c, const Buf* q, Buf* r) override {
    return impl_.Proxy("ModelReady", c, q, r);
  }
  grpc::ServerUnaryReactor* ServerMetadata(Ctx* c, const Buf* q, Buf* r) override {
    return impl_.Proxy("ServerMetadata", c, q, r);
  }
  grpc::ServerUnaryReactor* ModelMetadata(Ctx* c, const Buf* q, Buf* r) override {
    return impl_.Proxy("ModelMetadata", c, q, r);
  }
  grpc::ServerUnaryReactor* ModelInfer(Ctx* c, const Buf* q, Buf* r) override { return impl_.ModelInfer(c, q, r); }

 private:
  // Answers `reply` when the request parses; else the backend answers (its error message, as for any call).
  grpc::ServerUnaryReactor* Answer(const char* method, Ctx* ctx, const Buf* q, Buf* r,
                                   google::protobuf::Message& request, const google::protobuf::Message& reply) {
    if (!Parse(q, &request)) return impl_.Proxy(method, ctx, q, r);
    bool own = false;
    const grpc::Status status = grpc::SerializationTraits<google::protobuf::Message>::Serialize(reply, r, &own);
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    reactor->Finish(status);
    return reactor;
  }

  Frontend::Impl& impl_;
};

// One natively served ModelInfer. The batcher's done runs Finish as its last step; OnCancel comes only after
// the handler returned this reactor (so the call handle is set by then) and before OnDone.
class InferReactor final : public grpc::ServerUnaryReactor {
 public:
  struct Setup {
    Frontend::Impl* impl;
    grpc::CallbackServerContext* ctx;
    grpc::ByteBuffer* response;
    std::unique_ptr<ParsedRequest> parsed;
    DecodedCall decoded;  // views into `parsed`
    RoutedCall routed;    // the leased version
    std::string request_id;
    Clock::time_point arrived;
    TraceContext trace;
  };

  explicit InferReactor(Setup setup) : s_(std::move(setup)) { s_.impl->in_flight.fetch_add(1); }

  void Start() {
    shadow_ = ShadowCopy::Of(s_.routed, s_.parsed->request->model_name(), s_.decoded, s_.request_id);
    const std::shared_ptr<ShadowCopy> shadow = shadow_;  // Done reads shadow_ (Live) on the answering thread
    DecodedCall unprompted;
    if (shadow) unprompted = s_.decoded;  // views into the request, which outlives Start
    const std::optional<Clock::time_point> deadline = SteadyDeadline(*s_.ctx);
    ApplyPrompt();
    const std::vector<std::string_view>& texts = s_.decoded.texts;
    texts_ = static_cast<int>(texts.size());
    // may_run_here: a lone call runs on this gRPC thread (Submit's comment says when); the other callback
    // threads keep serving meanwhile, and Finish before this handler returns is allowed.
    auto handle = s_.routed.version->batcher().Submit(
        texts, deadline, [this](InferResult&& result) { Done(std::move(result)); },
        /*may_run_here=*/true, s_.decoded.pairs, s_.decoded.bulk, s_.routed.served->per_token ? &tokens_ : nullptr);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      handle_ = std::move(handle);
    }
    // After the live call (which may have run and been answered here): `shadow` keeps what it needs, not `this`.
    if (shadow) shadow->Submit(unprompted, deadline);
  }

  void OnCancel() override {
    CallHandle handle;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (finished_) return;
      handle = handle_;
    }
    if (handle) s_.routed.version->batcher().Cancel(handle);
  }

  void OnDone() override {
    s_.impl->in_flight.fetch_sub(1);
    delete this;
  }

 private:
  void Done(InferResult&& result) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      finished_ = true;
    }
    if (shadow_) shadow_->Live(result, s_.routed.served->per_token ? &tokens_ : nullptr);
    grpc::CallbackServerContext& ctx = *s_.ctx;
    grpc::Status status;
    ctx.AddTrailingMetadata("x-request-id", s_.request_id);
    const std::string& model = s_.parsed->request->model_name();
    const std::string& version = s_.routed.version_name;
    std::vector<ReplyTensor> tensors = ReplyOf(result, s_.decoded, *s_.routed.served,
                                               s_.routed.served->per_token ? &tokens_ : nullptr, model, version);
    if (result.code == Code::kOk) {
      google::protobuf::Arena arena;
      auto* reply = google::protobuf::Arena::CreateMessage<inference::ModelInferResponse>(&arena);
      reply->set_model_name(model);
      reply->set_model_version(version);
      reply->set_id(s_.parsed->request->id());
      WriteOutputs(*reply, std::move(tensors));
      bool own = false;
      status = grpc::SerializationTraits<inference::ModelInferResponse>::Serialize(*reply, s_.response, &own);
      ctx.AddTrailingMetadata("x-model-version", version);
    } else {
      status = grpc::Status(static_cast<grpc::StatusCode>(result.code), result.message);
      if (result.code == Code::kResourceExhausted) {
        ctx.AddTrailingMetadata("grpc-retry-pushback-ms", std::to_string(PushbackMs(result.retry_after_s)));
      }
    }
    s_.routed.version->Release();
    if (s_.impl->events) {
      RequestEvent event;
      event.request_id = s_.request_id;
      event.model = s_.parsed->request->model_name();
      event.version = s_.routed.version_name;
      event.route = s_.routed.route;
      event.texts = texts_;
      event.batch_size = result.batch_size;
      event.queue_s = result.queue_s;
      event.tokenize_s = result.tokenize_s;
      event.engine_s = result.engine_s;
      event.total_s = std::chrono::duration<double>(Clock::now() - s_.arrived).count();
      event.ended_unix = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
      event.status = status.ok() ? "OK" : CodeName(result.code == Code::kOk ? Code::kInternal : result.code);
      event.error = status.ok() ? std::string() : status.error_message();
      event.trace_id = std::move(s_.trace.trace_id);
      event.parent_span_id = std::move(s_.trace.parent_span_id);
      event.tracestate = std::move(s_.trace.tracestate);
      event.sampled = s_.trace.sampled;
      s_.impl->events->Push(std::move(event));
    }
    Finish(status);  // last: OnDone may delete this at once
  }

  // The call's prompt before each text (PromptedTexts): the texts then view this reactor's own copies.
  void ApplyPrompt() {
    prompted_ = PromptedTexts(s_.decoded, *s_.routed.served);
    if (prompted_.empty()) return;
    s_.decoded.texts.assign(prompted_.begin(), prompted_.end());
  }

  Setup s_;
  std::vector<std::string> prompted_;  // the texts after the call's prompt; empty when it names none
  TokenRows tokens_;  // a token classifier's: Submit fills it before it queues the call, Done reads it
  std::shared_ptr<ShadowCopy> shadow_;  // set before Submit, read by Done
  int texts_ = 0;
  std::mutex mutex_;
  CallHandle handle_;
  bool finished_ = false;
};

}  // namespace

grpc::ServerUnaryReactor* Frontend::Impl::Unauthenticated(grpc::CallbackServerContext* ctx, bool probe) const {
  if (options.api_keys.empty() || (probe && options.probes_open)) return nullptr;
  if (KeyAccepted(BearerKey(ClientHeader(*ctx, "authorization")), options.api_keys)) return nullptr;
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  reactor->Finish(grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                               "this server asks for an API key: send the metadata 'authorization: Bearer <key>'"));
  return reactor;
}

grpc::ServerUnaryReactor* Frontend::Impl::ModelInfer(grpc::CallbackServerContext* ctx,
                                                     const grpc::ByteBuffer* request, grpc::ByteBuffer* response) {
  if (auto* refused = Unauthenticated(ctx, /*probe=*/false)) return refused;
  const auto arrived = Clock::now();
  auto parsed = std::make_unique<ParsedRequest>();
  if (!request->Valid()) return Proxy("ModelInfer", ctx, request, response);  // no message: answered there, not sent
  if (!Parse(request, parsed->request)) return PassOn(Passthrough::kUnparsable, ctx, request, response);
  const inference::ModelInferRequest& req = *parsed->request;
  // A call the rules refuse goes to the Python server, which answers it with the same rules' message and logs it.
  PreparedCall prepared = PrepareCall(
      ToWire(req),
      CallHeaders{ClientHeader(*ctx, "x-request-id"), ClientHeader(*ctx, "x-routing-key"),
                  TraceHeaders{ClientHeader(*ctx, "traceparent"), ClientHeader(*ctx, "tracestate"),
                               ClientHeader(*ctx, "b3"), ClientHeader(*ctx, "x-b3-traceid"),
                               ClientHeader(*ctx, "x-b3-spanid"), ClientHeader(*ctx, "x-b3-sampled"),
                               ClientHeader(*ctx, "x-b3-flags")}},
      options.max_texts_per_request);
  if (std::holds_alternative<WireError>(prepared.call)) return PassOn(Passthrough::kBadInput, ctx, request, response);
  DecodedCall& call = std::get<DecodedCall>(prepared.call);
  auto routed = RouteCall(routes->Load(), req.model_name(), req.model_version(), prepared.routing_key, call);
  if (const auto* miss = std::get_if<CallMiss>(&routed)) return PassOn(miss->reason, ctx, request, response);

  auto* reactor = new InferReactor(InferReactor::Setup{this, ctx, response, std::move(parsed), std::move(call),
                                                       std::get<RoutedCall>(std::move(routed)),
                                                       std::move(prepared.request_id), arrived,
                                                       std::move(prepared.trace)});
  reactor->Start();
  return reactor;
}

Frontend::Frontend(FrontendOptions options, std::shared_ptr<EventSink> events,
                   std::shared_ptr<const RouteHolder> routes)
    : impl_(std::make_unique<Impl>()) {
  if (!routes) throw std::invalid_argument("a Frontend needs the data plane's route holder");
  impl_->options = std::move(options);
  impl_->events = std::move(events);
  impl_->routes = std::move(routes);
  grpc::ChannelArguments args;
  // The front end already enforces the public limit; the backend hop carries whatever it let through.
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  impl_->channel = grpc::CreateCustomChannel(impl_->options.backend, grpc::InsecureChannelCredentials(), args);
  impl_->stub = std::make_unique<grpc::GenericStub>(impl_->channel);
}

Frontend::~Frontend() { Shutdown(0); }

namespace {

std::shared_ptr<grpc::ServerCredentials> Credentials(const FrontendOptions& o) {
  if (o.tls_cert.empty() && o.tls_key.empty()) return grpc::InsecureServerCredentials();
  if (o.tls_cert.empty() || o.tls_key.empty()) {
    throw std::runtime_error("TLS needs both a certificate and its private key (PEM)");
  }
  grpc::SslServerCredentialsOptions ssl(o.tls_client_ca.empty()
                                            ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                                            : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  ssl.pem_root_certs = o.tls_client_ca;
  ssl.pem_key_cert_pairs.push_back({o.tls_key, o.tls_cert});
  return grpc::SslServerCredentials(ssl);
}

}  // namespace

int Frontend::Start() {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  if (impl_->started || impl_->stopped) throw std::runtime_error("Frontend.start() may be called only once");
  static std::once_flag global;
  std::call_once(global, [] {
    grpc::EnableDefaultHealthCheckService(true);
    grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  });
  impl_->inference_service = std::make_unique<InferenceService>(*impl_);
  impl_->generic_service = std::make_unique<GenericProxyService>(*impl_->stub);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(impl_->options.address, Credentials(impl_->options), &port);
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);  // a port clash must fail, not share
  // grpc++ 1.51 fails every call on the connection when one call's header block passes this limit: set above what
  // a mesh forwards (Envoy: 60 KiB), that can only come from a caller that bypasses the mesh.
  builder.AddChannelArgument(GRPC_ARG_MAX_METADATA_SIZE, impl_->options.max_header_bytes);
  builder.SetMaxReceiveMessageSize(impl_->options.max_message_bytes);
  builder.SetMaxSendMessageSize(impl_->options.max_message_bytes);
  builder.RegisterService(impl_->inference_service.get());
  builder.RegisterCallbackGenericService(impl_->generic_service.get());
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || port == 0) {
    if (server) server->Shutdown(std::chrono::system_clock::now());
    impl_->stopped = true;  // a Frontend binds once; make a new one to retry
    throw std::runtime_error("cannot listen on " + impl_->options.address +
                             " (address in use, not resolvable, or not permitted)");
  }
  if (grpc::HealthCheckServiceInterface* health = server->GetHealthCheckService()) {
    for (const auto& [service, serving] : impl_->health) health->SetServingStatus(service, serving);
  }
  impl_->server = std::move(server);
  impl_->started = true;
  return port;
}

void Frontend::SetHealth(const std::string& service, bool serving) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  if (impl_->stopped || impl_->not_serving) return;
  if (service.empty()) impl_->ready.store(serving);
  if (impl_->server) {
    if (auto* health = impl_->server->GetHealthCheckService()) health->SetServingStatus(service, serving);
  } else {
    impl_->health[service] = serving;
  }
}

void Frontend::NotServing() {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  if (impl_->not_serving) return;
  impl_->not_serving = true;
  impl_->ready.store(false);
  if (impl_->server) {
    if (auto* health = impl_->server->GetHealthCheckService()) health->Shutdown();
  } else {
    for (auto& entry : impl_->health) entry.second = false;  // what Start() will apply
  }
}

void Frontend::Shutdown(double grace_s) {
  NotServing();  // before the port closes
  std::unique_ptr<grpc::Server> server;
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    if (impl_->stopped) return;
    impl_->stopped = true;
    server = std::move(impl_->server);
  }
  if (!server) return;
  const auto grace = std::chrono::duration_cast<std::chrono::system_clock::duration>(
      std::chrono::duration<double>(std::max(0.0, grace_s)));
  server->Shutdown(std::chrono::system_clock::now() + grace);
  server->Wait();
}

int Frontend::in_flight() const { return impl_->in_flight.load(); }

std::vector<std::pair<std::string, long long>> Frontend::passthrough() const {
  std::vector<std::pair<std::string, long long>> counts;
  for (size_t i = 0; i < std::size(kPassthroughReasons); ++i) {
    counts.emplace_back(kPassthroughReasons[i], impl_->passed_on[i].load(std::memory_order_relaxed));
  }
  return counts;
}

}  // namespace ortserve
