// The native front end: a grpc++ callback server on the public port (docs/architecture.md).
//
//   ModelInfer for a model in the native route table, on the codec's fast path -> Batcher -> reply
//   ServerLive, and ServerReady as the health of "" the owner sets, natively
//   everything else (other inference RPCs, admin Status, unknown methods, any ModelInfer it does not serve)
//       -> a generic unary proxy to the Python grpc.aio server on `backend`, so that errors, model readiness
//          and metadata keep one implementation
//   grpc.health.v1.Health and server reflection, natively (statuses set by the owner); open without an API key
//
// No Python in here: gRPC's threads never take the GIL. Thread-safe; Shutdown() is idempotent.
#pragma once

#include <cstddef>
#include <iterator>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "call_path.h"
#include "events.h"
#include "route.h"

namespace ortserve {

struct FrontendOptions {
  std::string address;  // "host:port" to listen on
  std::string backend;  // the Python server, e.g. "unix:/run/ortserve/backend.sock"
  int max_message_bytes = 16 << 20;  // defaults: service/config.Settings' (tests/service/test_settings_defaults.py)
  int max_header_bytes = 64 << 10;
  long long max_texts_per_request = 2048;
  std::string tls_cert, tls_key;  // PEM; both empty = plaintext
  std::string tls_client_ca;      // PEM; set = clients must present a certificate it signed
  // Keys a call must send as `authorization: Bearer KEY` (api_keys.h); empty: none asked. ModelInfer is checked here
  // (the calls passed on are checked by the Python server, which gets the metadata), ServerLive and ServerReady
  // too unless probes_open.
  std::vector<std::string> api_keys;
  bool probes_open = true;
};

class Frontend {
 public:
  // `routes`: the data plane's route table, which the owner replaces on every swap (a call sees the old table or
  // the new one); the Python front end reads the same holder.
  Frontend(FrontendOptions options, std::shared_ptr<EventSink> events, std::shared_ptr<const RouteHolder> routes);
  ~Frontend();  // Shutdown(0)
  Frontend(const Frontend&) = delete;
  Frontend& operator=(const Frontend&) = delete;

  // Binds and starts serving; returns the bound port. Throws std::runtime_error naming the address when it
  // cannot bind (SO_REUSEPORT is off: a port in use fails) or when called twice.
  int Start();
  // Health status of `service` ("" = the whole server). Before Start() it is applied at Start(). Ignored once
  // NotServing() or Shutdown() was called.
  void SetHealth(const std::string& service, bool serving);
  // The start of a graceful shutdown: every health status NOT_SERVING and ServerReady false, for good (later
  // SetHealth calls are ignored, as grpc's health service does after its own Shutdown()); calls are still served.
  void NotServing();
  // NotServing(), then no new calls, in-flight calls get up to grace_s, then the rest
  // are cancelled. Returns when the server is down. Idempotent.
  void Shutdown(double grace_s);
  int in_flight() const;  // native ModelInfer calls in progress
  // ModelInfer calls passed on to the Python server, by reason (kPassthroughReasons): each is a call the native
  // path could not serve, and a reason that grows says which (a model on the HF tokenizer, bad input, ...).
  std::vector<std::pair<std::string, long long>> passthrough() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace ortserve
