// ferry's flash attention kernels on a GPU, one shape, each products type (f32, bf16): the forward's and
// the backward's GPU time (CUDA events, median of the repetitions) and their TFLOP/s, as JSON lines.
// benchmarks/attention_peer.py times PyTorch's scaled_dot_product_attention on the same shape beside it:
//   attention_benchmark [BATCH SEQUENCE CHANNELS HEADS [REPETITIONS]]   (default gpt2's: 16 1024 768 12 20)
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <random>
#include <string>
#include <vector>

#include "allocator/cuda_check.h"
#include "engine/core/device.h"
#include "engine/core/cuda_device.h"
#include "engine/core/tensor.h"
#include "models/kernels/cuda/flash_attention.h"

namespace {

using ferry::cuda::AttentionProducts;

const char* products_name(AttentionProducts products) {
  return products == AttentionProducts::bf16 ? "bf16" : "f32";
}

// Milliseconds of GPU time `work` takes on `stream`, the median of `repetitions` after one warm-up.
template <typename Work>
double median_milliseconds(cudaStream_t stream, int repetitions, const Work& work) {
  cudaEvent_t start, stop;
  FERRY_CUDA_CHECK(cudaEventCreate(&start));
  FERRY_CUDA_CHECK(cudaEventCreate(&stop));
  work();
  std::vector<double> times;
  for (int i = 0; i < repetitions; ++i) {
    FERRY_CUDA_CHECK(cudaEventRecord(start, stream));
    work();
    FERRY_CUDA_CHECK(cudaEventRecord(stop, stream));
    FERRY_CUDA_CHECK(cudaEventSynchronize(stop));
    float milliseconds = 0;
    FERRY_CUDA_CHECK(cudaEventElapsedTime(&milliseconds, start, stop));
    times.push_back(milliseconds);
  }
  FERRY_CUDA_CHECK(cudaEventDestroy(start));
  FERRY_CUDA_CHECK(cudaEventDestroy(stop));
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

int run(int argc, char** argv) {
  const auto argument = [&](int index, std::int64_t fallback) { return argc > index ? std::atoll(argv[index]) : fallback; };
  const ferry::cpu::AttentionShape shape{argument(1, 16), argument(2, 1024), argument(3, 768), argument(4, 12)};
  const int repetitions = static_cast<int>(argument(5, 20));
  auto device = ferry::create_device(ferry::DeviceOptions{ferry::DeviceKind::cuda, std::size_t{8} << 30});
  const cudaStream_t stream = static_cast<ferry::CudaDevice&>(*device).native_stream(ferry::Stream{});
  using ferry::DType;
  using ferry::MemoryCategory;
  using ferry::Tensor;
  const auto tensor = [&](std::vector<std::int64_t> dims, const char* tag) {
    return Tensor::empty(*device, std::move(dims), DType::f32, MemoryCategory::activations, tag);
  };
  const Tensor qkv = tensor({shape.batch, shape.sequence, 3 * shape.channels}, "qkv");
  const Tensor out = tensor({shape.batch, shape.sequence, shape.channels}, "out");
  const Tensor dout = tensor({shape.batch, shape.sequence, shape.channels}, "dout");
  const Tensor dqkv = tensor({shape.batch, shape.sequence, 3 * shape.channels}, "dqkv");
  const Tensor logsumexp = tensor({shape.batch, shape.heads, shape.sequence}, "logsumexp");
  const Tensor row_dot = tensor({ferry::cuda::flash_attention_scratch_elements(shape)}, "row_dot");
  std::mt19937 generator(1);
  std::normal_distribution<float> normal;
  std::vector<float> values(static_cast<std::size_t>(qkv.numel()));
  for (float& value : values) value = normal(generator);
  qkv.copy_from_host(values.data());
  values.resize(static_cast<std::size_t>(dout.numel()));
  for (float& value : values) value = normal(generator);
  dout.copy_from_host(values.data());

  // Multiply-adds of the causal products (half the T x T entries): 2 in the forward, 5 in the backward.
  const double products = static_cast<double>(shape.batch) * static_cast<double>(shape.sequence) * static_cast<double>(shape.sequence) *
                          static_cast<double>(shape.channels) / 2.0;
  const double forward_flops = 2.0 * 2.0 * products, backward_flops = 5.0 * 2.0 * products;
  for (const AttentionProducts kind : {AttentionProducts::f32, AttentionProducts::bf16}) {
    const double forward = median_milliseconds(stream, repetitions, [&] {
      ferry::cuda::flash_attention_forward(out.data_as<float>(), logsumexp.data_as<float>(), qkv.data_as<float>(), shape, 0.0f,
                                           ferry::cpu::RandomKey{1}, kind, stream);
    });
    const double backward = median_milliseconds(stream, repetitions, [&] {
      ferry::cuda::flash_attention_backward(dqkv.data_as<float>(), row_dot.data_as<float>(), dout.data_as<float>(), out.data_as<float>(),
                                            qkv.data_as<float>(), logsumexp.data_as<float>(), shape, 0.0f, ferry::cpu::RandomKey{1}, kind,
                                            stream);
    });
    std::printf(
        "{\"who\": \"ferry\", \"products\": \"%s\", \"batch\": %lld, \"sequence\": %lld, \"channels\": %lld, \"heads\": %lld, "
        "\"forward_ms\": %.4f, \"backward_ms\": %.4f, \"forward_tflops\": %.1f, \"backward_tflops\": %.1f}\n",
        products_name(kind), static_cast<long long>(shape.batch), static_cast<long long>(shape.sequence),
        static_cast<long long>(shape.channels), static_cast<long long>(shape.heads), forward, backward, forward_flops / forward / 1e9,
        backward_flops / backward / 1e9);
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "attention_benchmark: %s\n", error.what());
    return 1;
  }
}
