// main of the MPI test job: one communicator for the whole run, a minute's timeout so that a test that
// lost its peer fails instead of hanging; every rank returns the same code (failed anywhere = failed).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <iostream>
#include <memory>

#include "tests/comm/mpi_test_world.h"

namespace ferry::testing {
namespace {

Communicator* job_communicator = nullptr;

}  // namespace

Communicator& world() { return *job_communicator; }

}  // namespace ferry::testing

int main(int argc, char** argv) {
  std::unique_ptr<ferry::Communicator> communicator = ferry::make_communicator(/*force_mpi=*/true);
  communicator->set_timeout(std::chrono::seconds(60));
  ferry::testing::job_communicator = communicator.get();
  if (communicator->rank() != 0) GTEST_FLAG_SET(brief, true);  // other ranks print their failures only
  ::testing::InitGoogleTest(&argc, argv);
  std::int64_t failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  try {
    communicator->all_reduce(&failed, 1, ferry::CommDataType::i64, ferry::ReduceOperation::max);
  } catch (const ferry::CommunicationError& error) {
    std::cerr << "rank " << communicator->rank() << ": " << error.what() << "\n";
    return 1;
  }
  return failed != 0 ? 1 : 0;
}
