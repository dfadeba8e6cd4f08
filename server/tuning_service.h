// TuningService: the gRPC face of the log database and the job manager. It
// translates requests to TuningLog, DeviceRegistry and JobManager calls and
// their Status to gRPC codes; it keeps no state of its own beyond a change
// counter that wakes WatchJob streams. Thread safe.
#pragma once

#include <condition_variable>
#include <mutex>

#include "server/device_registry.h"
#include "server/job_manager.h"
#include "server/request_gate.h"
#include "store/tuning_log.h"
#include "tunefarm/v1/tuning.grpc.pb.h"

namespace tunefarm::server {

class TuningService final : public v1::TuningService::Service {
 public:
  TuningService(store::TuningLog& log, DeviceRegistry& devices, JobManager& manager,
                const RequestGate& gate)
      : log_(log), devices_(devices), manager_(manager), gate_(gate) {}

  // Wakes WatchJob streams (the job runner and manager call it on every change).
  void NotifyJobsChanged();

  // Ends WatchJob streams promptly; call before grpc::Server::Shutdown.
  void Shutdown();

  grpc::Status SubmitJob(grpc::ServerContext* ctx, const v1::SubmitJobRequest* req,
                         v1::SubmitJobResponse* resp) override;
  grpc::Status GetJob(grpc::ServerContext* ctx, const v1::GetJobRequest* req,
                      v1::Job* resp) override;
  grpc::Status ListJobs(grpc::ServerContext* ctx, const v1::ListJobsRequest* req,
                        v1::ListJobsResponse* resp) override;
  grpc::Status WatchJob(grpc::ServerContext* ctx, const v1::WatchJobRequest* req,
                        grpc::ServerWriter<v1::JobEvent>* writer) override;
  grpc::Status CancelJob(grpc::ServerContext* ctx, const v1::CancelJobRequest* req,
                         v1::Job* resp) override;
  grpc::Status ResumeJob(grpc::ServerContext* ctx, const v1::ResumeJobRequest* req,
                         v1::Job* resp) override;
  grpc::Status QueryBest(grpc::ServerContext* ctx, const v1::QueryBestRequest* req,
                         v1::QueryBestResponse* resp) override;
  grpc::Status ListRecords(grpc::ServerContext* ctx, const v1::ListRecordsRequest* req,
                           v1::ListRecordsResponse* resp) override;
  grpc::Status ExportRecords(grpc::ServerContext* ctx, const v1::ExportRecordsRequest* req,
                             grpc::ServerWriter<v1::RecordChunk>* writer) override;
  grpc::Status ImportRecords(grpc::ServerContext* ctx, const v1::ImportRecordsRequest* req,
                             v1::ImportRecordsResponse* resp) override;
  grpc::Status ListDevices(grpc::ServerContext* ctx, const v1::ListDevicesRequest* req,
                           v1::ListDevicesResponse* resp) override;
  grpc::Status RunModel(grpc::ServerContext* ctx, const v1::RunModelRequest* req,
                        v1::RunModelResponse* resp) override;
  grpc::Status UpdateDevice(grpc::ServerContext* ctx, const v1::UpdateDeviceRequest* req,
                            v1::Device* resp) override;

 private:
  store::TuningLog& log_;
  DeviceRegistry& devices_;
  JobManager& manager_;
  const RequestGate& gate_;

  std::mutex mu_;
  std::condition_variable changed_;
  uint64_t generation_ = 0;  // guarded by mu_
  bool shutdown_ = false;    // guarded by mu_
};

}  // namespace tunefarm::server
