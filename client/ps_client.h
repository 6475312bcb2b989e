// PsClient: the typed client of one parameter server task.
#ifndef STRATA_CLIENT_PS_CLIENT_H_
#define STRATA_CLIENT_PS_CLIENT_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "client/push_tag.h"
#include "client/retry.h"
#include "client/shared_region.h"
#include "common/gradient_encoding.h"
#include "common/tensor.h"
#include "grpcpp/channel.h"
#include "grpcpp/generic/generic_stub.h"
#include "rpc/tls.h"
#include "strata/v1/parameter_server.grpc.pb.h"

namespace strata {

struct PsClientOptions {
  // Channels (TCP connections) to the server; calls go round-robin.
  int num_channels = 1;
  // Deadline of each attempt.
  absl::Duration deadline = absl::Seconds(60);
  // Attempts per call on UNAVAILABLE (only that code is retried).
  int max_attempts = 5;
  absl::Duration initial_backoff = absl::Milliseconds(50);
  absl::Duration max_backoff = absl::Seconds(2);
  // Payload bytes per streamed chunk.
  size_t chunk_bytes = 1 << 20;
  // TLS and the bearer token of every call (plaintext, none by default).
  ClientSecurity security;
  // PsCluster::PushPullMany passes bytes through shared memory to a server
  // on this host (a loopback target) that accepts it.
  bool shared_memory = true;
  // Exchange uses a Lane stream per lane (else, and against a server
  // without lanes, PushVariables then PullVariables).
  bool lanes = true;
  // Wire compression of the float32 gradients PushVariables and Exchange
  // send (a job's strategy.gradient_compression), with error feedback per
  // variable in this client. Push, PushRows and shared memory send float32.
  GradientEncoding gradient_encoding = GradientEncoding::kNone;
  // How a retry waits for its backoff (null: real time); tests inject one.
  SleepFunction sleep;
};

struct PullOptions {
  int64_t min_version = 0;  // wait until the variable reaches this version
  int64_t clock = 0;        // bounded staleness: the caller's clock
  int64_t worker = 0;
};

struct PullResult {
  DType dtype = DType::kInvalid;
  Shape shape;
  int64_t version = 0;
};

struct PushResult {
  int64_t version = 0;
  bool duplicate = false;
  bool applied = false;
  int attempts = 1;
};

// What PsClient::Exchange did: a result per pushed variable and the
// version read of each pulled one, in the order asked.
struct ExchangeResult {
  std::vector<PushResult> pushed;
  std::vector<int64_t> pulled;
};

// Thread-safe; calls may run concurrently from many threads.
class PsClient {
 public:
  // Creates the channels (connection happens on first use).
  static std::unique_ptr<PsClient> Connect(const std::string& target,
                                           const PsClientOptions& options = {});
  // Uses existing channels (tests, credentials set by the caller).
  // `target` is the address the channels lead to ("" when unknown).
  static std::unique_ptr<PsClient> FromChannels(
      std::vector<std::shared_ptr<grpc::Channel>> channels,
      const PsClientOptions& options = {}, const std::string& target = "");
  ~PsClient();

  // Returns true when created, false when an identical variable existed.
  absl::StatusOr<bool> CreateVariable(const v1::VariableSpec& spec);

  // Pulls a whole variable into `dst` (`dst_bytes` must equal its size).
  absl::StatusOr<PullResult> Pull(const std::string& name, void* dst,
                                  size_t dst_bytes,
                                  const PullOptions& options = {});
  // Pulls a whole variable into a new tensor.
  absl::StatusOr<Tensor> PullTensor(const std::string& name,
                                    const PullOptions& options = {},
                                    int64_t* version = nullptr);
  // Pulls rows `ids` of a 2-D variable into `dst` (ids.size() rows).
  absl::StatusOr<PullResult> PullRows(const std::string& name,
                                      absl::Span<const int64_t> ids, void* dst,
                                      size_t dst_bytes,
                                      const PullOptions& options = {});

  // Pushes a dense gradient of the variable's dtype and shape.
  absl::StatusOr<PushResult> Push(const std::string& name, DType dtype,
                                  const Shape& shape, const void* data,
                                  const PushTag& tag);
  // Pushes row gradients: `values` holds ids.size() rows of `row_width`.
  absl::StatusOr<PushResult> PushRows(const std::string& name, DType dtype,
                                      absl::Span<const int64_t> ids,
                                      int64_t row_width, const void* values,
                                      const PushTag& tag);
  // Several variables in one call: pulls variable names[i] into dsts[i]
  // (sizes[i] bytes, which must equal its size). Returns the versions read.
  absl::StatusOr<std::vector<int64_t>> PullVariables(
      const std::vector<std::string>& names, const std::vector<void*>& dsts,
      const std::vector<size_t>& sizes, const PullOptions& options = {});
  // Pushes dense gradients for several variables with one tag (each
  // variable applies it at most once). `shapes[i]` is variable i's shape.
  // float32 gradients travel as options().gradient_encoding (encoded once:
  // a retry resends the same bytes).
  absl::StatusOr<std::vector<PushResult>> PushVariables(
      const std::vector<std::string>& names, DType dtype,
      const std::vector<Shape>& shapes, const std::vector<const void*>& data,
      const PushTag& tag);

  // One step's traffic with this task on `lane` (>= 0; one caller thread
  // per lane at a time, others wait): pushes the dense gradients `grads`
  // (none: no push; shapes[i] is variable i's) with `tag`, then pulls
  // `pull_names` into `dsts` (sizes[i] bytes each; none: no pull). Sent as
  // one frame on the lane's persistent stream, opened on first use;
  // retried on UNAVAILABLE (a new stream, the push's attempt number
  // raised: it is applied once). Against a server without lanes, the same
  // through PushVariables then PullVariables.
  // Errors: those of PushVariables and PullVariables.
  absl::StatusOr<ExchangeResult> Exchange(
      int lane, const std::vector<std::string>& names,
      const std::vector<Shape>& shapes, const std::vector<const void*>& grads,
      const PushTag& tag, const std::vector<std::string>& pull_names,
      const std::vector<void*>& dsts, const std::vector<size_t>& sizes,
      const PullOptions& options = {});
  // Whether Exchange uses lanes with this server (until one answered that
  // it has none).
  bool UsesLanes() const;

  // Same-host shared memory (AttachSharedRegion in parameter_server.proto).
  // Attach returns the region's id on the server.
  // `server_pid` (when set) gets the server's process id.
  absl::StatusOr<uint64_t> AttachSharedRegion(const SharedRegion& region,
                                              int64_t* server_pid = nullptr);
  absl::Status DetachSharedRegion(uint64_t id);
  // A push then a pull whose bytes are in an attached region; retried on
  // UNAVAILABLE with the push's attempt number set, as PushVariables.
  absl::StatusOr<v1::SharedExchangeResponse> ExchangeShared(
      v1::SharedExchangeRequest request);
  // Asks the server to answer ExchangeShared through a doorbell in region
  // `id` (ServeSharedRegion). Returns the server's process id.
  absl::StatusOr<int64_t> ServeSharedRegion(uint64_t id, uint64_t control_offset,
                                            uint32_t message_bytes);
  // Asks the server to keep `names` mirrored at `offsets` of region `id`.
  absl::Status MirrorVariables(uint64_t id,
                               const std::vector<std::string>& names,
                               const std::vector<size_t>& offsets);
  // Whether the target is a loopback address (127.0.0.0/8, [::1],
  // localhost) or a unix socket, where shared memory may work.
  bool TargetIsLoopback() const;
  const PsClientOptions& options() const { return options_; }

  // Replaces a variable's value. Returns the new version.
  absl::StatusOr<int64_t> Assign(const std::string& name, DType dtype,
                                 const Shape& shape, const void* data);

  // `coordinator_epoch`: the elected coordinator's epoch (SaveRequest), 0
  // for every other caller.
  // `incarnation`: the PS process expected (SaveRequest.incarnation).
  absl::StatusOr<v1::SaveResponse> Save(const std::string& path,
                                        int64_t coordinator_epoch = 0,
                                        const std::string& incarnation = "");
  absl::StatusOr<v1::RestoreResponse> Restore(const std::string& path,
                                              int64_t coordinator_epoch = 0);
  // Deletes checkpoints (see DeleteCheckpointsRequest); returns how many.
  absl::StatusOr<int64_t> DeleteCheckpoints(
      const std::vector<std::string>& paths, int64_t coordinator_epoch = 0);
  absl::StatusOr<v1::ListVariablesResponse> ListVariables();
  absl::StatusOr<v1::StatsResponse> Stats();

  // Dynamic embedding tables (TableSpec in parameter_server.proto).
  // Returns true when created, false when an identical table existed.
  absl::StatusOr<bool> CreateTable(const v1::TableSpec& spec);
  // The rows of `ids` into `dst` (ids.size() x dim float32, dim being
  // dst.size() / ids.size()); `train` counts the lookup toward admission
  // and creates admitted rows (LookupRowsRequest). Split into calls of at
  // most kMaxTableCallBytes of rows. Errors: the server's; INVALID_ARGUMENT
  // when dst does not hold whole rows or the server's dim differs.
  absl::Status LookupRows(const std::string& table,
                          absl::Span<const int64_t> ids, bool train,
                          absl::Span<float> dst);
  // Pushes gradient rows (ids.size() x dim float32) in one call: tagged
  // (applied at most once per (job, worker, step), so retried on
  // UNAVAILABLE) when `tag` is set. Errors: the server's; INVALID_ARGUMENT
  // when the call would exceed kMaxTableCallBytes (push fewer ids).
  absl::StatusOr<v1::PushTableRowsResponse> PushTableRows(
      const std::string& table, absl::Span<const int64_t> ids,
      absl::Span<const float> gradients, const std::optional<PushTag>& tag);
  // Several tables of this task in one call: table i's rows of ids[i] into
  // dsts[i] (ids[i].size() x its dim). Beyond kMaxTableCallBytes, one
  // LookupRows per table instead.
  absl::Status LookupTables(const std::vector<std::string>& tables,
                            const std::vector<absl::Span<const int64_t>>& ids,
                            bool train, const std::vector<absl::Span<float>>& dsts);
  // Several tables' gradient rows in one call with one tag (each table
  // takes it at most once); beyond kMaxTableCallBytes, one PushTableRows
  // per table with the same tag (equally exactly once).
  absl::Status PushTables(const std::vector<std::string>& tables,
                          const std::vector<absl::Span<const int64_t>>& ids,
                          const std::vector<absl::Span<const float>>& gradients,
                          const std::optional<PushTag>& tag);
  // Every table's counters (only `table` when not empty).
  absl::StatusOr<v1::TableStatsResponse> TableStats(
      const std::string& table = "");
  // Reshards this task's tables from checkpoints of any number of tasks
  // (RestoreTablesRequest). Returns the rows loaded.
  absl::StatusOr<int64_t> RestoreTables(const std::vector<std::string>& paths);
  // The largest lookup answer or push a table call carries (under the
  // server's 4 MiB message limit).
  static constexpr size_t kMaxTableCallBytes = size_t{3} << 20;

 private:
  struct Conn {
    std::shared_ptr<grpc::Channel> channel;
    std::unique_ptr<v1::ParameterService::Stub> stub;
    std::unique_ptr<grpc::GenericStub> generic;
  };
  PsClient(std::vector<std::shared_ptr<grpc::Channel>> channels,
           const PsClientOptions& options, std::string target);
  Conn& Next();

  // One unary call, retried on UNAVAILABLE.
  template <typename Request, typename Response>
  absl::StatusOr<Response> Unary(
      grpc::Status (v1::ParameterService::Stub::*method)(
          grpc::ClientContext*, const Request&, Response*),
      const Request& request);
  // Pull of `request` into `dst` (or `alloc`), retried on UNAVAILABLE.
  absl::StatusOr<PullResult> PullWithRetries(const v1::PullRequest& request,
                                             void* dst, size_t dst_bytes,
                                             std::shared_ptr<Buffer>* alloc);
  // Uploads `header` and `payload` to `method`, retried on UNAVAILABLE with
  // `tag` (part of `header`) carrying each attempt's number. `*attempts` gets
  // the number of attempts made.
  absl::StatusOr<std::string> UploadTagged(
      const char* method, const google::protobuf::MessageLite& header,
      v1::PushTag* tag, absl::Span<const absl::string_view> payload,
      int* attempts);
  absl::StatusOr<PushResult> PushPayload(
      const std::string& name, v1::PushHeader header,
      std::vector<absl::string_view> payload);

  struct LaneSlot;
  // The slot of `lane`, created on first use.
  std::shared_ptr<LaneSlot> LaneFor(int lane);
  // A PushVariables header and its payload: the caller's gradients, or
  // their encoding (in `owned`) when options().gradient_encoding is set.
  struct PreparedPush {
    v1::PushVariablesHeader header;
    std::vector<absl::string_view> payload;
    std::vector<std::unique_ptr<char[]>> owned;
  };
  PreparedPush PreparePush(const std::vector<std::string>& names, DType dtype,
                           const std::vector<Shape>& shapes,
                           const std::vector<const void*>& data,
                           const PushTag& tag);
  absl::StatusOr<std::vector<PushResult>> PushPrepared(PreparedPush* push);
  absl::StatusOr<ExchangeResult> ExchangeUnary(
      PreparedPush* push, const std::vector<std::string>& pull_names,
      const std::vector<void*>& dsts, const std::vector<size_t>& sizes,
      const PullOptions& options);

  const PsClientOptions options_;
  const std::string target_;
  const Retrier retrier_;
  // The residuals of encoded gradients (null without an encoding).
  const std::unique_ptr<ErrorFeedback> feedback_;
  std::vector<Conn> conns_;
  std::atomic<uint64_t> next_{0};
  std::atomic<bool> lanes_refused_{false};
  absl::Mutex lanes_mu_;
  std::map<int, std::shared_ptr<LaneSlot>> lanes_ ABSL_GUARDED_BY(lanes_mu_);
};

}  // namespace strata

#endif  // STRATA_CLIENT_PS_CLIENT_H_
