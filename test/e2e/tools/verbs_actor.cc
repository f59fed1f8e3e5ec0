// e2e-verbs-actor: a workload that uses an RDMA device in the ways the
// observed transport must tell apart (issue 27), for the soft-RoCE VM cases.
//
//   e2e-verbs-actor open DEV SECONDS
//       opens DEV and allocates a PD and a CQ, creates no QP, and holds them:
//       a stack that failed before its QPs (or UCX's ucp_init, which opens a PD
//       on every device). Not a user of the fabric.
//   e2e-verbs-actor loop DEV GID_INDEX SECONDS main|exit|stay
//       two RC QPs on DEV's port 1 connected to each other (rxe loops a packet
//       whose destination is its own address back inside the device), then
//       RDMA writes of 4 KiB from the main thread until SECONDS pass. The PD,
//       CQ, MR and QPs are created by the main thread, by a thread that exits
//       before the traffic starts (the kernel then names no owner for any of
//       them: pid 0), or by a thread that stays (the kernel names that
//       thread's ID, not the process's).
//       50 writes a second (about 400 packets on rxe, both ends counted): far
//       over the observation's floor, and gentle on a VM without KVM.
//       SIGUSR1 stops the writes and keeps the QPs (connected, idle) until
//       SECONDS pass: a stack whose transfers stopped.
//
// Prints "pid P tid T" for the thread that created the QPs, then one line per
// second of progress. Test-only; exits 1 with the failing verb named.
#include <infiniband/verbs.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace {

// Set by SIGUSR1: stop writing, keep the QPs.
volatile sig_atomic_t g_stop_writes = 0;
void OnUsr1(int) { g_stop_writes = 1; }

[[noreturn]] void Die(const char* what, int err) {
  std::fprintf(stderr, "e2e-verbs-actor: %s: %s\n", what, std::strerror(err));
  std::exit(1);
}

struct DeviceList {
  ibv_device** list = nullptr;
  ~DeviceList() {
    if (list) ibv_free_device_list(list);
  }
};
struct Context {
  ibv_context* ctx = nullptr;
  ~Context() {
    if (ctx) ibv_close_device(ctx);
  }
};

ibv_context* Open(const std::string& name, Context* owner) {
  DeviceList devices;
  devices.list = ibv_get_device_list(nullptr);
  if (!devices.list) Die("ibv_get_device_list", errno);
  for (ibv_device** d = devices.list; *d; ++d) {
    if (name != ibv_get_device_name(*d)) continue;
    owner->ctx = ibv_open_device(*d);
    if (!owner->ctx) Die("ibv_open_device", errno);
    return owner->ctx;
  }
  Die(("no device " + name).c_str(), ENODEV);
}

// The QPs and what they need, made by whichever thread Make() runs on.
struct Loop {
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  ibv_cq* cq = nullptr;
  ibv_mr* mr = nullptr;
  ibv_qp* a = nullptr;
  ibv_qp* b = nullptr;
  int gid_index = 0;
  std::vector<char> buf = std::vector<char>(2 * 4096);
  long creator_tid = 0;

  ibv_qp* NewQp() {
    ibv_qp_init_attr init{};
    init.send_cq = cq;
    init.recv_cq = cq;
    init.qp_type = IBV_QPT_RC;
    init.cap.max_send_wr = 64;
    init.cap.max_recv_wr = 1;
    init.cap.max_send_sge = 1;
    init.cap.max_recv_sge = 1;
    ibv_qp* qp = ibv_create_qp(pd, &init);
    if (!qp) Die("ibv_create_qp", errno);
    return qp;
  }

  void Connect(ibv_qp* qp, uint32_t peer, const ibv_gid& gid) {
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_INIT;
    attr.port_num = 1;
    attr.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE;
    if (ibv_modify_qp(qp, &attr,
                      IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) {
      Die("ibv_modify_qp INIT", errno);
    }
    attr = {};
    attr.qp_state = IBV_QPS_RTR;
    attr.path_mtu = IBV_MTU_1024;
    attr.dest_qp_num = peer;
    attr.max_dest_rd_atomic = 1;
    attr.min_rnr_timer = 12;
    attr.ah_attr.is_global = 1;
    attr.ah_attr.grh.dgid = gid;
    attr.ah_attr.grh.sgid_index = static_cast<uint8_t>(gid_index);
    attr.ah_attr.grh.hop_limit = 1;
    attr.ah_attr.port_num = 1;
    if (ibv_modify_qp(qp, &attr,
                      IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                          IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)) {
      Die("ibv_modify_qp RTR", errno);
    }
    attr = {};
    attr.qp_state = IBV_QPS_RTS;
    attr.timeout = 14;
    attr.retry_cnt = 7;
    attr.rnr_retry = 7;
    attr.max_rd_atomic = 1;
    if (ibv_modify_qp(qp, &attr,
                      IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                          IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC)) {
      Die("ibv_modify_qp RTS", errno);
    }
  }

  void Make() {
    creator_tid = syscall(SYS_gettid);
    pd = ibv_alloc_pd(ctx);
    if (!pd) Die("ibv_alloc_pd", errno);
    cq = ibv_create_cq(ctx, 128, nullptr, nullptr, 0);
    if (!cq) Die("ibv_create_cq", errno);
    mr = ibv_reg_mr(pd, buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    if (!mr) Die("ibv_reg_mr", errno);
    ibv_gid gid;
    if (ibv_query_gid(ctx, 1, gid_index, &gid)) Die("ibv_query_gid", errno);
    a = NewQp();
    b = NewQp();
    Connect(a, b->qp_num, gid);
    Connect(b, a->qp_num, gid);
  }

  // One signaled 4 KiB RDMA write from a to b's half of the buffer.
  void Write() {
    ibv_sge sge{};
    sge.addr = reinterpret_cast<uintptr_t>(buf.data());
    sge.length = 4096;
    sge.lkey = mr->lkey;
    ibv_send_wr wr{};
    ibv_send_wr* bad = nullptr;
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(buf.data() + 4096);
    wr.wr.rdma.rkey = mr->rkey;
    if (int err = ibv_post_send(a, &wr, &bad)) Die("ibv_post_send", err);
    ibv_wc wc{};
    int n = 0;
    while ((n = ibv_poll_cq(cq, 1, &wc)) == 0) {
    }
    if (n < 0) Die("ibv_poll_cq", EIO);
    if (wc.status != IBV_WC_SUCCESS) {
      std::fprintf(stderr, "e2e-verbs-actor: completion: %s\n", ibv_wc_status_str(wc.status));
      std::exit(1);
    }
  }
};

int Usage() {
  std::fprintf(stderr,
               "usage: e2e-verbs-actor open DEV SECONDS\n"
               "       e2e-verbs-actor loop DEV GID_INDEX SECONDS main|exit|stay\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  if (argc < 4) return Usage();
  const std::string mode = argv[1];
  Context context;
  ibv_context* ctx = Open(argv[2], &context);
  if (mode == "open" && argc == 4) {
    ibv_pd* pd = ibv_alloc_pd(ctx);
    if (!pd) Die("ibv_alloc_pd", errno);
    ibv_cq* cq = ibv_create_cq(ctx, 16, nullptr, nullptr, 0);
    if (!cq) Die("ibv_create_cq", errno);
    std::printf("pid %d: opened %s with a PD and a CQ, no QP\n", getpid(), argv[2]);
    sleep(static_cast<unsigned>(std::atoi(argv[3])));
    ibv_destroy_cq(cq);
    ibv_dealloc_pd(pd);
    return 0;
  }
  if (mode != "loop" || argc != 6) return Usage();
  Loop loop;
  loop.ctx = ctx;
  loop.gid_index = std::atoi(argv[3]);
  const int seconds = std::atoi(argv[4]);
  const std::string who = argv[5];
  std::thread stayer;
  bool stop = false;
  if (who == "main") {
    loop.Make();
  } else if (who == "exit") {
    std::thread([&] { loop.Make(); }).join();
  } else if (who == "stay") {
    bool made = false;
    stayer = std::thread([&] {
      loop.Make();
      __atomic_store_n(&made, true, __ATOMIC_RELEASE);
      while (!__atomic_load_n(&stop, __ATOMIC_ACQUIRE)) usleep(100000);
    });
    while (!__atomic_load_n(&made, __ATOMIC_ACQUIRE)) usleep(1000);
  } else {
    return Usage();
  }
  std::printf("pid %d tid %ld created the PD, CQ, MR and QPs (%s) on %s\n", getpid(),
              loop.creator_tid, who.c_str(), argv[2]);
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  auto next_report = std::chrono::steady_clock::now();
  uint64_t writes = 0;
  std::signal(SIGUSR1, OnUsr1);
  bool said_stopped = false;
  while (std::chrono::steady_clock::now() < end) {
    if (g_stop_writes) {
      if (!said_stopped)
        std::printf("stopped writing after %llu writes; the QPs stay\n",
                    static_cast<unsigned long long>(writes));
      said_stopped = true;
      usleep(100000);
      continue;
    }
    loop.Write();
    ++writes;
    usleep(20000);
    if (std::chrono::steady_clock::now() >= next_report) {
      std::printf("%llu writes\n", static_cast<unsigned long long>(writes));
      next_report += std::chrono::seconds(1);
    }
  }
  __atomic_store_n(&stop, true, __ATOMIC_RELEASE);
  if (stayer.joinable()) stayer.join();
  ibv_destroy_qp(loop.a);
  ibv_destroy_qp(loop.b);
  ibv_dereg_mr(loop.mr);
  ibv_destroy_cq(loop.cq);
  ibv_dealloc_pd(loop.pd);
  return 0;
}
