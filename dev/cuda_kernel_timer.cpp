// A CUDA injection library (CUDA_INJECTION64_PATH) that times every kernel, copy and memset of a program
// by CUPTI's activity records, at a few microseconds of cost each instead of Nsight Compute's replays,
// and at exit writes each kernel name's count and GPU time, summed, to $FERRY_KERNEL_TIMES (tab-separated).
//   nvcc -shared -Xcompiler -fPIC -o cuda_kernel_timer.so dev/cuda_kernel_timer.cpp -lcupti   (or g++ with
//   CUDA's include and lib folders); then CUDA_INJECTION64_PATH=$PWD/cuda_kernel_timer.so
//   FERRY_KERNEL_TIMES=kernels.tsv ferry train --device cuda ...   (dev/gpu_kernel_times.sh does it)
// A diagnosis tool in dev/, not part of the engine: one process-wide table, filled by CUPTI's thread.
#include <cupti.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace {

struct Totals {
  std::uint64_t count = 0;
  std::uint64_t nanoseconds = 0;
  std::uint64_t bytes = 0;
};

struct Table {
  std::mutex mutex;
  std::map<std::string, Totals> by_name;
  std::uint64_t first_start = UINT64_MAX;
  std::uint64_t last_end = 0;
};

Table& table() {
  static Table* instance = new Table;  // never destroyed: CUPTI may deliver records during exit
  return *instance;
}

constexpr std::size_t kBufferBytes = 8 << 20;

void CUPTIAPI buffer_requested(std::uint8_t** buffer, std::size_t* size, std::size_t* max_records) {
  *buffer = static_cast<std::uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = kBufferBytes;
  *max_records = 0;
}

void add(const std::string& name, std::uint64_t start, std::uint64_t end, std::uint64_t bytes) {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mutex);
  Totals& totals = t.by_name[name];
  ++totals.count;
  totals.nanoseconds += end - start;
  totals.bytes += bytes;
  if (start < t.first_start) t.first_start = start;
  if (end > t.last_end) t.last_end = end;
}

const char* copy_kind(std::uint8_t kind) {
  switch (kind) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD: return "copy host->device";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH: return "copy device->host";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD: return "copy device->device";
    default: return "copy other";
  }
}

void CUPTIAPI buffer_completed(CUcontext, std::uint32_t, std::uint8_t* buffer, std::size_t, std::size_t valid) {
  CUpti_Activity* record = nullptr;
  while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    if (record->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || record->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
      const auto* kernel = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
      add(kernel->name != nullptr ? kernel->name : "?", kernel->start, kernel->end, 0);
    } else if (record->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
      const auto* copy = reinterpret_cast<const CUpti_ActivityMemcpy6*>(record);
      add(copy_kind(copy->copyKind), copy->start, copy->end, copy->bytes);
    } else if (record->kind == CUPTI_ACTIVITY_KIND_MEMSET) {
      const auto* set = reinterpret_cast<const CUpti_ActivityMemset4*>(record);
      add("memset", set->start, set->end, set->bytes);
    }
  }
  std::free(buffer);
}

void write_table() {
  cuptiActivityFlushAll(1);
  const char* path = std::getenv("FERRY_KERNEL_TIMES");
  std::FILE* file = path != nullptr ? std::fopen(path, "w") : stderr;
  if (file == nullptr) return;
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mutex);
  std::fprintf(file, "# span_ns\t%llu\n", static_cast<unsigned long long>(t.last_end > t.first_start ? t.last_end - t.first_start : 0));
  std::fprintf(file, "name\tcount\tnanoseconds\tbytes\n");
  for (const auto& [name, totals] : t.by_name) {
    std::fprintf(file, "%s\t%llu\t%llu\t%llu\n", name.c_str(), static_cast<unsigned long long>(totals.count),
                 static_cast<unsigned long long>(totals.nanoseconds), static_cast<unsigned long long>(totals.bytes));
  }
  if (file != stderr) std::fclose(file);
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int InitializeInjection(void) {
  if (cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed) != CUPTI_SUCCESS) return 0;
  cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY);
  cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET);
  std::atexit(write_table);
  return 1;
}
