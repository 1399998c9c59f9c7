// api::Server (include/deepinfer/server.h): the public face of OpenAiServer. The server works on the engine's
// and the model's internals (src/server parses requests into the engine's types and encodes its outputs); the
// public API itself never includes server/ (tests/layering/seams.mjs).
#include "deepinfer/server.h"

#include <utility>

#include "api/engine_impl.h"
#include "api/model_impl.h"
#include "server/openai_server.h"

namespace deepinfer::api {
namespace {

class ServerImpl final : public Server {
 public:
  ServerImpl(Engine& engine, const Model& model, const ServerOptions& options)
      : server_(InternalEngine(engine), InternalModel(model), options) {}

  Status Listen() override { return server_.Listen(); }
  int port() const override { return server_.port(); }
  void Run() override { server_.Run(); }
  void Stop() override { server_.Stop(); }
  void CloseAll() override { server_.CloseAll(); }
  int64_t in_flight() const override { return server_.in_flight(); }
  const std::string& model_name() const override { return server_.model_name(); }

 private:
  OpenAiServer server_;
};

}  // namespace

StatusOr<std::unique_ptr<Server>> Server::Create(Engine& engine, const Model& model, const ServerOptions& options) {
  if (options.port < 0 || options.port > 65535) return InvalidArgument("port must be in [0, 65535]");
  return std::unique_ptr<Server>(std::make_unique<ServerImpl>(engine, model, options));
}

}  // namespace deepinfer::api
