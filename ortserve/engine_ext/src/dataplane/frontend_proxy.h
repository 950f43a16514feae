// The native front end's way to the Python server (the backend): every call it does not answer itself goes on byte
// for byte, with the client's metadata (less what belongs to one hop) and deadline, and comes back with the backend's
// metadata. frontend.cc uses it for the registered methods it passes on and for every method nothing registered.
#pragma once

#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <string>

namespace ortserve {

// A registered unary method (the framework owns request and response) proxied to the backend's `method` (its full
// path); the reactor frees itself once done, and a cancelled caller cancels the backend's call.
grpc::ServerUnaryReactor* ProxyUnary(grpc::GenericStub& stub, const std::string& method,
                                     grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
                                     grpc::ByteBuffer* response);

// Any method no service registered (admin Status, unknown ones): read the one request, proxy, answer.
class GenericProxyService final : public grpc::CallbackGenericService {
 public:
  explicit GenericProxyService(grpc::GenericStub& stub) : stub_(stub) {}
  grpc::ServerGenericBidiReactor* CreateReactor(grpc::GenericCallbackServerContext* ctx) override;

 private:
  grpc::GenericStub& stub_;
};

}  // namespace ortserve
