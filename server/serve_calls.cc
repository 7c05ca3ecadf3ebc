// How PlannerService serves a call, whatever the method: the gRPC entry
// points, authorization, admission, the lane (gRPC's thread or the worker
// pool), parsing, the answer cache, and Complete on every path. The
// methods' work is in planner_service.cc, graph_calls.cc and
// scheduler_handlers.cc.
#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/arena.h"
#include "planner/status_macros.h"
#include "server/call_context.h"
#include "server/guarded_call.h"
#include "server/log_limiter.h"
#include "server/log_text.h"
#include "server/planner_service.h"
#include "server/request_codec.h"
#include "server/status_map.h"
#include "spdlog/spdlog.h"

namespace echo::server {
namespace {

// One call's request and response, on an arena of their own: a 100k-op
// graph is about a million small messages and strings, which the heap
// allocates and frees one by one (parsing, then destroying, the request
// of an 82k-op EstimateMemory was 43% of echod's time, 40% of it in
// malloc and free); the arena takes them in large blocks and frees the
// blocks at once.
template <typename Request, typename Response>
class CallMessages {
 public:
  CallMessages()
      : arena_(Options()),
        request_(google::protobuf::Arena::CreateMessage<Request>(&arena_)),
        response_(google::protobuf::Arena::CreateMessage<Response>(&arena_)) {}
  Request& request() { return *request_; }
  Response& response() { return *response_; }

 private:
  static google::protobuf::ArenaOptions Options() {
    google::protobuf::ArenaOptions options;
    // Blocks grow to 1 MiB (the default stops at 8 KiB): a 16 MB request
    // takes a few dozen blocks, not thousands.
    options.max_block_size = 1 << 20;
    return options;
  }

  google::protobuf::Arena arena_;  // first: destroyed after the messages
  Request* request_;
  Response* response_;
};

}  // namespace

bool PlannerService::Open(RawCall& call, bool metered) {
  // Authentication and authorization first: a refused caller takes no
  // slot and costs no parse.
  if (options_.authorizer != nullptr) {
    const absl::Status authorized = options_.authorizer->Authorize(
        call.method, CallAuthorizer::CredentialsOf(*call.context));
    if (!authorized.ok()) {
      Complete(call, authorized);
      return false;
    }
  }
  // Admission before reading or parsing: a refused call costs neither.
  if (metered) {
    call.admitted = true;
    if (absl::Status admitted = Admit(); !admitted.ok()) {
      Complete(call, admitted);
      return false;
    }
  }
  return true;
}

template <typename Request, typename Response>
grpc::ServerUnaryReactor* PlannerService::ServeRaw(
    grpc::CallbackServerContext* context, const char* method,
    const grpc::ByteBuffer* raw_request, grpc::ByteBuffer* raw_response,
    bool metered, Lane (PlannerService::*lane_of)(const Request&) const,
    Handler<Request, Response> handle) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  RawCall call{
      context,
      [reactor](const grpc::Status& status) { reactor->Finish(status); },
      method,
      std::chrono::steady_clock::now(),
      /*admitted=*/false,
      raw_request,
      raw_response,
      /*memory=*/nullptr};
  if (Open(call, metered)) ServeRequest(call, metered, lane_of, handle);
  return reactor;
}

template <typename Request, typename Response>
void PlannerService::ServeRequest(
    RawCall call, bool metered,
    Lane (PlannerService::*lane_of)(const Request&) const,
    Handler<Request, Response> handle) {
  // Memory from the wire bytes (a walk of ~25 ms for 51 MB, no parse): a
  // request that would take echod past its budget is refused before it is
  // parsed or queued; the reservation lasts until Complete.
  if (metered) {
    const int64_t working_set =
        EstimateWorkingSetBytes(*call.request, *Request::descriptor());
    if (call.memory != nullptr) {
      if (absl::Status resized = call.memory->Resize(working_set);
          !resized.ok()) {
        Complete(call, resized);
        return;
      }
    } else {
      absl::StatusOr<MemoryBudget::Reservation> reserved =
          budget_->Reserve(working_set);
      if (!reserved.ok()) {
        Complete(call, reserved.status());
        return;
      }
      call.memory =
          std::make_shared<MemoryBudget::Reservation>(std::move(*reserved));
    }
  }
  // The raw size, known before parsing, keeps a big request off this
  // thread: parsing tens of MB here would delay every health check behind
  // it (issue 11).
  if (static_cast<int64_t>(call.request->Length()) >
      options_.max_inline_request_bytes) {
    Submit(call, [this, call, lane_of, handle] {
      Serve(call, /*on_worker=*/true, lane_of, handle);
    });
  } else {
    Serve(call, /*on_worker=*/false, lane_of, handle);
  }
}

template <typename Request, typename Response>
void PlannerService::Serve(const RawCall& raw, bool on_worker,
                           Lane (PlannerService::*lane_of)(const Request&)
                               const,
                           Handler<Request, Response> handle) {
  // A big request waits for a worker before it is parsed: not parsed at
  // all once its caller is gone.
  if (on_worker) {
    if (absl::Status gone = InterruptFor(raw.context)(); !gone.ok()) {
      Complete(raw, gone);
      return;
    }
  }
  // Shared: the handler may run on a worker after this returns.
  auto call = std::make_shared<CallMessages<Request, Response>>();
  const absl::Status parsed = RunGuarded(
      raw.method, [&] { return ParseRequest(*raw.request, &call->request()); });
  if (!parsed.ok()) {
    Complete(raw, parsed);
    return;
  }
  // A question about a registered graph asked before: its cached answer,
  // sent as the serialized response it is. The key is the request's bytes,
  // so on this thread it is as small as the request.
  std::string answer_key = AnswerKeyOf(raw.method, call->request());
  if (!answer_key.empty()) {
    if (std::optional<std::string> cached = registry_->FindAnswer(answer_key)) {
      grpc::Slice slice(cached->data(), cached->size());
      *raw.response = grpc::ByteBuffer(&slice, 1);
      Complete(raw, absl::OkStatus());
      return;
    }
  }
  auto run = [this, raw, handle, call, answer_key = std::move(answer_key)] {
    // A call that waited in the queue past its deadline, or whose client
    // left meanwhile, costs no conversion or planning.
    if (absl::Status gone = InterruptFor(raw.context)(); !gone.ok()) {
      Complete(raw, gone);
      return;
    }
    Complete(raw, RunGuarded(raw.method, [&]() -> absl::Status {
               RETURN_IF_ERROR((this->*handle)(raw.context, call->request(),
                                               &call->response()));
               if (!answer_key.empty()) {
                 registry_->StoreAnswer(answer_key,
                                        call->response().SerializeAsString());
               }
               return SerializeResponse(call->response(), raw.response);
             }));
  };
  if (on_worker || (this->*lane_of)(call->request()) == Lane::kInline) {
    run();
  } else {
    Submit(raw, std::move(run));
  }
}

void PlannerService::Submit(const RawCall& call, std::function<void()> task) {
  // The task owns the request's objects: once they are destroyed, freed
  // memory can go back to the OS.
  auto run_then_trim = [this, task = std::move(task)]() mutable {
    task();
    task = nullptr;
    budget_->TrimIfReleased();
  };
  if (!workers_->TrySubmit(std::move(run_then_trim))) {
    Complete(call, absl::ResourceExhaustedError(
                       "echod's worker queue is full; retry with backoff"));
  }
}

absl::Status PlannerService::Admit() {
  const int in_flight = in_flight_.fetch_add(1) + 1;
  if (draining_) {
    return absl::UnavailableError("echod is draining; retry on another node");
  }
  if (in_flight > options_.max_concurrent_requests) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "echod is overloaded: ", in_flight - 1, " requests in flight (max ",
        options_.max_concurrent_requests, "); retry with backoff"));
  }
  return absl::OkStatus();
}

void PlannerService::Complete(const RawCall& call, const absl::Status& status) {
  if (call.admitted) in_flight_.fetch_sub(1);
  if (call.memory != nullptr) call.memory->Release();
  const double seconds = std::chrono::duration<double>(
                             std::chrono::steady_clock::now() - call.start)
                             .count();
  const grpc::Status grpc_status = ToGrpcStatus(status);
  if (metrics_ != nullptr) {
    metrics_->RecordRequest(call.method, grpc_status.error_code(), seconds);
  }
  if (status.ok()) {
    spdlog::debug("{} from {}: OK in {:.3f} ms", call.method,
                  LogText(call.context->peer()), seconds * 1e3);
  } else if (RejectionLogLimiter().Allow(absl::StrCat(
                 call.method, " ", GrpcCodeName(grpc_status.error_code())))) {
    spdlog::warn("{} from {}: {} in {:.3f} ms", call.method,
                 LogText(call.context->peer()), LogText(status.ToString()),
                 seconds * 1e3);
  }
  call.finish(grpc_status);
}

grpc::ServerUnaryReactor* PlannerService::GetNodeInfo(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return ServeRaw(context, "GetNodeInfo", request, response, /*metered=*/false,
                  &PlannerService::InfoLane, &PlannerService::DoGetNodeInfo);
}

template <auto kLane, auto kHandle>
void PlannerService::ServeMetered(PlannerService* service,
                                  const RawCall& call) {
  service->ServeRequest(call, /*metered=*/true, kLane, kHandle);
}

const PlannerService::Route* PlannerService::RouteOf(const std::string& path) {
  // Every method here carries a graph or a request of any size: metered.
  static const Route kRoutes[] = {
      {"EstimateMemory", &ServeMetered<&PlannerService::EstimateLane,
                                       &PlannerService::DoEstimateMemory>},
      {"GenerateRecomputePlan",
       &ServeMetered<&PlannerService::PlanLane,
                     &PlannerService::DoGenerateRecomputePlan>},
      {"CheckFit",
       &ServeMetered<&PlannerService::FitLane, &PlannerService::DoCheckFit>},
      {"FindMaxBatchSize", &ServeMetered<&PlannerService::MaxBatchLane,
                                         &PlannerService::DoFindMaxBatchSize>},
      {"GetMemoryFrontier",
       &ServeMetered<&PlannerService::FrontierLane,
                     &PlannerService::DoGetMemoryFrontier>},
      {"ProfileOps", &ServeMetered<&PlannerService::ProfileLane,
                                   &PlannerService::DoProfileOps>},
      {"RegisterGraph", &ServeMetered<&PlannerService::RegisterLane,
                                      &PlannerService::DoRegisterGraph>},
  };
  const std::string prefix =
      absl::StrCat("/", v1::MemoryPlanner::service_full_name(), "/");
  if (!absl::StartsWith(path, prefix)) return nullptr;
  const absl::string_view method =
      absl::string_view(path).substr(prefix.size());
  for (const Route& route : kRoutes) {
    if (method == route.method) return &route;
  }
  return nullptr;
}

PlannerService::Lane PlannerService::LaneFor(
    const v1::Graph& graph, const std::string& fingerprint) const {
  // A registered graph's size is not known before it is resolved; its
  // cached answers never get here.
  if (!fingerprint.empty()) return Lane::kPool;
  return graph.ops_size() >= options_.heavy_graph_ops ? Lane::kPool
                                                      : Lane::kInline;
}

PlannerService::Lane PlannerService::EstimateLane(
    const v1::EstimateMemoryRequest& request) const {
  return LaneFor(request.graph(), request.graph_fingerprint());
}

PlannerService::Lane PlannerService::PlanLane(
    const v1::GenerateRecomputePlanRequest& request) const {
  return request.policy() == v1::RECOMPUTE_POLICY_OPTIMAL
             ? Lane::kPool
             : LaneFor(request.graph(), request.graph_fingerprint());
}

PlannerService::Lane PlannerService::FitLane(
    const v1::CheckFitRequest& request) const {
  // Several devices ("all": every catalog entry) or a batch search per
  // device: many plans, whatever the graph's size.
  const bool many_plans =
      request.device_names_size() > 1 || request.include_max_batch() ||
      std::any_of(
          request.device_names().begin(), request.device_names().end(),
          [](const std::string& name) { return NamesAllDevices(name); });
  return many_plans ? Lane::kPool
                    : LaneFor(request.graph(), request.graph_fingerprint());
}

}  // namespace echo::server
