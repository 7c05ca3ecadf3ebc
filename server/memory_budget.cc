#include "server/memory_budget.h"

#include <malloc.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/wire_format_lite.h"
#include "grpcpp/support/proto_buffer_reader.h"
#include "planner/status_macros.h"

namespace echo::server {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::internal::WireFormatLite;
using google::protobuf::io::CodedInputStream;

// Deeper than any Echo message nests (request_codec.cc's limit too).
constexpr int kMaxDepth = 100;

// Field occurrences of one message, its message fields walked in turn
// within their length; false where the data stops making sense.
bool CountFields(CodedInputStream& in, const Descriptor& type, int depth,
                 int64_t& fields) {
  while (true) {
    const uint32_t tag = in.ReadTag();
    if (tag == 0) return true;  // end of the message (or of its limit)
    ++fields;
    const FieldDescriptor* field = type.FindFieldByNumber(
        static_cast<int>(WireFormatLite::GetTagFieldNumber(tag)));
    if (field == nullptr || depth >= kMaxDepth ||
        field->type() != FieldDescriptor::TYPE_MESSAGE ||
        WireFormatLite::GetTagWireType(tag) !=
            WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
      if (!WireFormatLite::SkipField(&in, tag)) return false;
      continue;
    }
    uint32_t length = 0;
    if (!in.ReadVarint32(&length)) return false;
    const CodedInputStream::Limit limit =
        in.PushLimit(static_cast<int>(std::min<uint32_t>(length, INT32_MAX)));
    const bool ok = CountFields(in, *field->message_type(), depth + 1, fields);
    if (!ok || !in.ConsumedEntireMessage()) return false;
    in.PopLimit(limit);
  }
}

}  // namespace

int64_t EstimateWorkingSetBytes(const grpc::ByteBuffer& request,
                                const Descriptor& type) {
  const int64_t bytes = static_cast<int64_t>(request.Length());
  int64_t fields = 0;
  grpc::ByteBuffer copy(request);  // shares the slices
  grpc::ProtoBufferReader reader(&copy);
  if (reader.status().ok()) {
    CodedInputStream in(&reader);
    in.SetTotalBytesLimit(INT32_MAX);
    CountFields(in, type, 0, fields);
  }
  return kWorkingSetBaseBytes + kWorkingSetBytesPerWireByte * bytes +
         kWorkingSetBytesPerField * fields;
}

MemoryBudget::Reservation& MemoryBudget::Reservation::operator=(
    Reservation&& other) noexcept {
  if (this != &other) {
    Release();
    budget_ = std::exchange(other.budget_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void MemoryBudget::Reservation::Release() {
  if (budget_ != nullptr) std::exchange(budget_, nullptr)->Release(bytes_);
  bytes_ = 0;
}

absl::Status MemoryBudget::Reservation::Resize(int64_t bytes) {
  if (budget_ == nullptr) return absl::OkStatus();  // unbounded budget
  if (bytes < bytes_) {
    const int64_t freed = bytes_ - bytes;
    bytes_ = bytes;
    budget_->Release(freed);
    return absl::OkStatus();
  }
  {
    std::lock_guard<std::mutex> lock(budget_->mutex_);
    RETURN_IF_ERROR(budget_->CheckFits(bytes, budget_->in_use_bytes_ - bytes_));
    budget_->in_use_bytes_ += bytes - bytes_;
    budget_->Observe();
  }
  bytes_ = bytes;
  return absl::OkStatus();
}

absl::Status MemoryBudget::CheckFits(int64_t bytes,
                                     int64_t others_bytes) const {
  // Rounded up: a request just over the budget does not read as equal.
  const int64_t mib = (bytes + (int64_t{1} << 20) - 1) >> 20;
  if (bytes > capacity_bytes_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "this request would take about ", mib,
        " MiB of memory to serve, more than echod's whole budget for "
        "requests (",
        capacity_bytes_ >> 20,
        " MiB; --memory_budget_bytes less the caches); send a smaller graph, "
        "register it (RegisterGraph) or raise the budget"));
  }
  if (others_bytes + bytes > capacity_bytes_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "echod's memory budget is taken: this request would take about ", mib,
        " MiB, and ", others_bytes >> 20, " of ", capacity_bytes_ >> 20,
        " MiB are in use by requests in flight; retry with backoff"));
  }
  return absl::OkStatus();
}

absl::StatusOr<MemoryBudget::Reservation> MemoryBudget::Reserve(int64_t bytes) {
  if (capacity_bytes_ <= 0) return Reservation();
  std::lock_guard<std::mutex> lock(mutex_);
  RETURN_IF_ERROR(CheckFits(bytes, in_use_bytes_));
  Reservation reservation = Take(bytes);
  Observe();
  return reservation;
}

MemoryBudget::Reservation MemoryBudget::Take(int64_t bytes) {
  in_use_bytes_ += bytes;
  Reservation reservation;
  reservation.budget_ = this;
  reservation.bytes_ = bytes;
  return reservation;
}

uint64_t MemoryBudget::Wait(int64_t bytes, Granted granted) {
  uint64_t ticket = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ticket = next_ticket_++;
    if (capacity_bytes_ > 0) {
      waiters_.push_back(
          Waiter{ticket, std::min(bytes, capacity_bytes_), std::move(granted)});
      Observe();
    }
  }
  if (capacity_bytes_ <= 0) {
    granted(Reservation());
  } else {
    GrantWaiters();
  }
  return ticket;
}

bool MemoryBudget::CancelWait(uint64_t ticket) {
  bool was_first = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = std::find_if(
        waiters_.begin(), waiters_.end(),
        [ticket](const Waiter& waiter) { return waiter.ticket == ticket; });
    if (it == waiters_.end()) return false;
    was_first = it == waiters_.begin();
    waiters_.erase(it);
    Observe();
  }
  // The ones behind it may fit now.
  if (was_first) GrantWaiters();
  return true;
}

void MemoryBudget::GrantWaiters() {
  std::vector<std::pair<Granted, Reservation>> granted;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    while (!waiters_.empty() &&
           in_use_bytes_ + waiters_.front().bytes <= capacity_bytes_) {
      Waiter& waiter = waiters_.front();
      granted.emplace_back(std::move(waiter.granted), Take(waiter.bytes));
      waiters_.pop_front();
    }
    if (!granted.empty()) Observe();
  }
  for (auto& [callback, reservation] : granted) {
    callback(std::move(reservation));
  }
}

int64_t MemoryBudget::in_use_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return in_use_bytes_;
}

int MemoryBudget::waiting() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<int>(waiters_.size());
}

void MemoryBudget::Release(int64_t bytes) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    in_use_bytes_ -= bytes;
    Observe();
  }
  if (bytes >= kTrimAfterBytes) trim_pending_ = true;
  GrantWaiters();
}

void MemoryBudget::TrimIfReleased() {
  if (trim_pending_.exchange(false)) ::malloc_trim(0);
}

int64_t DefaultMemoryBudgetBytes(std::optional<int64_t> cgroup_limit_bytes) {
  int64_t limit = cgroup_limit_bytes.value_or(0);
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page_size = ::sysconf(_SC_PAGE_SIZE);
  if (pages > 0 && page_size > 0) {
    const int64_t machine = static_cast<int64_t>(pages) * page_size;
    limit = limit > 0 ? std::min(limit, machine) : machine;
  }
  // An address-space limit (prlimit --as, ulimit -v) counts virtual memory:
  // echod maps ~0.7 GB at start (thread stacks, allocator arenas) before it
  // holds 21 MB, so what is left of it after kAddressSpaceOverheadBytes.
  rlimit address_space{};
  if (::getrlimit(RLIMIT_AS, &address_space) == 0 &&
      address_space.rlim_cur != RLIM_INFINITY) {
    const int64_t usable =
        std::max<int64_t>(0, static_cast<int64_t>(address_space.rlim_cur) -
                                 kAddressSpaceOverheadBytes);
    limit = limit > 0 ? std::min(limit, usable) : usable;
  }
  return static_cast<int64_t>(static_cast<double>(limit) *
                              kDefaultMemoryBudgetShare);
}

}  // namespace echo::server
