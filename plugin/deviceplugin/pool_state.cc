#include "plugin/deviceplugin/pool_state.h"

#include <google/protobuf/util/message_differencer.h>

namespace fabric {

std::shared_ptr<const v1beta1::ListAndWatchResponse> MakeDeviceList(const PoolSnapshot& snap) {
  auto msg = std::make_shared<v1beta1::ListAndWatchResponse>();
  for (const PoolUnit& u : snap.units) {
    v1beta1::Device* d = msg->add_devices();
    d->set_id(u.id);
    d->set_health(u.healthy ? "Healthy" : "Unhealthy");
    if (u.numa_node >= 0) d->mutable_topology()->add_nodes()->set_id(u.numa_node);
  }
  return msg;
}

PoolState::PoolState(std::shared_ptr<const PoolSnapshot> initial)
    : resource_(initial->resource), snapshot_(initial), list_(MakeDeviceList(*initial)) {}

std::shared_ptr<const PoolSnapshot> PoolState::snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  return snapshot_;
}

std::shared_ptr<const v1beta1::ListAndWatchResponse> PoolState::device_list() const {
  std::lock_guard<std::mutex> lock(mu_);
  return list_;
}

bool PoolState::Update(std::shared_ptr<const PoolSnapshot> next) {
  auto list = MakeDeviceList(*next);
  std::lock_guard<std::mutex> lock(mu_);
  snapshot_ = next;
  if (google::protobuf::util::MessageDifferencer::Equals(*list, *list_)) return false;
  list_ = list;
  for (DeviceListSubscriber* s : subscribers_) s->Push(list_);
  return true;
}

std::shared_ptr<const v1beta1::ListAndWatchResponse> PoolState::Subscribe(DeviceListSubscriber* s) {
  std::lock_guard<std::mutex> lock(mu_);
  subscribers_.insert(s);
  return list_;
}

void PoolState::Unsubscribe(DeviceListSubscriber* s) {
  std::lock_guard<std::mutex> lock(mu_);
  subscribers_.erase(s);
}

void PoolState::CloseStreams() {
  std::lock_guard<std::mutex> lock(mu_);
  for (DeviceListSubscriber* s : subscribers_) s->Close();
}

size_t PoolState::open_streams() const {
  std::lock_guard<std::mutex> lock(mu_);
  return subscribers_.size();
}

void PoolState::SetAllocateHook(std::function<void()> hook) {
  std::lock_guard<std::mutex> lock(mu_);
  allocate_hook_ = std::move(hook);
}

void PoolState::AfterAllocate() {
  std::function<void()> hook;
  {
    std::lock_guard<std::mutex> lock(mu_);
    hook = allocate_hook_;
  }
  if (hook) hook();
}

}  // namespace fabric
