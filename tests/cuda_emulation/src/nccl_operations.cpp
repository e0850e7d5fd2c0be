// The emulated NCCL's operations in flight (nccl_operations.h).
#include "nccl_operations.h"

#include <algorithm>

#include "cuda_emulation/stream_work.h"

namespace ferry::cuda_emulation {
namespace {

// Operations posted and not yet seen complete, oldest first (one host thread issues NCCL calls).
std::vector<std::shared_ptr<PostedOperation>>& unfinished() {
  static std::vector<std::shared_ptr<PostedOperation>> operations;
  return operations;
}

// Operations of aborted communicators: never freed, since MPI may still write into their buffers.
std::vector<std::shared_ptr<PostedOperation>>& abandoned() {
  static auto* operations = new std::vector<std::shared_ptr<PostedOperation>>();
  return *operations;
}

std::string mpi_error_text(int code) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  MPI_Error_string(code, text, &length);
  return std::string(text, static_cast<std::size_t>(length));
}

}  // namespace

bool ByteSpan::overlaps(const ByteSpan& other) const {
  if (bytes == 0 || other.bytes == 0) return false;
  return begin < other.begin + other.bytes && other.begin < begin + bytes;
}

MPI_Request* PostedOperation::add_request() {
  requests_.push_back(MPI_REQUEST_NULL);
  return &requests_.back();
}

void PostedOperation::fail(ncclResult_t result, const std::string& text) {
  if (state_->async_error != ncclSuccess) return;  // the first failure is the one reported
  state_->async_error = result;
  state_->async_error_text = text;
}

bool PostedOperation::progress(bool wait) {
  if (finished_) return true;
  if (state_->aborted) return true;  // kept by abandon_operations
  if (!requests_.empty()) {
    const int count = static_cast<int>(requests_.size());
    int code = MPI_SUCCESS;
    if (wait) {
      code = MPI_Waitall(count, requests_.data(), MPI_STATUSES_IGNORE);
    } else {
      int done = 0;
      code = MPI_Testall(count, requests_.data(), &done, MPI_STATUSES_IGNORE);
      if (code == MPI_SUCCESS && done == 0) return false;
    }
    if (code != MPI_SUCCESS) {
      fail(ncclSystemError, "NCCL emulation: an operation's MPI calls failed: " + mpi_error_text(code));
      steps_.clear();
    }
  }
  for (const auto& step : steps_) {
    if (const ncclResult_t result = step(); result != ncclSuccess) {
      fail(result, "NCCL emulation: completing an operation failed");
      break;
    }
  }
  finished_ = true;
  steps_.clear();  // and the buffers they hold
  requests_.clear();
  return true;
}

bool PostedOperation::conflicts_with(const Posting& later) const {
  if (finished_) return false;
  const auto any_overlap = [](const std::vector<ByteSpan>& these, const std::vector<ByteSpan>& those) {
    return std::any_of(these.begin(), these.end(), [&](const ByteSpan& span) {
      return std::any_of(those.begin(), those.end(), [&](const ByteSpan& other) { return span.overlaps(other); });
    });
  };
  return any_overlap(writes_, later.reads) || any_overlap(writes_, later.writes) || any_overlap(reads_, later.writes);
}

void PostedOperation::add_spans(const Posting& posting) {
  reads_.insert(reads_.end(), posting.reads.begin(), posting.reads.end());
  writes_.insert(writes_.end(), posting.writes.begin(), posting.writes.end());
}

ncclResult_t issue(cudaStream_t stream, const std::shared_ptr<CommState>& state, std::vector<Posting> postings) {
  std::vector<std::shared_ptr<PostedOperation>>& operations = unfinished();
  std::erase_if(operations, [](const std::shared_ptr<PostedOperation>& each) { return each->progress(false); });
  // An operation that needs an earlier one's result (or would overwrite what it still reads) starts
  // after it, as one stream's operations do.
  for (const auto& earlier : operations) {
    if (std::any_of(postings.begin(), postings.end(), [&](const Posting& posting) { return earlier->conflicts_with(posting); })) {
      earlier->progress(true);
    }
  }
  auto operation = std::make_shared<PostedOperation>(state);
  for (const Posting& posting : postings) {
    operation->add_spans(posting);
    if (const ncclResult_t result = posting.post(*operation); result != ncclSuccess) {
      // Requests already posted stay with the operation, which is kept (MPI may still use its buffers).
      abandoned().push_back(operation);
      return result;
    }
  }
  operations.push_back(operation);
  defer_on_stream(stream, [operation](bool wait) { return operation->progress(wait); });
  return ncclSuccess;
}

void abandon_operations(CommState& state) {
  state.aborted = true;
  std::vector<std::shared_ptr<PostedOperation>>& operations = unfinished();
  for (const auto& each : operations) {
    if (each->state().get() == &state) abandoned().push_back(each);
  }
  std::erase_if(operations, [&](const std::shared_ptr<PostedOperation>& each) { return each->state().get() == &state; });
}

}  // namespace ferry::cuda_emulation
