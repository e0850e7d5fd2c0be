#include "engine/comm/mpi_request.h"

#include <cstdlib>
#include <iostream>

namespace ferry {

MpiRequest::~MpiRequest() {
  if (failure_) return;
  if (communicator_.failed()) {
    // Another operation already failed and its error is on its way to end the job, named: waiting out
    // this one's timeout too would end it first, with this request's description instead.
    communicator_.abandon(operation_);
    return;
  }
  try {
    if (operation_.in_flight()) communicator_.complete(operation_);
    run_finish();
  } catch (const std::exception& error) {
    std::cerr << std::string("ferry: a pending request was destroyed and did not complete: ") + error.what() +
                     "\nferry: ending the job\n";
    communicator_.abort(EXIT_FAILURE);
  }
}

template <typename Poll>
bool MpiRequest::settle(Poll&& poll) {
  if (failure_) throw CommunicationError(*failure_);
  try {
    const bool done = !operation_.in_flight() || poll();
    if (done) run_finish();
    return done;
  } catch (const CommunicationError& error) {
    failure_ = error.what();
    throw;
  }
}

bool MpiRequest::test() {
  return settle([&] { return communicator_.test(operation_); });
}

void MpiRequest::wait() {
  settle([&] {
    communicator_.complete(operation_);
    return true;
  });
}

void MpiRequest::run_finish() {
  if (!finish_) return;
  const std::function<void()> finish = std::move(finish_);
  finish_ = nullptr;
  finish();
}

}  // namespace ferry
