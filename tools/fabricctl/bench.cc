#include "tools/fabricctl/bench.h"

#include <fmt/format.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "agent/base/errors.h"
#include "tools/fabricctl/bench_protocol.h"
#include "tools/fabricctl/check_verdict.h"
#include "tools/fabricctl/fid.h"

namespace fabric::fabricctl {
namespace {

using Clock = std::chrono::steady_clock;

constexpr double kHandshakeTimeoutS = 60;
constexpr double kDrainTimeoutS = 30;
constexpr uint32_t kWelcomeOk = 0;

// A status that carries the exit code it should end the process with.
struct Failure {
  int exit_code = kExitError;
  std::string message;
};

template <typename T>
struct Outcome {
  std::optional<T> value;
  Failure failure;
  bool ok() const { return value.has_value(); }
};

Failure FailWith(const absl::Status& s, int code = kExitError) {
  return Failure{code, std::string(s.message())};
}

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

struct FreeDeleter {
  void operator()(char* p) const { std::free(p); }
};

// One opened provider: the fi_info we chose and the fabric it belongs to.
struct OpenedFabric {
  InfoPtr info;
  FidPtr<fid_fabric> fabric;
  std::string provider() const { return info->fabric_attr->prov_name; }
  std::string fabric_name() const { return info->fabric_attr->name ? info->fabric_attr->name : ""; }
  std::string domain_name() const { return info->domain_attr->name ? info->domain_attr->name : ""; }
};

// fi_getinfo for an RDM endpoint with RMA, pinned to `provider`. `node`
// (with FI_SOURCE) binds IP-addressed providers to the control connection's
// interface; if nothing matches there we retry unbound (e.g. verbs in loopback
// mode, where 127.0.0.1 has no RDMA device) and let the guard judge the result.
Outcome<OpenedFabric> OpenFabric(const std::string& provider, const std::string& domain,
                                 const std::string& node) {
  InfoPtr hints(fi_allocinfo());
  if (!hints) return {std::nullopt, {kExitError, "fi_allocinfo failed"}};
  hints->caps = FI_MSG | FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
  hints->ep_attr->type = FI_EP_RDM;
  // Every op carries a fi_context2 we own, so both context modes are fine.
  hints->mode = FI_CONTEXT | FI_CONTEXT2;
  hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
  // One domain per thread, used by that thread only.
  hints->domain_attr->threading = FI_THREAD_DOMAIN;
  hints->fabric_attr->prov_name = strdup(provider.c_str());
  if (!domain.empty()) hints->domain_attr->name = strdup(domain.c_str());

  fi_info* raw = nullptr;
  int ret = -FI_ENODATA;
  if (!node.empty()) {
    ret = fi_getinfo(kFabricApiVersion, node.c_str(), nullptr, FI_SOURCE, hints.get(), &raw);
  }
  if (ret == -FI_ENODATA) {
    ret = fi_getinfo(kFabricApiVersion, nullptr, nullptr, 0, hints.get(), &raw);
  }
  InfoPtr list(raw);
  if (ret == -FI_ENODATA) {
    return {std::nullopt,
            {kExitProviderMissing,
             fmt::format("provider '{}'{} is not available here for FI_EP_RDM with FI_RMA "
                         "({}); refusing to measure another provider",
                         provider, domain.empty() ? "" : " domain '" + domain + "'",
                         std::string(FabricError(ret, "fi_getinfo").message()))}};
  }
  if (ret != 0) return {std::nullopt, FailWith(FabricError(ret, "fi_getinfo"))};
  // Keep only the first entry: that is the one we open.
  InfoPtr chosen(fi_dupinfo(list.get()));
  if (!chosen) return {std::nullopt, {kExitError, "fi_dupinfo failed"}};
  OpenedFabric out;
  fid_fabric* fabric = nullptr;
  ret = fi_fabric(chosen->fabric_attr, &fabric, nullptr);
  if (ret != 0) return {std::nullopt, FailWith(FabricError(ret, "fi_fabric"))};
  out.fabric.reset(fabric);
  out.info = std::move(chosen);
  return {std::move(out), {}};
}

// One endpoint with its own domain, CQ, AV and registered buffer.
struct Endpoint {
  std::unique_ptr<char, FreeDeleter> buffer;  // declared first: freed after the MR closes
  uint64_t size = 0;
  FidPtr<fid_domain> domain;
  FidPtr<fid_cq> cq;
  FidPtr<fid_av> av;
  FidPtr<fid_ep> ep;
  FidPtr<fid_mr> mr;
  void* desc = nullptr;
  uint64_t key = 0;
  uint64_t rma_addr = 0;  // what the peer uses as the target address
  std::string name;       // fi_getname
  fi_addr_t peer = FI_ADDR_UNSPEC;
  uint64_t peer_addr = 0;
  uint64_t peer_key = 0;
};

absl::StatusOr<std::unique_ptr<Endpoint>> OpenEndpoint(const OpenedFabric& of, uint64_t size,
                                                       uint64_t requested_key) {
  auto e = std::make_unique<Endpoint>();
  fi_info* info = of.info.get();
  void* mem = nullptr;
  if (posix_memalign(&mem, 4096, size) != 0) {
    return absl::ResourceExhaustedError(fmt::format("cannot allocate {} bytes", size));
  }
  e->buffer.reset(static_cast<char*>(mem));
  e->size = size;
  std::memset(mem, 0, size);  // touch the pages before registration and timing

  fid_domain* domain = nullptr;
  if (int r = fi_domain(of.fabric.get(), info, &domain, nullptr); r != 0) {
    return FabricError(r, "fi_domain");
  }
  e->domain.reset(domain);
  fi_cq_attr cq_attr{};
  cq_attr.format = FI_CQ_FORMAT_CONTEXT;
  cq_attr.wait_obj = FI_WAIT_NONE;
  fid_cq* cq = nullptr;
  if (int r = fi_cq_open(domain, &cq_attr, &cq, nullptr); r != 0) {
    return FabricError(r, "fi_cq_open");
  }
  e->cq.reset(cq);
  fi_av_attr av_attr{};
  av_attr.type =
      info->domain_attr->av_type != FI_AV_UNSPEC ? info->domain_attr->av_type : FI_AV_TABLE;
  av_attr.count = 4;
  fid_av* av = nullptr;
  if (int r = fi_av_open(domain, &av_attr, &av, nullptr); r != 0) {
    return FabricError(r, "fi_av_open");
  }
  e->av.reset(av);
  fid_ep* ep = nullptr;
  if (int r = fi_endpoint(domain, info, &ep, nullptr); r != 0) {
    return FabricError(r, "fi_endpoint");
  }
  e->ep.reset(ep);
  if (int r = fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV); r != 0) {
    return FabricError(r, "fi_ep_bind(cq)");
  }
  if (int r = fi_ep_bind(ep, &av->fid, 0); r != 0) return FabricError(r, "fi_ep_bind(av)");
  if (int r = fi_enable(ep); r != 0) return FabricError(r, "fi_enable");

  const int mr_mode = info->domain_attr->mr_mode;
  fid_mr* mr = nullptr;
  if (int r = fi_mr_reg(domain, mem, size, FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE, 0,
                        requested_key, 0, &mr, nullptr);
      r != 0) {
    return FabricError(
        r, fmt::format("fi_mr_reg({} bytes; RLIMIT_MEMLOCK applies to verbs/efa)", size));
  }
  e->mr.reset(mr);
  if (mr_mode & FI_MR_ENDPOINT) {
    if (int r = fi_mr_bind(mr, &ep->fid, 0); r != 0) return FabricError(r, "fi_mr_bind");
    if (int r = fi_mr_enable(mr); r != 0) return FabricError(r, "fi_mr_enable");
  }
  e->key = fi_mr_key(mr);  // the provider's key under FI_MR_PROV_KEY, else ours
  if (e->key == FI_KEY_NOTAVAIL) return absl::UnimplementedError("fi_mr_key: key not available");
  // FI_MR_LOCAL: local buffers need their descriptor; passing it always is harmless.
  e->desc = fi_mr_desc(mr);
  // FI_MR_VIRT_ADDR: the target address is the virtual address; else an offset.
  e->rma_addr = (mr_mode & FI_MR_VIRT_ADDR) ? reinterpret_cast<uint64_t>(mem) : 0;

  char name[256];
  size_t len = sizeof(name);
  if (int r = fi_getname(&ep->fid, name, &len); r != 0) return FabricError(r, "fi_getname");
  e->name.assign(name, len);
  return e;
}

absl::Status InsertPeer(Endpoint& e, const std::string& peer_name) {
  int n = fi_av_insert(e.av.get(), peer_name.data(), 1, &e.peer, 0, nullptr);
  if (n < 0) return FabricError(n, "fi_av_insert");
  if (n != 1) return absl::InternalError("fi_av_insert: peer address not inserted");
  return absl::OkStatus();
}

// Reads completions; returns how many, each op's context in `done`.
absl::StatusOr<int> PollCq(Endpoint& e, fi_cq_entry* entries, int max) {
  ssize_t n = fi_cq_read(e.cq.get(), entries, max);
  if (n > 0) return static_cast<int>(n);
  if (n == -FI_EAGAIN) return 0;
  if (n == -FI_EAVAIL) {
    fi_cq_err_entry err{};
    ssize_t r = fi_cq_readerr(e.cq.get(), &err, 0);
    if (r < 0) return FabricError(static_cast<int>(r), "fi_cq_readerr");
    const char* detail = fi_cq_strerror(e.cq.get(), err.prov_errno, err.err_data, nullptr, 0);
    return FabricError(err.err,
                       absl::StrCat("RMA completion (provider: ", detail ? detail : "?", ")"));
  }
  return FabricError(static_cast<int>(n), "fi_cq_read");
}

enum class Op { kWrite, kRead };
const char* OpName(Op op) { return op == Op::kWrite ? "write" : "read"; }

// fi_context2 first, so the completion's op_context is the slot.
struct Slot {
  fi_context2 context;
};

ssize_t Post(Endpoint& e, Op op, Slot* slot) {
  if (op == Op::kRead) {
    return fi_read(e.ep.get(), e.buffer.get(), e.size, e.desc, e.peer, e.peer_addr, e.peer_key,
                   &slot->context);
  }
  iovec iov{e.buffer.get(), e.size};
  void* desc = e.desc;
  fi_rma_iov rma{e.peer_addr, e.size, e.peer_key};
  fi_msg_rma msg{};
  msg.msg_iov = &iov;
  msg.desc = &desc;
  msg.iov_count = 1;
  msg.addr = e.peer;
  msg.rma_iov = &rma;
  msg.rma_iov_count = 1;
  msg.context = &slot->context;
  return fi_writemsg(e.ep.get(), &msg, FI_COMPLETION);
}

// One operation to completion (used by the validation step).
absl::Status RunOne(Endpoint& e, Op op) {
  Slot slot{};
  auto deadline = Clock::now() + std::chrono::seconds(static_cast<int>(kDrainTimeoutS));
  fi_cq_entry entries[4];
  while (true) {
    ssize_t r = Post(e, op, &slot);
    if (r == 0) break;
    if (r != -FI_EAGAIN) return FabricError(static_cast<int>(r), OpName(op));
    if (auto n = PollCq(e, entries, 4); !n.ok()) return n.status();
    if (Clock::now() > deadline) return absl::DeadlineExceededError("posting timed out");
  }
  while (true) {
    auto n = PollCq(e, entries, 4);
    if (!n.ok()) return n.status();
    for (int i = 0; i < *n; ++i) {
      if (entries[i].op_context == &slot.context) return absl::OkStatus();
    }
    if (Clock::now() > deadline) {
      return absl::DeadlineExceededError(fmt::format("{} did not complete", OpName(op)));
    }
  }
}

// Writes a pattern into the peer's buffer and reads it back, so that the
// numbers below describe RMA that really moves data.
absl::Status Validate(Endpoint& e, uint32_t seed) {
  char* buf = e.buffer.get();
  for (uint64_t i = 0; i < e.size; ++i) buf[i] = static_cast<char>((i * 131 + seed * 7 + 1) & 0xff);
  if (auto s = RunOne(e, Op::kWrite); !s.ok()) return s;
  // A read may overtake a write whose completion only meant "sent" (no
  // FI_ORDER_RAW asked), so allow a few read-backs.
  for (int attempt = 0; attempt < 50; ++attempt) {
    std::memset(buf, 0, e.size);
    if (auto s = RunOne(e, Op::kRead); !s.ok()) return s;
    bool same = true;
    for (uint64_t i = 0; i < e.size && same; ++i) {
      same = buf[i] == static_cast<char>((i * 131 + seed * 7 + 1) & 0xff);
    }
    if (same) return absl::OkStatus();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return absl::DataLossError("validation: data read back differs from the data written");
}

struct ThreadStats {
  std::atomic<uint64_t> bytes{0};
  std::atomic<uint64_t> ops{0};
  Clock::time_point finished;
  absl::Status status;
};

// Keeps `batch` operations in flight until the deadline, then drains.
void DriveOps(Endpoint& e, Op op, uint32_t batch, Clock::time_point deadline,
              const std::atomic<bool>& abort, ThreadStats& stats) {
  std::vector<Slot> slots(batch);
  std::vector<Slot*> free_slots;
  for (Slot& s : slots) free_slots.push_back(&s);
  uint32_t outstanding = 0;
  fi_cq_entry entries[64];
  while (true) {
    Clock::time_point now = Clock::now();
    bool posting = now < deadline && !abort.load(std::memory_order_relaxed);
    while (posting && !free_slots.empty()) {
      ssize_t r = Post(e, op, free_slots.back());
      if (r == -FI_EAGAIN) break;
      if (r != 0) {
        stats.status = FabricError(static_cast<int>(r), OpName(op));
        return;
      }
      free_slots.pop_back();
      ++outstanding;
    }
    if (!posting && outstanding == 0) break;
    if (!posting && Seconds(now - deadline) > kDrainTimeoutS) {
      stats.status = absl::DeadlineExceededError(
          fmt::format("{} {} operations never completed", outstanding, OpName(op)));
      return;
    }
    auto n = PollCq(e, entries, 64);
    if (!n.ok()) {
      stats.status = n.status();
      return;
    }
    for (int i = 0; i < *n; ++i) {
      free_slots.push_back(static_cast<Slot*>(entries[i].op_context));
    }
    if (*n > 0) {
      outstanding -= static_cast<uint32_t>(*n);
      stats.bytes.fetch_add(e.size * static_cast<uint64_t>(*n), std::memory_order_relaxed);
      stats.ops.fetch_add(static_cast<uint64_t>(*n), std::memory_order_relaxed);
    }
  }
  stats.finished = Clock::now();
}

absl::StatusOr<PhaseResult> RunPhase(std::vector<std::unique_ptr<Endpoint>>& eps, Op op,
                                     const BenchOptions& o) {
  std::vector<ThreadStats> stats(eps.size());
  std::atomic<bool> abort{false};
  Clock::time_point start = Clock::now();
  Clock::time_point deadline = start + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(o.duration_s));
  std::vector<std::thread> workers;
  for (size_t i = 0; i < eps.size(); ++i) {
    workers.emplace_back([&, i] { DriveOps(*eps[i], op, o.batch, deadline, abort, stats[i]); });
  }
  // Live progress once per second on stderr, from this thread.
  uint64_t last_bytes = 0;
  Clock::time_point last = start;
  for (int tick = 1;; ++tick) {
    Clock::time_point next = start + std::chrono::seconds(tick);
    if (next >= deadline) break;
    std::this_thread::sleep_until(next);
    uint64_t bytes = 0;
    for (auto& s : stats) bytes += s.bytes.load(std::memory_order_relaxed);
    Clock::time_point now = Clock::now();
    if (o.progress) {
      fmt::print(stderr, "  {:<5} {:>3}s  {:7.3f} GB/s\n", OpName(op), tick,
                 (bytes - last_bytes) / Seconds(now - last) / 1e9);
    }
    last_bytes = bytes;
    last = now;
  }
  for (auto& w : workers) w.join();
  PhaseResult result;
  Clock::time_point end = start;
  for (auto& s : stats) {
    if (!s.status.ok()) return s.status;
    result.bytes += s.bytes.load();
    result.ops += s.ops.load();
    end = std::max(end, s.finished);
  }
  result.seconds = Seconds(end - start);
  return result;
}

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
    fmt::print("{}\n", BenchResultToJson(r).dump(2));
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
