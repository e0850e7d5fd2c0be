// The communicator of the whole MPI test job (comm_mpi_tests), made once by mpi_test_main.cpp: MPI
// starts once per process, so every test file of the job shares it.
#pragma once

#include "engine/comm/communicator.h"

namespace ferry::testing {

Communicator& world();

}  // namespace ferry::testing
