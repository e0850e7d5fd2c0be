// MpiHalfPrecisionOperations: what MPI needs to reduce bf16 and f16, which it does not know: a 2-byte
// contiguous datatype and user-defined operations (sum and max, combined in f32 and rounded once per
// pairwise combine). Made once per MPI context, freed when it dies (before MPI is finalized).
#pragma once

#include <mpi.h>

#include "engine/comm/communicator.h"

namespace ferry {

class MpiHalfPrecisionOperations {
 public:
  MpiHalfPrecisionOperations();  // MPI must be running
  ~MpiHalfPrecisionOperations();
  MpiHalfPrecisionOperations(const MpiHalfPrecisionOperations&) = delete;
  MpiHalfPrecisionOperations& operator=(const MpiHalfPrecisionOperations&) = delete;

  MPI_Datatype datatype() const { return two_bytes_; }
  // `type` bf16 or f16; `operation` sum or max (average reduces with sum).
  MPI_Op operation(CommDataType type, ReduceOperation operation) const;

 private:
  void release();  // frees what was made (unless MPI is already finalized)

  MPI_Datatype two_bytes_ = MPI_DATATYPE_NULL;
  MPI_Op bf16_sum_ = MPI_OP_NULL;
  MPI_Op bf16_max_ = MPI_OP_NULL;
  MPI_Op f16_sum_ = MPI_OP_NULL;
  MPI_Op f16_max_ = MPI_OP_NULL;
};

}  // namespace ferry
