#include "agent/cni_service/cni_agent_server.h"

#include <grpcpp/grpcpp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "agent/base/errors.h"
#include "agent/base/file_util.h"
#include "agent/base/grpc_deadline.h"
#include "agent/base/grpc_status.h"
#include "agent/base/logging.h"
#include "agent/base/status_macros.h"
#include "fabric/agent/v1/agent.grpc.pb.h"

namespace fabric::cni_service {
namespace {

// Marks answers that come from the agent itself, so the plugin can tell an
// agent-side kUnavailable (kubelet unreachable) from failing to reach the agent.
constexpr char kAnsweredByAgent[] = "fabric-agent-answered";

template <typename T>
grpc::Status Reply(grpc::ServerContext* ctx, absl::StatusOr<T> r, T* out) {
  ctx->AddTrailingMetadata(kAnsweredByAgent, "1");
  if (!r.ok()) return ToGrpcStatus(r.status());
  *out = std::move(*r);
  return grpc::Status::OK;
}

}  // namespace

class CniAgentServer::Impl final : public agentpb::CniAgent::Service {
 public:
  explicit Impl(CniService* service) : service_(service) {}

  grpc::Status Add(grpc::ServerContext* ctx, const agentpb::CniRequest* req,
                   agentpb::CniResponse* resp) override {
    return Reply(ctx, service_->Add(*req), resp);
  }
  grpc::Status Del(grpc::ServerContext* ctx, const agentpb::CniRequest* req,
                   agentpb::CniResponse* resp) override {
    return Reply(ctx, service_->Del(*req), resp);
  }
  grpc::Status Check(grpc::ServerContext* ctx, const agentpb::CniRequest* req,
                     agentpb::CniResponse* resp) override {
    return Reply(ctx, service_->Check(*req), resp);
  }
  grpc::Status Gc(grpc::ServerContext* ctx, const agentpb::GcRequest* req,
                  agentpb::GcResponse* resp) override {
    return Reply(ctx, service_->Gc(*req), resp);
  }
  grpc::Status Status(grpc::ServerContext* ctx, const agentpb::StatusRequest*,
                      agentpb::StatusResponse* resp) override {
    ctx->AddTrailingMetadata(kAnsweredByAgent, "1");
    *resp = service_->Status();
    return grpc::Status::OK;
  }

 private:
  CniService* service_;
};

CniAgentServer::CniAgentServer(CniService* service) : impl_(std::make_unique<Impl>(service)) {}

CniAgentServer::~CniAgentServer() { Stop(); }

absl::Status CniAgentServer::Start(const std::string& socket_path) {
  if (socket_path.size() >= 108) {
    return absl::InvalidArgumentError(
        absl::StrCat("agent socket path longer than 107 bytes: ", socket_path));
  }
  size_t slash = socket_path.rfind('/');
  if (slash != std::string::npos && slash > 0) {
    FABRIC_RETURN_IF_ERROR(MkdirAll(socket_path.substr(0, slash), 0700));
  }
  if (::unlink(socket_path.c_str()) != 0 && errno != ENOENT) {
    return ErrnoError(errno, "remove stale socket", socket_path);
  }
  grpc::ServerBuilder builder;
  builder.AddListeningPort(absl::StrCat("unix:", socket_path), grpc::InsecureServerCredentials());
  builder.RegisterService(impl_.get());
  server_ = builder.BuildAndStart();
  if (!server_) return absl::UnavailableError(absl::StrCat("cannot serve on ", socket_path));
  if (::chmod(socket_path.c_str(), 0600) != 0) {
    absl::Status s = ErrnoError(errno, "chmod 0600", socket_path);
    Stop();
    return s;
  }
  socket_path_ = socket_path;
  LogInfo(Component::kCni, "CNI agent API serving on {}", socket_path);
  return absl::OkStatus();
}

void CniAgentServer::Stop() {
  if (!server_) return;
  server_->Shutdown(GrpcDeadlineAfter(std::chrono::seconds(2)));
  server_.reset();
  ::unlink(socket_path_.c_str());
}

}  // namespace fabric::cni_service
