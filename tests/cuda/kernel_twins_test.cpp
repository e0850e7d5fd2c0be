// Each cuda kernel against its CPU twin on fresh random inputs: element-wise ops, dropout (the same
// mask bit for bit), bf16/f16 rounding, LayerNorm, the encoder, cross-entropy, AdamW (the same bits:
// no fused multiply-adds) and the global norm's sum of squares, within twin_comparison.h's bound. They skip
// where no GPU is present; the CUDA build compiles them everywhere.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "engine/core/device.h"
#include "engine/core/dtype.h"
#include "engine/core/tensor.h"
#include "tests/cuda/twin_comparison.h"

#ifdef FERRY_HAVE_CUDA
#include "engine/core/cuda_device.h"
#include "models/kernels/cpu/adamw.h"
#include "models/kernels/cpu/cross_entropy.h"
#include "models/kernels/cpu/elementwise.h"
#include "models/kernels/cpu/encoder.h"
#include "models/kernels/cpu/gelu.h"
#include "models/kernels/cpu/layernorm.h"
#include "models/kernels/cuda/adamw.h"
#include "models/kernels/cuda/cross_entropy.h"
#include "models/kernels/cuda/elementwise.h"
#include "models/kernels/cuda/encoder.h"
#include "models/kernels/cuda/layernorm.h"
#endif

namespace ferry {
namespace {

#ifdef FERRY_HAVE_CUDA

using testing::max_relative_error;
using testing::random_values;
constexpr double kFloatTolerance = testing::kTwinTolerance;

// A GPU, its compute stream, and host <-> device copies of typed vectors through the allocator.
class GpuKernels : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda_available()) GTEST_SKIP() << "no GPU present";
    device_ = create_device(DeviceOptions{DeviceKind::cuda, std::size_t{1} << 30});
    stream_ = static_cast<CudaDevice&>(*device_).native_stream(Stream{});
  }
  template <typename T>
  Tensor upload(const std::vector<T>& values, DType dtype) {
    Tensor tensor = Tensor::empty(*device_, {static_cast<std::int64_t>(values.size())}, dtype, MemoryCategory::workspace, "test");
    tensor.copy_from_host(values.data());
    return tensor;
  }
  Tensor upload(const std::vector<float>& values) { return upload(values, DType::f32); }
  // f64 scratch (no f64 dtype: twice as many f32 elements).
  Tensor doubles(std::int64_t count) { return Tensor::empty(*device_, {2 * count}, DType::f32, MemoryCategory::workspace, "f64"); }
  double first_double(const Tensor& tensor) {
    const std::vector<float> bits = download(tensor);
    double value = 0;
    std::memcpy(&value, bits.data(), sizeof value);
    return value;
  }
  template <typename T = float>
  std::vector<T> download(const Tensor& tensor) {
    std::vector<T> values(static_cast<std::size_t>(tensor.numel()));
    device_->synchronize();
    tensor.copy_to_host(values.data());
    device_->synchronize();
    return values;
  }
  std::unique_ptr<Device> device_;
  cudaStream_t stream_ = nullptr;
};

TEST_F(GpuKernels, ResidualGeluAndDropoutMatchTheirTwins) {
  const std::int64_t count = 100003;
  const std::vector<float> a = random_values(count, 1), b = random_values(count, 2), dout = random_values(count, 3);
  const Tensor a_gpu = upload(a), b_gpu = upload(b), dout_gpu = upload(dout);

  std::vector<float> expected(count);
  cpu::residual_forward(expected.data(), a.data(), b.data(), count);
  const Tensor out = Tensor::empty(*device_, {count}, DType::f32, MemoryCategory::workspace);
  cuda::residual_forward(out.data_as<float>(), a_gpu.data_as<float>(), b_gpu.data_as<float>(), count, stream_);
  EXPECT_EQ(download(out), expected);  // one IEEE add

  cpu::gelu_forward(expected.data(), a.data(), count);
  cuda::gelu_forward(out.data_as<float>(), a_gpu.data_as<float>(), count, stream_);
  EXPECT_LT(max_relative_error(download(out), expected), kFloatTolerance);

  std::vector<float> dinp = b;
  cpu::gelu_backward(dinp.data(), a.data(), dout.data(), count);
  const Tensor dinp_gpu = upload(b);
  cuda::gelu_backward(dinp_gpu.data_as<float>(), a_gpu.data_as<float>(), dout_gpu.data_as<float>(), count, stream_);
  EXPECT_LT(max_relative_error(download(dinp_gpu), dinp), kFloatTolerance);

  const cpu::RandomKey key{12345};
  cpu::dropout_forward(expected.data(), a.data(), count, 0.3f, key);
  cuda::dropout_forward(out.data_as<float>(), a_gpu.data_as<float>(), count, 0.3f, key, stream_);
  const std::vector<float> dropped = download(out);
  EXPECT_EQ(dropped, expected);  // the same mask, the same scaling
  EXPECT_GT(std::count(dropped.begin(), dropped.end(), 0.0f), count / 4);
  dinp = b;
  cpu::dropout_backward(dinp.data(), dout.data(), count, 0.3f, key);
  const Tensor dropout_gradient = upload(b);
  cuda::dropout_backward(dropout_gradient.data_as<float>(), dout_gpu.data_as<float>(), count, 0.3f, key, stream_);
  EXPECT_EQ(download(dropout_gradient), dinp);
}

TEST_F(GpuKernels, SixteenBitRoundingMatchesTheHost) {
  std::vector<float> values = random_values(4099, 4, 100.0f);
  values[0] = NAN;
  values[1] = INFINITY;
  values[2] = 1.0f + 0x1.0p-8f;  // a tie: rounds to even
  values[3] = 1e-30f;            // an f16 underflow
  values[4] = 70000.0f;          // an f16 overflow
  const auto count = static_cast<std::int64_t>(values.size());
  const Tensor source = upload(values);
  const Tensor half = Tensor::empty(*device_, {count}, DType::bf16, MemoryCategory::workspace);
  const Tensor back = Tensor::empty(*device_, {count}, DType::f32, MemoryCategory::workspace);
  std::vector<std::uint16_t> expected(values.size());
  std::vector<float> expected_back(values.size());

  convert_f32_to_bf16(values.data(), expected.data(), values.size());
  convert_bf16_to_f32(expected.data(), expected_back.data(), values.size());
  cuda::convert_f32_to_bf16(source.data_as<float>(), half.data_as<std::uint16_t>(), count, stream_);
  cuda::convert_bf16_to_f32(half.data_as<std::uint16_t>(), back.data_as<float>(), count, stream_);
  EXPECT_EQ(download<std::uint16_t>(half), expected);
  const std::vector<float> bf16_back = download(back);
  for (std::size_t i = 1; i < values.size(); ++i) EXPECT_EQ(bf16_back[i], expected_back[i]) << i;
  EXPECT_TRUE(std::isnan(bf16_back[0]));
  // A view one element in misses the kernels' four-element alignment: every element goes one by one.
  const Tensor zeros = upload(std::vector<float>(values.size(), 0.0f));
  cuda::convert_f32_to_bf16(zeros.data_as<float>(), half.data_as<std::uint16_t>(), count, stream_);
  cuda::convert_f32_to_bf16(source.data_as<float>() + 1, half.data_as<std::uint16_t>() + 1, count - 1, stream_);
  const std::vector<std::uint16_t> shifted = download<std::uint16_t>(half);
  EXPECT_EQ(shifted[0], 0u);
  for (std::size_t i = 1; i < values.size(); ++i) EXPECT_EQ(shifted[i], expected[i]) << i;

  convert_f32_to_f16(values.data(), expected.data(), values.size());
  convert_f16_to_f32(expected.data(), expected_back.data(), values.size());
  cuda::convert_f32_to_f16(source.data_as<float>(), half.data_as<std::uint16_t>(), count, stream_);
  cuda::convert_f16_to_f32(half.data_as<std::uint16_t>(), back.data_as<float>(), count, stream_);
  const std::vector<std::uint16_t> f16 = download<std::uint16_t>(half);
  const std::vector<float> f16_back = download(back);
  for (std::size_t i = 1; i < values.size(); ++i) {  // NaN payloads may differ; every number rounds the same
    EXPECT_EQ(f16[i], expected[i]) << i;
    EXPECT_EQ(f16_back[i], expected_back[i]) << i;
  }
  EXPECT_TRUE(std::isnan(f16_back[0]));
}

TEST_F(GpuKernels, LayerNormForwardAndBackwardMatchTheTwin) {
  // Partial blocks of rows, rows past a block, channels past a warp and fewer than its lanes, one row.
  for (const auto& [rows, channels] : {std::pair<std::int64_t, std::int64_t>{37, 64}, {300, 768}, {5, 33}, {1, 7}}) {
    const auto n = static_cast<std::size_t>(rows * channels), c = static_cast<std::size_t>(channels);
    const std::vector<float> inp = random_values(n, 5, 2.0f), weight = random_values(c, 6), bias = random_values(c, 7);
    const std::vector<float> dout = random_values(n, 8), dinp_start = random_values(n, 9), dweight_start = random_values(c, 10);
    std::vector<float> out(n), mean(static_cast<std::size_t>(rows)), rstd(static_cast<std::size_t>(rows));
    std::vector<float> dinp = dinp_start, dweight = dweight_start, dbias = dweight_start;
    cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), weight.data(), bias.data(), rows, channels);
    cpu::layernorm_backward(dinp.data(), dweight.data(), dbias.data(), dout.data(), inp.data(), weight.data(), mean.data(), rstd.data(),
                            rows, channels);

    const Tensor inp_gpu = upload(inp), weight_gpu = upload(weight), bias_gpu = upload(bias), dout_gpu = upload(dout);
    const Tensor out_gpu = upload(std::vector<float>(n)), mean_gpu = upload(mean), rstd_gpu = upload(rstd);
    const Tensor dinp_gpu = upload(dinp_start), dweight_gpu = upload(dweight_start), dbias_gpu = upload(dweight_start);
    cuda::layernorm_forward(out_gpu.data_as<float>(), mean_gpu.data_as<float>(), rstd_gpu.data_as<float>(), inp_gpu.data_as<float>(),
                            weight_gpu.data_as<float>(), bias_gpu.data_as<float>(), rows, channels, stream_);
    cuda::layernorm_backward(dinp_gpu.data_as<float>(), dweight_gpu.data_as<float>(), dbias_gpu.data_as<float>(), dout_gpu.data_as<float>(),
                             inp_gpu.data_as<float>(), weight_gpu.data_as<float>(), mean_gpu.data_as<float>(), rstd_gpu.data_as<float>(),
                             rows, channels, stream_);
    EXPECT_LT(max_relative_error(download(out_gpu), out), kFloatTolerance) << rows << " x " << channels;
    EXPECT_LT(max_relative_error(download(mean_gpu), mean), kFloatTolerance);
    EXPECT_LT(max_relative_error(download(rstd_gpu), rstd), kFloatTolerance);
    EXPECT_LT(max_relative_error(download(dinp_gpu), dinp), kFloatTolerance);
    EXPECT_LT(max_relative_error(download(dweight_gpu), dweight), kFloatTolerance);
    EXPECT_LT(max_relative_error(download(dbias_gpu), dbias), kFloatTolerance);
  }
}

TEST_F(GpuKernels, EncoderMatchesTheTwinBitForBit) {
  const std::int64_t B = 3, T = 17, C = 40, V = 11;  // few tokens: rows repeat
  std::vector<std::int32_t> tokens(static_cast<std::size_t>(B * T));
  for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<std::int32_t>((i * 7) % V);
  const std::vector<float> wte = random_values(static_cast<std::size_t>(V * C), 11), wpe = random_values(static_cast<std::size_t>(T * C), 12);
  const std::vector<float> dout = random_values(static_cast<std::size_t>(B * T * C), 13);
  std::vector<float> out(static_cast<std::size_t>(B * T * C)), dwte = random_values(wte.size(), 14), dwpe = random_values(wpe.size(), 15);
  const Tensor tokens_gpu = upload(tokens, DType::i32), wte_gpu = upload(wte), wpe_gpu = upload(wpe), dout_gpu = upload(dout);
  const Tensor out_gpu = upload(out), dwte_gpu = upload(dwte), dwpe_gpu = upload(dwpe);
  cpu::encoder_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
  cpu::encoder_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T, C);
  cuda::encoder_forward(out_gpu.data_as<float>(), tokens_gpu.data_as<std::int32_t>(), wte_gpu.data_as<float>(), wpe_gpu.data_as<float>(), B, T,
                        C, stream_);
  cuda::encoder_backward(dwte_gpu.data_as<float>(), dwpe_gpu.data_as<float>(), dout_gpu.data_as<float>(), tokens_gpu.data_as<std::int32_t>(), B,
                         T, C, stream_);
  EXPECT_EQ(download(out_gpu), out);
  EXPECT_EQ(download(dwte_gpu), dwte);  // the same additions in the same order
  EXPECT_EQ(download(dwpe_gpu), dwpe);

  std::vector<std::uint16_t> wte_bf16(wte.size());
  convert_f32_to_bf16(wte.data(), wte_bf16.data(), wte.size());
  cpu::encoder_forward_bf16_table(out.data(), tokens.data(), wte_bf16.data(), wpe.data(), B, T, C);
  const Tensor wte_bf16_gpu = upload(wte_bf16, DType::bf16);
  cuda::encoder_forward_bf16_table(out_gpu.data_as<float>(), tokens_gpu.data_as<std::int32_t>(), wte_bf16_gpu.data_as<std::uint16_t>(),
                                   wpe_gpu.data_as<float>(), B, T, C, stream_);
  EXPECT_EQ(download(out_gpu), out);
}

TEST_F(GpuKernels, CrossEntropyMatchesTheTwin) {
  for (const std::int64_t vocab : {std::int64_t{7}, std::int64_t{1000}, std::int64_t{50257}}) {
    const std::int64_t rows = 9;
    const std::vector<float> logits = random_values(static_cast<std::size_t>(rows * vocab), 16, 3.0f);
    std::vector<std::int32_t> targets(static_cast<std::size_t>(rows));
    for (std::size_t i = 0; i < targets.size(); ++i) targets[i] = static_cast<std::int32_t>((i * 131) % vocab);
    std::vector<float> losses(targets.size()), gradient = logits, gradient_losses(targets.size());
    cpu::cross_entropy_forward(losses.data(), logits.data(), targets.data(), rows, vocab);
    cpu::cross_entropy_forward_backward(gradient.data(), gradient_losses.data(), targets.data(), rows, vocab, 0.25f);
    const Tensor logits_gpu = upload(logits), targets_gpu = upload(targets, DType::i32), losses_gpu = upload(losses);
    cuda::cross_entropy_forward(losses_gpu.data_as<float>(), logits_gpu.data_as<float>(), targets_gpu.data_as<std::int32_t>(), rows, vocab, stream_);
    EXPECT_LT(max_relative_error(download(losses_gpu), losses), kFloatTolerance) << "vocab " << vocab;
    cuda::cross_entropy_forward_backward(logits_gpu.data_as<float>(), losses_gpu.data_as<float>(), targets_gpu.data_as<std::int32_t>(), rows, vocab,
                                         0.25f, stream_);
    EXPECT_LT(max_relative_error(download(losses_gpu), gradient_losses), kFloatTolerance) << "vocab " << vocab;
    EXPECT_LT(max_relative_error(download(logits_gpu), gradient), kFloatTolerance) << "vocab " << vocab;
  }
}

// Rows padded past the vocabulary (the bf16 LM head's aligned logits): on each device the packed rows'
// losses and gradients bit for bit, and the padding untouched.
TEST_F(GpuKernels, CrossEntropyOnPaddedRowsGivesThePackedResultsAndLeavesThePadding) {
  const std::int64_t rows = 5, vocab = 1001, stride = 1008;
  const float pad = -12345.0f;
  const std::vector<float> logits = random_values(static_cast<std::size_t>(rows * vocab), 17, 3.0f);
  std::vector<float> padded(static_cast<std::size_t>(rows * stride), pad);
  for (std::int64_t r = 0; r < rows; ++r) std::copy_n(logits.begin() + r * vocab, vocab, padded.begin() + r * stride);
  std::vector<std::int32_t> targets(static_cast<std::size_t>(rows));
  for (std::size_t i = 0; i < targets.size(); ++i) targets[i] = static_cast<std::int32_t>((i * 211) % vocab);
  auto packed_rows = [&](const std::vector<float>& values) {
    std::vector<float> packed(static_cast<std::size_t>(rows * vocab));
    for (std::int64_t r = 0; r < rows; ++r) {
      std::copy_n(values.begin() + r * stride, vocab, packed.begin() + r * vocab);
      for (std::int64_t j = vocab; j < stride; ++j) EXPECT_EQ(values[static_cast<std::size_t>(r * stride + j)], pad);
    }
    return packed;
  };

  std::vector<float> losses(targets.size()), padded_losses(targets.size()), gradient = logits, padded_gradient = padded;
  cpu::cross_entropy_forward(losses.data(), logits.data(), targets.data(), rows, vocab);
  cpu::cross_entropy_forward(padded_losses.data(), padded.data(), targets.data(), rows, vocab, stride);
  EXPECT_EQ(padded_losses, losses);
  cpu::cross_entropy_forward_backward(gradient.data(), losses.data(), targets.data(), rows, vocab, 0.25f);
  cpu::cross_entropy_forward_backward(padded_gradient.data(), padded_losses.data(), targets.data(), rows, vocab, 0.25f, nullptr, stride);
  EXPECT_EQ(padded_losses, losses);
  EXPECT_EQ(packed_rows(padded_gradient), gradient);

  const Tensor targets_gpu = upload(targets, DType::i32), losses_gpu = upload(losses), padded_losses_gpu = upload(losses);
  const Tensor logits_gpu = upload(logits), padded_gpu = upload(padded);
  cuda::cross_entropy_forward(losses_gpu.data_as<float>(), logits_gpu.data_as<float>(), targets_gpu.data_as<std::int32_t>(), rows, vocab, stream_);
  cuda::cross_entropy_forward(padded_losses_gpu.data_as<float>(), padded_gpu.data_as<float>(), targets_gpu.data_as<std::int32_t>(), rows, vocab,
                              stream_, stride);
  EXPECT_EQ(download(padded_losses_gpu), download(losses_gpu));
  cuda::cross_entropy_forward_backward(logits_gpu.data_as<float>(), losses_gpu.data_as<float>(), targets_gpu.data_as<std::int32_t>(), rows, vocab,
                                       0.25f, stream_);
  cuda::cross_entropy_forward_backward(padded_gpu.data_as<float>(), padded_losses_gpu.data_as<float>(), targets_gpu.data_as<std::int32_t>(), rows,
                                       vocab, 0.25f, stream_, nullptr, stride);
  EXPECT_EQ(download(padded_losses_gpu), download(losses_gpu));
  EXPECT_EQ(packed_rows(download(padded_gpu)), download(logits_gpu));
  EXPECT_LT(max_relative_error(download(logits_gpu), gradient), kFloatTolerance);
}

TEST_F(GpuKernels, CrossEntropySlicesFromSavedRowsGiveTheWholeRowsGradient) {
  // A slice's gradient from the saved softmax rows is bitwise the in-place gradient of those columns,
  // on each device; the two devices' rows and slices agree within the twin bound.
  const std::int64_t rows = 6, vocab = 1000, first = 300, count = 257;
  const std::vector<float> logits = random_values(static_cast<std::size_t>(rows * vocab), 21, 3.0f);
  std::vector<std::int32_t> targets(static_cast<std::size_t>(rows));
  for (std::size_t i = 0; i < targets.size(); ++i) targets[i] = static_cast<std::int32_t>(first + 40 * i);  // some inside the slice
  std::vector<float> gradient = logits, losses(targets.size());
  std::vector<cpu::SoftmaxRow> softmax(targets.size());
  cpu::cross_entropy_forward_backward(gradient.data(), losses.data(), targets.data(), rows, vocab, 0.5f, softmax.data());
  std::vector<float> slice(static_cast<std::size_t>(rows * count)), expected(slice.size());
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t j = 0; j < count; ++j) {
      slice[static_cast<std::size_t>(r * count + j)] = logits[static_cast<std::size_t>(r * vocab + first + j)];
      expected[static_cast<std::size_t>(r * count + j)] = gradient[static_cast<std::size_t>(r * vocab + first + j)];
    }
  }
  std::vector<float> cpu_slice = slice;
  cpu::cross_entropy_backward_slice(cpu_slice.data(), softmax.data(), targets.data(), rows, first, count, 0.5f);
  EXPECT_EQ(cpu_slice, expected);

  const Tensor logits_gpu = upload(logits), targets_gpu = upload(targets, DType::i32), losses_gpu = upload(losses);
  const Tensor softmax_gpu = Tensor::empty(*device_, {rows * cpu::kSoftmaxRowFloats}, DType::f32, MemoryCategory::workspace, "softmax");
  auto* softmax_rows = reinterpret_cast<cpu::SoftmaxRow*>(softmax_gpu.data());
  cuda::cross_entropy_forward_backward(logits_gpu.data_as<float>(), losses_gpu.data_as<float>(), targets_gpu.data_as<std::int32_t>(), rows,
                                       vocab, 0.5f, stream_, softmax_rows);
  const Tensor slice_gpu = upload(slice);
  cuda::cross_entropy_backward_slice(slice_gpu.data_as<float>(), softmax_rows, targets_gpu.data_as<std::int32_t>(), rows, first, count, 0.5f,
                                     stream_);
  const std::vector<float> whole_gpu = download(logits_gpu);
  std::vector<float> expected_gpu(slice.size());
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t j = 0; j < count; ++j) {
      expected_gpu[static_cast<std::size_t>(r * count + j)] = whole_gpu[static_cast<std::size_t>(r * vocab + first + j)];
    }
  }
  EXPECT_EQ(download(slice_gpu), expected_gpu);
  EXPECT_LT(max_relative_error(download(slice_gpu), expected), kFloatTolerance);
  std::vector<cpu::SoftmaxRow> softmax_back(softmax.size());
  softmax_gpu.copy_to_host(softmax_back.data());
  for (std::size_t r = 0; r < softmax.size(); ++r) {
    EXPECT_EQ(softmax_back[r].maximum, softmax[r].maximum);  // the largest logit, exactly
    EXPECT_NEAR(softmax_back[r].inverse_sum, softmax[r].inverse_sum, 1e-12 * softmax[r].inverse_sum);
  }
}

TEST_F(GpuKernels, EncoderTokenRowsSliceByTwinSliceGiveTheWholeTableGradient) {
  const std::int64_t positions = 40, C = 24, V = 13;
  std::vector<std::int32_t> tokens(static_cast<std::size_t>(positions));
  for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<std::int32_t>((i * 5) % V);
  const std::vector<float> dout = random_values(static_cast<std::size_t>(positions * C), 31);
  std::vector<float> whole(static_cast<std::size_t>(V * C)), positions_scratch(static_cast<std::size_t>(C));
  cpu::encoder_backward(whole.data(), positions_scratch.data(), dout.data(), tokens.data(), positions, 1, C);
  const Tensor tokens_gpu = upload(tokens, DType::i32), dout_gpu = upload(dout);
  std::vector<float> cpu_slices(whole.size()), gpu_slices;
  for (std::int64_t first = 0; first < V; first += 5) {
    const std::int64_t count = std::min<std::int64_t>(5, V - first);
    cpu::encoder_backward_token_rows(cpu_slices.data() + first * C, dout.data(), tokens.data(), positions, C, first, count);
    const Tensor rows_gpu = upload(std::vector<float>(static_cast<std::size_t>(count * C)));
    cuda::encoder_backward_token_rows(rows_gpu.data_as<float>(), dout_gpu.data_as<float>(), tokens_gpu.data_as<std::int32_t>(), positions, C,
                                      first, count, stream_);
    const std::vector<float> part = download(rows_gpu);
    gpu_slices.insert(gpu_slices.end(), part.begin(), part.end());
  }
  EXPECT_EQ(cpu_slices, whole);  // the same additions in the same order
  EXPECT_EQ(gpu_slices, whole);
}

TEST_F(GpuKernels, FusedAdamWGivesTheTwinsBitsAndTheNormRepeats) {
  // More tensors than one launch takes, of uneven sizes (one empty), one with a bf16 copy.
  const std::size_t tensors = cuda::kAdamWTensorsPerLaunch + 5;
  const AdamWHyperparameters hyperparameters{1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f};
  std::vector<std::vector<float>> parameters, gradients, first, second;
  std::vector<Tensor> gpu;  // parameter, gradient, first, second per tensor
  std::vector<AdamWTensor> list;
  const Tensor bf16_copy = Tensor::empty(*device_, {1000}, DType::bf16, MemoryCategory::workspace);
  for (std::size_t t = 0; t < tensors; ++t) {
    const std::size_t count = t == 3 ? 0 : 1 + (t * 977) % 5000;
    const auto seed = static_cast<std::uint32_t>(100 + 4 * t);
    parameters.push_back(random_values(count, seed));
    gradients.push_back(random_values(count, seed + 1));
    first.push_back(random_values(count, seed + 2, 0.01f));
    std::vector<float> v = random_values(count, seed + 3, 0.01f);
    for (float& value : v) value = value * value;
    second.push_back(v);
    if (count == 0) {
      list.push_back({});
      continue;
    }
    for (const auto* values : {&parameters.back(), &gradients.back(), &first.back(), &second.back()}) gpu.push_back(upload(*values));
    const std::size_t at = gpu.size() - 4;
    list.push_back({gpu[at].data_as<float>(), t == 1 ? bf16_copy.data_as<std::uint16_t>() : nullptr, gpu[at + 1].data_as<float>(),
                    gpu[at + 2].data_as<float>(), gpu[at + 3].data_as<float>(), static_cast<std::int64_t>(count)});
  }
  ASSERT_LE(list[1].count, 1000);
  for (std::size_t t = 0; t < tensors; ++t) {
    cpu::adamw_update(parameters[t].data(), nullptr, gradients[t].data(), first[t].data(), second[t].data(),
                      static_cast<std::int64_t>(parameters[t].size()), hyperparameters, 7, 0.5f);
  }
  cuda::adamw_update(list, hyperparameters, 7, 0.5f, stream_);
  std::size_t at = 0;
  for (std::size_t t = 0; t < tensors; ++t) {
    if (parameters[t].empty()) continue;
    EXPECT_EQ(download(gpu[at]), parameters[t]) << "tensor " << t;
    EXPECT_EQ(download(gpu[at + 2]), first[t]) << "tensor " << t;
    EXPECT_EQ(download(gpu[at + 3]), second[t]) << "tensor " << t;
    at += 4;
  }
  std::vector<std::uint16_t> rounded(parameters[1].size());
  convert_f32_to_bf16(parameters[1].data(), rounded.data(), rounded.size());
  std::vector<std::uint16_t> copy = download<std::uint16_t>(bf16_copy);
  copy.resize(rounded.size());
  EXPECT_EQ(copy, rounded);

  // The sum of squares: one tensor larger than a block, then a second accumulated into the same result.
  const std::vector<float> values = random_values(200000, 77), more = random_values(5000, 78);
  const Tensor values_gpu = upload(values), more_gpu = upload(more);
  const Tensor scratch = doubles(cuda::sum_of_squares_scratch_elements(200000));
  const Tensor result = doubles(1);
  auto* const scratch_values = static_cast<double*>(scratch.data());
  auto* const sum = static_cast<double*>(result.data());
  cuda::sum_of_squares(sum, false, values_gpu.data_as<float>(), 200000, scratch_values, stream_);
  const double first_sum = first_double(result);
  EXPECT_NEAR(first_sum, cpu::sum_of_squares(values.data(), 200000), 1e-12 * first_sum);
  cuda::sum_of_squares(sum, true, more_gpu.data_as<float>(), 5000, scratch_values, stream_);
  const double both = first_double(result);
  EXPECT_NEAR(both, first_sum + cpu::sum_of_squares(more.data(), 5000), 1e-12 * both);
  cuda::sum_of_squares(sum, false, values_gpu.data_as<float>(), 200000, scratch_values, stream_);
  EXPECT_EQ(first_double(result), first_sum);  // the same order every time
}

#else

TEST(GpuKernels, NotBuiltWithoutCuda) { GTEST_SKIP() << "this build has no CUDA"; }

#endif

}  // namespace
}  // namespace ferry
