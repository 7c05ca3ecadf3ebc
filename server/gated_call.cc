#include "server/gated_call.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/log_text.h"

namespace echo::server {

PlannerService::GatedCall::GatedCall(
    PlannerService* service, grpc::GenericCallbackServerContext* context)
    : service_(service), route_(RouteOf(context->method())) {
  if (route_ == nullptr) {
    // What gRPC answers for a method no service has.
    Finish(grpc::Status(
        grpc::StatusCode::UNIMPLEMENTED,
        absl::StrCat("echod has no method ", LogText(context->method()))));
    return;
  }
  call_ =
      RawCall{context,
              [this](const grpc::Status& status) {
                // The request's bytes go with its reservation, not when
                // gRPC is done sending the answer.
                request_.Clear();
                if (status.ok()) {
                  StartWriteAndFinish(&response_, grpc::WriteOptions(), status);
                } else {
                  Finish(status);
                }
              },
              route_->method,
              std::chrono::steady_clock::now(),
              /*admitted=*/false,
              &request_,
              &response_,
              /*memory=*/nullptr};
  if (!service_->Open(call_, /*metered=*/true)) return;
  const uint64_t ticket =
      service_->budget_->Wait(service_->options_.max_request_bytes,
                              [this](MemoryBudget::Reservation reservation) {
                                Granted(std::move(reservation));
                              });
  ticket_ = ticket;
  // A cancel that came before the ticket was known.
  if (cancelled_) Abandon(ticket);
}

void PlannerService::GatedCall::Granted(MemoryBudget::Reservation reservation) {
  call_.memory =
      std::make_shared<MemoryBudget::Reservation>(std::move(reservation));
  StartRead(&request_);
}

void PlannerService::GatedCall::OnCancel() {
  cancelled_ = true;
  if (const uint64_t ticket = ticket_; ticket != 0) Abandon(ticket);
}

void PlannerService::GatedCall::Abandon(uint64_t ticket) {
  // Only one of OnCancel and the constructor removes the ticket.
  if (!service_->budget_->CancelWait(ticket)) return;
  EndUnread(absl::CancelledError("the call was cancelled"),
            " while it waited for echod's memory budget, before its request "
            "was read");
}

void PlannerService::GatedCall::EndUnread(absl::Status otherwise,
                                          absl::string_view when) {
  absl::Status stopped = service_->InterruptFor(call_.context)();
  if (stopped.ok()) stopped = std::move(otherwise);
  service_->Complete(
      call_,
      absl::Status(stopped.code(), absl::StrCat(stopped.message(), when)));
}

void PlannerService::GatedCall::OnReadDone(bool ok) {
  if (!ok) {
    // gRPC also ends the read of a request over --max_request_bytes (the
    // client gets RESOURCE_EXHAUSTED from it).
    EndUnread(absl::InvalidArgumentError(absl::StrCat(
                  call_.method, ": the call ended before its request message")),
              " (before its request was read; a request over "
              "--max_request_bytes ends so too)");
    return;
  }
  route_->serve(service_, call_);
}

PlannerService::~PlannerService() = default;

grpc::CallbackGenericService* PlannerService::gated_methods() {
  return gated_methods_.get();
}

}  // namespace echo::server
