#include "plugin/cni/agent_client.h"

#include <grpcpp/grpcpp.h>
#include <sys/stat.h>

#include "absl/strings/str_cat.h"
#include "agent/base/grpc_deadline.h"
#include "agent/base/grpc_status.h"
#include "fabric/agent/v1/agent.grpc.pb.h"

namespace fabric::cni {
namespace {

class GrpcAgentClient : public AgentClient {
 public:
  GrpcAgentClient(std::string socket_path, std::chrono::milliseconds timeout)
      : socket_path_(std::move(socket_path)), timeout_(timeout) {
    channel_ = grpc::CreateChannel(absl::StrCat("unix:", socket_path_),
                                   grpc::InsecureChannelCredentials());
    stub_ = agentpb::CniAgent::NewStub(channel_);
  }

  absl::StatusOr<agentpb::CniResponse> Add(const agentpb::CniRequest& req) override {
    return Call<agentpb::CniResponse>(
        [&](grpc::ClientContext* c, agentpb::CniResponse* r) { return stub_->Add(c, req, r); });
  }
  absl::StatusOr<agentpb::CniResponse> Del(const agentpb::CniRequest& req) override {
    return Call<agentpb::CniResponse>(
        [&](grpc::ClientContext* c, agentpb::CniResponse* r) { return stub_->Del(c, req, r); });
  }
  absl::StatusOr<agentpb::CniResponse> Check(const agentpb::CniRequest& req) override {
    return Call<agentpb::CniResponse>(
        [&](grpc::ClientContext* c, agentpb::CniResponse* r) { return stub_->Check(c, req, r); });
  }
  absl::StatusOr<agentpb::GcResponse> Gc(const agentpb::GcRequest& req) override {
    return Call<agentpb::GcResponse>(
        [&](grpc::ClientContext* c, agentpb::GcResponse* r) { return stub_->Gc(c, req, r); });
  }
  absl::StatusOr<agentpb::StatusResponse> Status() override {
    agentpb::StatusRequest req;
    return Call<agentpb::StatusResponse>([&](grpc::ClientContext* c, agentpb::StatusResponse* r) {
      return stub_->Status(c, req, r);
    });
  }
  bool last_failure_unreachable() const override { return unreachable_; }

 private:
  template <typename Resp, typename Fn>
  absl::StatusOr<Resp> Call(Fn fn) {
    unreachable_ = false;
    struct stat st;
    if (::stat(socket_path_.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode)) {
      unreachable_ = true;
      return absl::UnavailableError(
          absl::StrCat("fabric agent unreachable: no socket at ", socket_path_));
    }
    grpc::ClientContext ctx;
    ctx.set_deadline(GrpcDeadlineAfter(timeout_));
    Resp resp;
    grpc::Status s = fn(&ctx, &resp);
    if (s.ok()) return resp;
    std::string msg = s.error_message();
    // The agent tags every answer; an error without the tag never reached it
    // (agent stopped, stale socket, deadline while connecting).
    bool answered = ctx.GetServerTrailingMetadata().count("fabric-agent-answered") > 0;
    if (!answered && (s.error_code() == grpc::StatusCode::UNAVAILABLE ||
                      s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED ||
                      s.error_code() == grpc::StatusCode::UNIMPLEMENTED)) {
      unreachable_ = true;
      return absl::UnavailableError(
          absl::StrCat("fabric agent unreachable at ", socket_path_, ": ", msg));
    }
    return FromGrpcStatus(s);
  }

  std::string socket_path_;
  std::chrono::milliseconds timeout_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<agentpb::CniAgent::Stub> stub_;
  bool unreachable_ = false;
};

}  // namespace

std::unique_ptr<AgentClient> NewGrpcAgentClient(const std::string& socket_path,
                                                std::chrono::milliseconds timeout) {
  return std::make_unique<GrpcAgentClient>(socket_path, timeout);
}

}  // namespace fabric::cni
