// The methods that carry graphs, served as generic calls whose request is
// read only once its memory is reserved (issue 49). gRPC reads a registered
// unary method's request whole before any handler runs, so N concurrent
// 50 MB requests were held before the memory budget saw any of them; here
// a call first waits (first come, first served, until its deadline or its
// client's cancel) for as much of the budget as the biggest request may
// take, --max_request_bytes, and only then reads; the reservation becomes
// the request's working set once its bytes are known.
#ifndef ECHO_SERVER_GATED_CALL_H_
#define ECHO_SERVER_GATED_CALL_H_

#include <atomic>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "grpcpp/generic/async_generic_service.h"
#include "grpcpp/support/byte_buffer.h"
#include "server/memory_budget.h"
#include "server/planner_service.h"

namespace echo::server {

class PlannerService::GatedCall : public grpc::ServerGenericBidiReactor {
 public:
  GatedCall(PlannerService* service,
            grpc::GenericCallbackServerContext* context);

  void OnReadDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override { delete this; }

 private:
  // The call's memory is reserved: read its request.
  void Granted(MemoryBudget::Reservation reservation);
  // Ends a call still waiting for memory (cancelled, or past its deadline);
  // nothing when its memory was granted already (its read then fails).
  void Abandon(uint64_t ticket);
  // Completes a call whose request was never read: with what stopped it
  // (deadline, cancel, drain), else `otherwise`; `when` ends the message.
  void EndUnread(absl::Status otherwise, absl::string_view when);

  PlannerService* service_;
  const Route* route_;
  RawCall call_{};
  grpc::ByteBuffer request_;
  grpc::ByteBuffer response_;
  std::atomic<uint64_t> ticket_{0};  // 0 until the wait is queued
  std::atomic<bool> cancelled_{false};
};

class PlannerService::GatedMethods : public grpc::CallbackGenericService {
 public:
  explicit GatedMethods(PlannerService* service) : service_(service) {}
  grpc::ServerGenericBidiReactor* CreateReactor(
      grpc::GenericCallbackServerContext* context) override {
    return new GatedCall(service_, context);
  }

 private:
  PlannerService* service_;
};

}  // namespace echo::server

#endif  // ECHO_SERVER_GATED_CALL_H_
