#include "tools/fabricctl/bench.h"

#include <fmt/format.h>
#include <rdma/fi_errno.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "agent/base/errors.h"
#include "agent/base/json_text.h"
#include "agent/libfabric/fabric_error.h"
#include "tools/fabricctl/bench_endpoint.h"
#include "tools/fabricctl/bench_ops.h"
#include "tools/fabricctl/bench_protocol.h"
#include "tools/fabricctl/check_verdict.h"
#include "tools/fabricctl/fid.h"

namespace fabric::fabricctl {
namespace {

using bench_detail::Clock;
using bench_detail::Endpoint;
using bench_detail::Failure;
using bench_detail::FailWith;
using bench_detail::InsertPeer;
using bench_detail::Op;
using bench_detail::OpenEndpoint;
using bench_detail::OpenFabric;
using bench_detail::PollCq;
using bench_detail::RunPhase;
using bench_detail::Validate;

constexpr double kHandshakeTimeoutS = 60;
constexpr uint32_t kWelcomeOk = 0;

std::string NodeFor(const std::string& provider, int control_fd) {
  if (!ProviderUsesIpAddressing(CoreProviderName(provider))) return "";
  auto local = LocalAddress(control_fd);
  return local.ok() ? *local : "";
}

// ---- server -------------------------------------------------------------

int RunServer(const BenchOptions& o, int listen_fd, double accept_timeout_s, bool verbose) {
  auto fail = [&](const Failure& f) {
    fmt::print(stderr, "fabricctl bench server: {}\n", f.message);
    return f.exit_code;
  };
  auto conn = AcceptOne(listen_fd, accept_timeout_s);
  if (!conn.ok()) return fail(FailWith(conn.status()));
  int fd = conn->get();
  auto frame = RecvFrame(fd, kHandshakeTimeoutS);
  // A forked server whose client gave up before saying hello (provider
  // missing or refused) has nothing to add: the client said why.
  if (!frame.ok() && !verbose && absl::IsUnavailable(frame.status())) return kExitError;
  if (!frame.ok()) return fail(FailWith(frame.status()));
  auto hello = DecodeHello(*frame);
  if (!hello.ok()) return fail(FailWith(hello.status()));
  Welcome welcome;
  auto refuse = [&](const Failure& f) {
    welcome.status = static_cast<uint32_t>(f.exit_code);
    welcome.message = f.message;
    (void)SendFrame(fd, EncodeWelcome(welcome));
    return fail(f);
  };
  if (hello->threads == 0 || hello->threads > 256 || hello->size == 0 ||
      hello->size > 16ull * 1024 * kMiB || hello->endpoint_names.size() != hello->threads) {
    return refuse({kExitUsage, "client sent an invalid size/threads"});
  }
  // The server measures nothing; the client's provider rules, and the same
  // guard applies here: a server on another provider could not talk anyway.
  auto of = OpenFabric(hello->provider, o.domain, NodeFor(hello->provider, fd));
  if (!of.ok()) return refuse(of.failure);
  welcome.provider = of.value->provider();
  welcome.fabric = of.value->fabric_name();
  welcome.domain = of.value->domain_name();
  if (auto s = CheckOpenedProvider(hello->provider, welcome.provider); !s.ok()) {
    return refuse(FailWith(s, kExitProviderMismatch));
  }
  if (verbose) {
    fmt::print(stderr, "server: provider {} fabric {} domain {}; client {} on {}\n",
               welcome.provider, welcome.fabric, welcome.domain, hello->client_provider,
               hello->client_domain);
  }
  std::vector<std::unique_ptr<Endpoint>> eps;
  for (uint32_t i = 0; i < hello->threads; ++i) {
    auto e = OpenEndpoint(*of.value, hello->size, 0x5e0000 + i);
    if (!e.ok()) return refuse(FailWith(e.status()));
    if (auto s = InsertPeer(**e, hello->endpoint_names[i]); !s.ok()) return refuse(FailWith(s));
    welcome.buffers.push_back({(*e)->name, (*e)->rma_addr, (*e)->key});
    eps.push_back(*std::move(e));
  }
  if (auto s = SendFrame(fd, EncodeWelcome(welcome)); !s.ok()) return fail(FailWith(s));
  // Passive target: providers with manual progress (tcp;ofi_rxm, shm) only
  // serve RMA while the target polls its CQ, so poll until the client is done.
  fi_cq_entry entries[16];
  for (uint64_t iter = 0;; ++iter) {
    for (auto& e : eps) {
      if (auto n = PollCq(*e, entries, 16); !n.ok()) return fail(FailWith(n.status()));
    }
    if ((iter & 1023) == 0 && Readable(fd)) break;
  }
  auto done = RecvFrame(fd, kHandshakeTimeoutS);
  if (!done.ok()) return fail(FailWith(done.status()));
  if (auto s = ExpectEmpty(*done, FrameType::kDone); !s.ok()) return fail(FailWith(s));
  (void)SendFrame(fd, EncodeEmpty(FrameType::kBye));
  if (verbose) fmt::print(stderr, "server: client done\n");
  return kExitOk;
}

// ---- client -------------------------------------------------------------

int RunClient(const BenchOptions& o, int fd) {
  auto fail = [&](const Failure& f) {
    fmt::print(stderr, "fabricctl bench: {}\n", f.message);
    return f.exit_code;
  };
  std::FILE* first = o.format == OutputFormat::kJson ? stderr : stdout;
  auto of = OpenFabric(o.provider, o.domain, NodeFor(o.provider, fd));
  if (!of.ok()) return fail(of.failure);
  BenchResult r;
  r.provider_requested = o.provider;
  r.provider = of.value->provider();
  r.fabric = of.value->fabric_name();
  r.domain = of.value->domain_name();
  r.mr_mode = MrModeNames(of.value->info->domain_attr->mr_mode);
  r.size = o.size;
  r.batch = o.batch;
  r.threads = o.threads;
  r.duration_s = o.duration_s;
  // First line, before anything can go wrong: what libfabric really opened.
  fmt::print(first, "provider: {} (requested {})  fabric: {}  domain: {}\n", r.provider,
             r.provider_requested, r.fabric, r.domain);
  std::fflush(first);
  if (auto s = CheckOpenedProvider(o.provider, r.provider); !s.ok()) {
    return fail(FailWith(s, kExitProviderMismatch));
  }
  std::vector<std::unique_ptr<Endpoint>> eps;
  Hello hello{o.provider, o.size, o.batch, o.threads, r.provider, r.domain, {}};
  for (uint32_t i = 0; i < o.threads; ++i) {
    auto e = OpenEndpoint(*of.value, o.size, 0xc10000 + i);
    if (!e.ok()) return fail(FailWith(e.status()));
    hello.endpoint_names.push_back((*e)->name);
    eps.push_back(*std::move(e));
  }
  if (auto s = SendFrame(fd, EncodeHello(hello)); !s.ok()) return fail(FailWith(s));
  auto frame = RecvFrame(fd, kHandshakeTimeoutS);
  if (!frame.ok()) return fail(FailWith(frame.status()));
  auto welcome = DecodeWelcome(*frame);
  if (!welcome.ok()) return fail(FailWith(welcome.status()));
  if (welcome->status != kWelcomeOk) {
    return fail({static_cast<int>(welcome->status), "server refused: " + welcome->message});
  }
  if (welcome->buffers.size() != eps.size()) {
    return fail({kExitError, "server answered with the wrong number of endpoints"});
  }
  r.peer_provider = welcome->provider;
  r.peer_domain = welcome->domain;
  fmt::print(first, "peer:     {}  fabric: {}  domain: {}\n", welcome->provider, welcome->fabric,
             welcome->domain);
  fmt::print(first, "mr_mode:  {}  size {}  batch {}  threads {}  {} s per operation\n",
             r.mr_mode.empty() ? "none" : fmt::format("{}", fmt::join(r.mr_mode, "|")),
             FormatBytes(o.size), o.batch, o.threads, o.duration_s);
  std::fflush(first);
  for (size_t i = 0; i < eps.size(); ++i) {
    eps[i]->peer_addr = welcome->buffers[i].addr;
    eps[i]->peer_key = welcome->buffers[i].key;
    if (auto s = InsertPeer(*eps[i], welcome->buffers[i].endpoint_name); !s.ok()) {
      return fail(FailWith(s));
    }
    if (auto s = Validate(*eps[i], static_cast<uint32_t>(i)); !s.ok()) return fail(FailWith(s));
  }
  auto write = RunPhase(eps, Op::kWrite, o);
  if (!write.ok()) return fail(FailWith(write.status()));
  r.write = *write;
  auto read = RunPhase(eps, Op::kRead, o);
  if (!read.ok()) return fail(FailWith(read.status()));
  r.read = *read;
  if (auto s = SendFrame(fd, EncodeEmpty(FrameType::kDone)); !s.ok()) return fail(FailWith(s));
  auto bye = RecvFrame(fd, kHandshakeTimeoutS);
  if (!bye.ok() || !ExpectEmpty(*bye, FrameType::kBye).ok()) {
    fmt::print(stderr, "fabricctl bench: warning: server did not acknowledge the end\n");
  }
  if (o.format == OutputFormat::kJson) {
    fmt::print("{}\n", DumpJson(BenchResultToJson(r), 2));
  } else {
    fmt::print("{}", BenchResultToText(r));
  }
  return kExitOk;
}

// Waits for the forked server; kills it (our own child, by pid) after a grace period.
int ReapServer(pid_t pid, double grace_s) {
  auto deadline = Clock::now() + std::chrono::milliseconds(static_cast<int>(grace_s * 1000));
  int status = 0;
  while (true) {
    pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) break;
    if (r < 0 && errno != EINTR) return kExitError;
    if (Clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return kExitError;
    }
    ::usleep(20 * 1000);
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : kExitError;
}

}  // namespace

absl::Status CheckOpenedProvider(const std::string& requested, const std::string& opened) {
  if (ProviderSatisfies(requested, opened)) return absl::OkStatus();
  return absl::FailedPreconditionError(fmt::format(
      "requested provider '{}' but libfabric opened '{}' (core provider '{}'); refusing to "
      "report numbers for a provider you did not ask for (silent-fallback guard)",
      requested, opened, CoreProviderName(opened)));
}

bool ProviderUsesIpAddressing(const std::string& core) {
  return core == "tcp" || core == "sockets" || core == "udp" || core == "net" || core == "verbs" ||
         core == "psm3";
}

std::vector<std::string> MrModeNames(int mr_mode) {
  static constexpr std::pair<int, const char*> kBits[] = {
      {FI_MR_LOCAL, "FI_MR_LOCAL"},         {FI_MR_RAW, "FI_MR_RAW"},
      {FI_MR_VIRT_ADDR, "FI_MR_VIRT_ADDR"}, {FI_MR_ALLOCATED, "FI_MR_ALLOCATED"},
      {FI_MR_PROV_KEY, "FI_MR_PROV_KEY"},   {FI_MR_MMU_NOTIFY, "FI_MR_MMU_NOTIFY"},
      {FI_MR_RMA_EVENT, "FI_MR_RMA_EVENT"}, {FI_MR_ENDPOINT, "FI_MR_ENDPOINT"},
      {FI_MR_HMEM, "FI_MR_HMEM"},
  };
  std::vector<std::string> out;
  for (auto [bit, name] : kBits) {
    if (mr_mode & bit) out.push_back(name);
  }
  return out;
}

nlohmann::ordered_json BenchResultToJson(const BenchResult& r) {
  auto phase = [](const PhaseResult& p) {
    return nlohmann::ordered_json{{"bytes", p.bytes},
                                  {"ops", p.ops},
                                  {"seconds", p.seconds},
                                  {"gbytes_per_s", p.GBytesPerSecond()}};
  };
  return nlohmann::ordered_json{
      {"provider", r.provider},
      {"provider_core", CoreProviderName(r.provider)},
      {"provider_requested", r.provider_requested},
      {"fabric", r.fabric},
      {"domain", r.domain},
      {"peer_provider", r.peer_provider},
      {"peer_domain", r.peer_domain},
      {"mr_mode", r.mr_mode},
      {"size_bytes", r.size},
      {"batch", r.batch},
      {"threads", r.threads},
      {"duration_s", r.duration_s},
      {"write_gbytes_per_s", r.write.GBytesPerSecond()},
      {"read_gbytes_per_s", r.read.GBytesPerSecond()},
      {"write", phase(r.write)},
      {"read", phase(r.read)},
  };
}

std::string BenchResultToText(const BenchResult& r) {
  auto line = [](const char* op, const PhaseResult& p) {
    return fmt::format("{:<5}  {:8.3f} GB/s   ({:.2f} GB in {:.2f} s, {} ops)\n", op,
                       p.GBytesPerSecond(), p.bytes / 1e9, p.seconds, p.ops);
  };
  return line("write", r.write) + line("read", r.read);
}

int RunBench(const BenchOptions& o) {
  // ofi_rxm sizes each verbs CQ as (msg tx + msg rx) * FI_UNIVERSE_SIZE =
  // (128 + 128) * 256 = 65536 entries, above soft-RoCE's max_cqe (32767), so
  // fi_enable fails with -FI_EINVAL (fi_pingpong -p verbs -e rdm too). Two
  // processes per endpoint need no universe of 256; an explicit value wins.
  setenv("FI_UNIVERSE_SIZE", "64", /*overwrite=*/0);
  // Nothing from libfabric may be initialised before the fork below.
  switch (o.role) {
    case BenchOptions::Role::kListen: {
      auto lfd = ListenTcp(o.peer);
      if (!lfd.ok()) {
        fmt::print(stderr, "fabricctl bench: {}\n", std::string(lfd.status().message()));
        return kExitError;
      }
      auto port = BoundPort(lfd->get());
      fmt::print(stderr, "listening on {}:{} for one client\n",
                 o.peer.host.empty() ? "*" : o.peer.host, port.ok() ? *port : o.peer.port);
      return RunServer(o, lfd->get(), 365.0 * 24 * 3600, /*verbose=*/true);
    }
    case BenchOptions::Role::kConnect: {
      auto fd = ConnectTcp(o.peer, 30);
      if (!fd.ok()) {
        fmt::print(stderr, "fabricctl bench: {}\n", std::string(fd.status().message()));
        return kExitError;
      }
      return RunClient(o, fd->get());
    }
    case BenchOptions::Role::kLoopback:
      break;
  }
  auto lfd = ListenTcp(HostPort{"127.0.0.1", 0});
  if (!lfd.ok()) {
    fmt::print(stderr, "fabricctl bench: {}\n", std::string(lfd.status().message()));
    return kExitError;
  }
  auto port = BoundPort(lfd->get());
  if (!port.ok()) {
    fmt::print(stderr, "fabricctl bench: {}\n", std::string(port.status().message()));
    return kExitError;
  }
  std::fflush(stdout);
  std::fflush(stderr);
  pid_t pid = ::fork();
  if (pid < 0) {
    fmt::print(stderr, "fabricctl bench: fork: {}\n", std::strerror(errno));
    return kExitError;
  }
  if (pid == 0) {
    int code = RunServer(o, lfd->get(), 60, /*verbose=*/false);
    std::fflush(stderr);
    ::_exit(code);
  }
  lfd = ScopedFd();  // the child owns the listener now
  int client_code;
  {
    auto fd = ConnectTcp(HostPort{"127.0.0.1", *port}, 30);
    if (!fd.ok()) {
      fmt::print(stderr, "fabricctl bench: {}\n", std::string(fd.status().message()));
      client_code = kExitError;
    } else {
      client_code = RunClient(o, fd->get());
    }
  }  // closing the control connection lets a waiting server exit
  int server_code = ReapServer(pid, client_code == kExitOk ? 30 : 5);
  if (client_code == kExitOk && server_code != kExitOk) {
    fmt::print(stderr, "fabricctl bench: server process failed (exit {})\n", server_code);
    return kExitError;
  }
  return client_code;
}

}  // namespace fabric::fabricctl
