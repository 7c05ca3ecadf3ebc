#include "server/memory_budget.h"

#include <malloc.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/wire_format_lite.h"
#include "grpcpp/support/proto_buffer_reader.h"

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

absl::StatusOr<MemoryBudget::Reservation> MemoryBudget::Reserve(int64_t bytes) {
  Reservation reservation;
  if (capacity_bytes_ <= 0) return reservation;
  std::lock_guard<std::mutex> lock(mutex_);
  if (bytes > capacity_bytes_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "this request would take about ", bytes >> 20,
        " MiB of memory to serve, more than echod's whole budget for "
        "requests (",
        capacity_bytes_ >> 20,
        " MiB; --memory_budget_bytes less the caches); send a smaller graph, "
        "register it (RegisterGraph) or raise the budget"));
  }
  if (in_use_bytes_ + bytes > capacity_bytes_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "echod's memory budget is taken: this request would take about ",
        bytes >> 20, " MiB, and ", in_use_bytes_ >> 20, " of ",
        capacity_bytes_ >> 20,
        " MiB are in use by requests in flight; retry with backoff"));
  }
  in_use_bytes_ += bytes;
  reservation.budget_ = this;
  reservation.bytes_ = bytes;
  return reservation;
}

int64_t MemoryBudget::in_use_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return in_use_bytes_;
}

void MemoryBudget::Release(int64_t bytes) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    in_use_bytes_ -= bytes;
  }
  if (bytes >= kTrimAfterBytes) trim_pending_ = true;
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
