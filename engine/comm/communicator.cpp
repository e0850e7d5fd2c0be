// What every backend shares: element sizes and names of the communicator's data types and operations,
// the equal-count blocking collectives, which run as the variable-count ones, and exchanges as their
// messages one by one.
#include "engine/comm/communicator.h"

#include <vector>

namespace ferry {
namespace {

// Complete once all of its requests are.
class AllRequests final : public CommRequest {
 public:
  explicit AllRequests(std::vector<std::unique_ptr<CommRequest>> requests) : requests_(std::move(requests)) {}
  bool test() override {
    bool complete = true;
    for (const std::unique_ptr<CommRequest>& request : requests_) complete = request->test() && complete;  // each progresses
    return complete;
  }
  void wait() override {
    for (const std::unique_ptr<CommRequest>& request : requests_) request->wait();
  }

 private:
  std::vector<std::unique_ptr<CommRequest>> requests_;
};

}  // namespace

std::unique_ptr<CommRequest> Communicator::exchange_async(std::span<const PointToPoint> messages) {
  std::vector<std::unique_ptr<CommRequest>> requests;
  requests.reserve(messages.size());
  for (const PointToPoint& message : messages) {
    requests.push_back(message.kind == PointToPoint::Kind::send ? send_async(message.send_data, message.bytes, message.peer, message.tag)
                                                    : receive_async(message.receive_data, message.bytes, message.peer, message.tag));
  }
  return std::make_unique<AllRequests>(std::move(requests));
}

std::size_t comm_data_type_size(CommDataType type) {
  switch (type) {
    case CommDataType::f32: return 4;
    case CommDataType::f64: return 8;
    case CommDataType::i64: return 8;
    case CommDataType::bf16: return 2;
    case CommDataType::f16: return 2;
  }
  throw std::invalid_argument("unknown CommDataType " + std::to_string(static_cast<int>(type)));
}

const char* comm_data_type_name(CommDataType type) {
  switch (type) {
    case CommDataType::f32: return "f32";
    case CommDataType::f64: return "f64";
    case CommDataType::i64: return "i64";
    case CommDataType::bf16: return "bf16";
    case CommDataType::f16: return "f16";
  }
  throw std::invalid_argument("unknown CommDataType " + std::to_string(static_cast<int>(type)));
}

const char* reduce_operation_name(ReduceOperation operation) {
  switch (operation) {
    case ReduceOperation::sum: return "sum";
    case ReduceOperation::max: return "max";
    case ReduceOperation::average: return "average";
  }
  throw std::invalid_argument("unknown ReduceOperation " + std::to_string(static_cast<int>(operation)));
}

void Communicator::reduce_scatter(const void* input, void* output, std::size_t count, CommDataType type,
                                  ReduceOperation operation) {
  const std::vector<std::size_t> counts(static_cast<std::size_t>(size()), count);
  reduce_scatter(input, output, counts, type, operation);
}

void Communicator::all_gather(const void* input, void* output, std::size_t count, CommDataType type) {
  const std::vector<std::size_t> counts(static_cast<std::size_t>(size()), count);
  all_gather(input, output, counts, type);
}

}  // namespace ferry
