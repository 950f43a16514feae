// Proxying to the backend (frontend_proxy.h).
#include "frontend_proxy.h"

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

namespace ortserve {
namespace {

std::string_view View(grpc::string_ref s) { return {s.data(), s.size()}; }

// Headers that belong to one hop (HTTP/2 pseudo headers, gRPC's own, the channel's identity) and are made
// again by the next one. grpc-retry-pushback-ms is the exception on the way back: it is the backend's answer.
bool Forwardable(std::string_view key, bool to_client) {
  if (key.empty() || key[0] == ':') return false;
  if (key == "content-type" || key == "te" || key == "user-agent" || key == "host" || key == "accept-encoding") {
    return false;
  }
  if (key.substr(0, 5) == "grpc-") return to_client && key == "grpc-retry-pushback-ms";
  return true;
}

// One proxied unary call: shared by the server-side reactor and the client call's completion, so that
// whichever ends last frees it (the ClientContext must outlive the client call).
struct ProxyCall {
  grpc::ClientContext client;
  grpc::ByteBuffer request;   // generic calls only (raw methods forward the framework's buffer)
  grpc::ByteBuffer response;  // generic calls only
};

// The backend's initial or trailing metadata that goes back to the client, handed to `add` as (key, value).
template <typename Add>
void ForwardToClient(const std::multimap<grpc::string_ref, grpc::string_ref>& metadata, Add add) {
  for (const auto& [key, value] : metadata) {
    if (Forwardable(View(key), /*to_client=*/true)) {
      add(std::string(key.data(), key.size()), std::string(value.data(), value.size()));
    }
  }
}

void StartProxy(grpc::GenericStub& stub, const std::string& method, grpc::ServerContextBase& ctx,
                const std::shared_ptr<ProxyCall>& call, const grpc::ByteBuffer* request, grpc::ByteBuffer* response,
                std::function<void(grpc::Status)> done) {
  if (!request->Valid()) {
    // No request message was read: the call ended (its deadline passed, or the client cancelled) before it arrived.
    // Sending the empty buffer on would be an API misuse that aborts the process.
    const bool expired = ctx.deadline() <= std::chrono::system_clock::now();
    done(expired ? grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "deadline exceeded before the request was read")
                 : grpc::Status(grpc::StatusCode::CANCELLED, "the call ended before its request was read"));
    return;
  }
  for (const auto& [key, value] : ctx.client_metadata()) {
    if (Forwardable(View(key), /*to_client=*/false)) {
      call->client.AddMetadata(std::string(key.data(), key.size()), std::string(value.data(), value.size()));
    }
  }
  call->client.set_deadline(ctx.deadline());
  stub.UnaryCall(&call->client, method, grpc::StubOptions(), request, response,
                 [call, &ctx, done = std::move(done)](grpc::Status status) {
                   ForwardToClient(call->client.GetServerInitialMetadata(),
                                   [&](std::string k, std::string v) { ctx.AddInitialMetadata(k, v); });
                   ForwardToClient(call->client.GetServerTrailingMetadata(),
                                   [&](std::string k, std::string v) { ctx.AddTrailingMetadata(k, v); });
                   done(std::move(status));
                 });
}

// A registered unary method (the framework owns request and response) proxied to the backend.
class ProxyUnaryReactor final : public grpc::ServerUnaryReactor {
 public:
  ProxyUnaryReactor(grpc::GenericStub& stub, const std::string& method, grpc::CallbackServerContext* ctx,
                    const grpc::ByteBuffer* request, grpc::ByteBuffer* response)
      : call_(std::make_shared<ProxyCall>()) {
    StartProxy(stub, method, *ctx, call_, request, response, [this](grpc::Status status) { Finish(status); });
  }
  void OnCancel() override { call_->client.TryCancel(); }
  void OnDone() override { delete this; }

 private:
  std::shared_ptr<ProxyCall> call_;
};

// Any method no service registered (admin Status, unknown ones): read the one request, proxy, answer.
class GenericProxyReactor final : public grpc::ServerGenericBidiReactor {
 public:
  GenericProxyReactor(grpc::GenericStub& stub, grpc::GenericCallbackServerContext* ctx)
      : stub_(stub), ctx_(ctx), call_(std::make_shared<ProxyCall>()) {
    StartRead(&call_->request);
  }
  void OnReadDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status(grpc::StatusCode::INTERNAL, "the call ended before its request message arrived"));
      return;
    }
    StartProxy(stub_, ctx_->method(), *ctx_, call_, &call_->request, &call_->response, [this](grpc::Status status) {
      if (status.ok()) {
        StartWriteAndFinish(&call_->response, grpc::WriteOptions(), status);
      } else {
        Finish(status);
      }
    });
  }
  void OnCancel() override { call_->client.TryCancel(); }
  void OnDone() override { delete this; }

 private:
  grpc::GenericStub& stub_;
  grpc::GenericCallbackServerContext* ctx_;
  std::shared_ptr<ProxyCall> call_;
};

}  // namespace

grpc::ServerUnaryReactor* ProxyUnary(grpc::GenericStub& stub, const std::string& method,
                                     grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
                                     grpc::ByteBuffer* response) {
  return new ProxyUnaryReactor(stub, method, ctx, request, response);
}

grpc::ServerGenericBidiReactor* GenericProxyService::CreateReactor(grpc::GenericCallbackServerContext* ctx) {
  return new GenericProxyReactor(stub_, ctx);
}

}  // namespace ortserve
