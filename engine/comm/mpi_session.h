// MpiSession owns MPI's process-wide initialization, the one global state MPI imposes: it initializes
// MPI (thread level funneled) unless something else already did, and finalizes it only when it was the
// one that initialized it. MPI starts once per process: a finalized MPI cannot start again.
#pragma once

namespace ferry {

class MpiSession {
 public:
  MpiSession();  // throws CommunicationError when MPI is finalized or cannot give funneled threads
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

  bool initialized_here() const { return initialized_here_; }
  // Keeps MPI from being finalized: after an operation that could not be withdrawn, MPI_Finalize could
  // wait forever on the peer that never came; the job then ends as one that did not finalize.
  void skip_finalize() { initialized_here_ = false; }

 private:
  bool initialized_here_ = false;
};

}  // namespace ferry
