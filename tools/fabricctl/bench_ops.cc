#include "tools/fabricctl/bench_ops.h"

#include <fmt/format.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include <atomic>
#include <cstring>
#include <thread>

#include "agent/libfabric/fabric_error.h"

namespace fabric::fabricctl::bench_detail {

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

const char* OpName(Op op) { return op == Op::kWrite ? "write" : "read"; }

namespace {

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

}  // namespace

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

}  // namespace fabric::fabricctl::bench_detail
