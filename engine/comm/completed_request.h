// CompletedRequest: the request of an operation that was done when it started (one rank, dry runs):
// test() is true and wait() returns at once. Private to engine/comm.
#pragma once

#include "engine/comm/communicator.h"

namespace ferry {

class CompletedRequest final : public CommRequest {
 public:
  bool test() override { return true; }
  void wait() override {}
};

}  // namespace ferry
