// The cuBLASLt matmul twin against the CPU twin on the same random inputs: f32 (fp32 compute), tf32 (TF32
// products) and bf16 (against the CPU on the bf16-rounded inputs), both weight layouts, with and without bias, odd sizes;
// gradients accumulate, dinp is overwritten, and the workspace is the allocator's. Skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/core/device.h"
#include "engine/core/dtype.h"
#include "engine/core/tensor.h"
#include "models/kernels/cpu/matmul.h"

#ifdef FERRY_HAVE_CUDA
#include "engine/core/cuda_device.h"
#include "models/kernels/cuda/matmul.h"
#endif

namespace ferry {
namespace {

#ifdef FERRY_HAVE_CUDA

using cpu::WeightLayout;
using cuda::MatmulType;

struct MatmulSizes {
  std::int64_t rows;
  std::int64_t in_features;
  std::int64_t out_features;
};

constexpr MatmulSizes kSmallSizes{37, 64, 96};
// One row of odd widths (bias columns past a warp's 32 in add_column_sums, a lone partial block) too.
constexpr MatmulSizes kAllSizes[] = {kSmallSizes, {128, 768, 2304}, {1, 3, 45}};
constexpr WeightLayout kLayouts[] = {WeightLayout::in_out, WeightLayout::out_in};
constexpr int kBackwardCalls = 2;  // gradients of two calls: accumulation is part of every comparison

std::string describe(const MatmulSizes& sizes, WeightLayout layout, bool with_bias) {
  return "rows " + std::to_string(sizes.rows) + ", in " + std::to_string(sizes.in_features) + ", out " +
         std::to_string(sizes.out_features) + (layout == WeightLayout::in_out ? ", in_out" : ", out_in") +
         (with_bias ? ", bias" : ", no bias");
}

// Host values of one matmul: what the GPU receives and what the CPU reference computes on.
struct MatmulValues {
  std::vector<float> inp, weight, bias, dout;
};

std::vector<float> random_values(std::int64_t count, std::uint32_t seed) {
  std::mt19937 generator(seed);
  std::uniform_real_distribution<float> distribution(-1.0f, 1.0f);
  std::vector<float> values(static_cast<std::size_t>(count));
  for (float& value : values) value = distribution(generator);
  return values;
}

MatmulValues random_matmul_values(const MatmulSizes& sizes, MatmulType type) {
  MatmulValues values{random_values(sizes.rows * sizes.in_features, 11),
                      random_values(sizes.in_features * sizes.out_features, 12),
                      random_values(sizes.out_features, 13), random_values(sizes.rows * sizes.out_features, 14)};
  if (type == MatmulType::bf16) {  // what the GPU will hold, so the CPU computes on the same numbers
    for (auto* vector : {&values.inp, &values.weight, &values.bias, &values.dout}) {
      for (float& value : *vector) value = bf16_to_float(float_to_bf16(value));
    }
  }
  return values;
}

MatmulValues absolute_values(MatmulValues values) {
  for (auto* vector : {&values.inp, &values.weight, &values.bias, &values.dout}) {
    for (float& value : *vector) value = std::fabs(value);
  }
  return values;
}

struct MatmulResults {
  std::vector<float> out, dinp, dweight, dbias;
};

MatmulResults cpu_matmul(const MatmulValues& values, const MatmulSizes& sizes, WeightLayout layout, bool with_bias,
                         int backward_calls = kBackwardCalls) {
  const auto [rows, in_features, out_features] = sizes;
  MatmulResults results{std::vector<float>(static_cast<std::size_t>(rows * out_features)),
                        std::vector<float>(static_cast<std::size_t>(rows * in_features)),
                        std::vector<float>(static_cast<std::size_t>(in_features * out_features), 0.0f),
                        std::vector<float>(static_cast<std::size_t>(out_features), 0.0f)};
  cpu::matmul_forward<float>(results.out.data(), values.inp.data(), values.weight.data(),
                             with_bias ? values.bias.data() : nullptr, rows, in_features, out_features, layout);
  for (int call = 0; call < backward_calls; ++call) {
    cpu::matmul_backward<float>(results.dinp.data(), results.dweight.data(), with_bias ? results.dbias.data() : nullptr,
                                values.dout.data(), values.inp.data(), values.weight.data(), rows, in_features,
                                out_features, layout);
  }
  return results;
}

// The largest |actual - expected| / magnitude, where magnitude is the same computation on the absolute
// values of the inputs (the sum of |terms| of each entry): the usual error measure of a sum of
// products. Plain relative error would blame fp32 rounding on entries whose terms cancel.
double max_error(const std::vector<float>& actual, const std::vector<float>& expected,
                 const std::vector<float>& magnitude) {
  constexpr double kMismatch = std::numeric_limits<double>::infinity();
  if (actual.size() != expected.size() || actual.size() != magnitude.size()) return kMismatch;
  double worst = 0.0;
  for (std::size_t i = 0; i < actual.size(); ++i) {
    if (!std::isfinite(actual[i])) return kMismatch;
    const double scale = std::max(static_cast<double>(magnitude[i]), 1e-30);
    worst = std::max(worst, std::fabs(static_cast<double>(actual[i]) - expected[i]) / scale);
  }
  return worst;
}

// A cuda device with a cuBLASLt handle and a workspace from its allocator.
struct GpuMatmul {
  std::unique_ptr<Device> device = create_device(DeviceOptions{DeviceKind::cuda, std::size_t{1} << 30});
  cuda::CublasLtHandle handle;
  Tensor workspace_tensor = Tensor::empty(*device, {static_cast<std::int64_t>(cuda::kMatmulWorkspaceBytes / 4)},
                                          DType::f32, MemoryCategory::workspace, "matmul workspace");

  cuda::MatmulWorkspace workspace() const { return {workspace_tensor.data(), workspace_tensor.nbytes()}; }
  cudaStream_t stream() const { return static_cast<CudaDevice&>(*device).native_stream(Stream{}); }

  Tensor upload(const Shape& shape, DType dtype, MemoryCategory category, const std::vector<float>& values,
                const char* tag) const {
    Tensor tensor = Tensor::empty(*device, shape, dtype, category, tag);
    copy_from_host_f32(tensor, values.data());
    return tensor;
  }
  Tensor filled_with_nan(const Shape& shape, DType dtype, const char* tag) const {
    const std::vector<float> not_a_number(static_cast<std::size_t>(shape_numel(shape)),
                                          std::numeric_limits<float>::quiet_NaN());
    return upload(shape, dtype, MemoryCategory::activations, not_a_number, tag);
  }
};

DType element_dtype(MatmulType type) { return type == MatmulType::bf16 ? DType::bf16 : DType::f32; }

Shape weight_shape(const MatmulSizes& sizes, WeightLayout layout) {
  return layout == WeightLayout::in_out ? Shape{sizes.in_features, sizes.out_features}
                                        : Shape{sizes.out_features, sizes.in_features};
}

// Forward once and backward kBackwardCalls times on the GPU; out and dinp start as NaN (overwritten),
// dweight and dbias as zeros (accumulated, f32 for both types).
MatmulResults gpu_matmul(GpuMatmul& gpu, MatmulType type, const MatmulValues& values, const MatmulSizes& sizes,
                         WeightLayout layout, bool with_bias) {
  const auto [rows, in_features, out_features] = sizes;
  const DType dtype = element_dtype(type);
  const Tensor inp = gpu.upload({rows, in_features}, dtype, MemoryCategory::activations, values.inp, "inp");
  const Tensor weight =
      gpu.upload(weight_shape(sizes, layout), dtype, MemoryCategory::parameters, values.weight, "weight");
  const Tensor bias = gpu.upload({out_features}, dtype, MemoryCategory::parameters, values.bias, "bias");
  const Tensor dout = gpu.upload({rows, out_features}, dtype, MemoryCategory::activations, values.dout, "dout");
  const Tensor out = gpu.filled_with_nan({rows, out_features}, dtype, "out");
  const Tensor dinp = gpu.filled_with_nan({rows, in_features}, dtype, "dinp");
  const Tensor dweight =
      Tensor::zeros(*gpu.device, weight_shape(sizes, layout), DType::f32, MemoryCategory::gradients, "dweight");
  const Tensor dbias = Tensor::zeros(*gpu.device, {out_features}, DType::f32, MemoryCategory::gradients, "dbias");

  cuda::matmul_forward(gpu.handle, gpu.workspace(), type, out.data(), inp.data(), weight.data(),
                       with_bias ? bias.data() : nullptr, rows, in_features, out_features, layout, gpu.stream());
  for (int call = 0; call < kBackwardCalls; ++call) {
    cuda::matmul_backward(gpu.handle, gpu.workspace(), type, dinp.data(), dweight.data(),
                          with_bias ? dbias.data() : nullptr, dout.data(), inp.data(), weight.data(), rows, in_features,
                          out_features, layout, gpu.stream());
  }
  gpu.device->synchronize();
  return MatmulResults{copy_to_host_f32(out), copy_to_host_f32(dinp), copy_to_host_f32(dweight),
                       copy_to_host_f32(dbias)};
}

// `values_like`: whose rounding the inputs take first (bf16: the values a 16-bit model holds).
void expect_matches_cpu_twin(MatmulType type, double tolerance, MatmulType values_like) {
  GpuMatmul gpu;
  for (const MatmulSizes& sizes : kAllSizes) {
    const MatmulValues values = random_matmul_values(sizes, values_like);
    for (WeightLayout layout : kLayouts) {
      for (bool with_bias : {false, true}) {
        SCOPED_TRACE(describe(sizes, layout, with_bias));
        const MatmulResults gpu_results = gpu_matmul(gpu, type, values, sizes, layout, with_bias);
        const MatmulResults cpu_results = cpu_matmul(values, sizes, layout, with_bias);
        const MatmulResults magnitudes = cpu_matmul(absolute_values(values), sizes, layout, with_bias);
        EXPECT_LT(max_error(gpu_results.out, cpu_results.out, magnitudes.out), tolerance) << "out";
        EXPECT_LT(max_error(gpu_results.dinp, cpu_results.dinp, magnitudes.dinp), tolerance) << "dinp";
        EXPECT_LT(max_error(gpu_results.dweight, cpu_results.dweight, magnitudes.dweight), tolerance) << "dweight";
        EXPECT_LT(max_error(gpu_results.dbias, cpu_results.dbias, magnitudes.dbias), tolerance) << "dbias";
      }
    }
  }
}

#define FERRY_REQUIRE_GPU() \
  if (!cuda_available()) GTEST_SKIP() << "no GPU present"

TEST(CudaMatmulTwin, F32MatchesTheCpuTwin) {
  FERRY_REQUIRE_GPU();
  expect_matches_cpu_twin(MatmulType::f32, 1e-5, MatmulType::f32);
}

// TF32 products (a 16-bit model's f32 products, F32Products::tf32): on bf16 values, which TF32 holds
// exactly, the products are exact and the sums meet the f32 bound; on raw f32 values each operand is
// rounded once to 10 mantissa bits (2^-11 relative to nearest, 2^-10 truncated), so 3e-3 of the sum of |terms|.
TEST(CudaMatmulTwin, Tf32ProductsMatchTheCpuTwin) {
  FERRY_REQUIRE_GPU();
  expect_matches_cpu_twin(MatmulType::tf32, 1e-5, MatmulType::bf16);
  expect_matches_cpu_twin(MatmulType::tf32, 3e-3, MatmulType::f32);
}

TEST(CudaMatmulTwin, Bf16MatchesTheCpuTwinOnRoundedInputs) {
  FERRY_REQUIRE_GPU();
  expect_matches_cpu_twin(MatmulType::bf16, 1e-2, MatmulType::bf16);
}

TEST(CudaMatmulTwin, SecondBackwardDoublesTheGradients) {
  FERRY_REQUIRE_GPU();
  GpuMatmul gpu;
  for (MatmulType type : {MatmulType::f32, MatmulType::bf16}) {
    for (WeightLayout layout : kLayouts) {
      SCOPED_TRACE(describe(kSmallSizes, layout, true) + (type == MatmulType::f32 ? ", f32" : ", bf16"));
      const auto [rows, in_features, out_features] = kSmallSizes;
      const DType dtype = element_dtype(type);
      const MatmulValues values = random_matmul_values(kSmallSizes, type);
      const Tensor inp = gpu.upload({rows, in_features}, dtype, MemoryCategory::activations, values.inp, "inp");
      const Tensor weight =
          gpu.upload(weight_shape(kSmallSizes, layout), dtype, MemoryCategory::parameters, values.weight, "weight");
      const Tensor dout = gpu.upload({rows, out_features}, dtype, MemoryCategory::activations, values.dout, "dout");
      const Tensor dweight = Tensor::zeros(*gpu.device, weight_shape(kSmallSizes, layout), DType::f32,
                                           MemoryCategory::gradients, "dweight");
      const Tensor dbias = Tensor::zeros(*gpu.device, {out_features}, DType::f32, MemoryCategory::gradients, "dbias");
      std::vector<std::vector<float>> dweight_after, dbias_after;
      for (int call = 0; call < 2; ++call) {
        cuda::matmul_backward(gpu.handle, gpu.workspace(), type, nullptr, dweight.data(), dbias.data(), dout.data(),
                              inp.data(), weight.data(), rows, in_features, out_features, layout, gpu.stream());
        gpu.device->synchronize();
        dweight_after.push_back(copy_to_host_f32(dweight));
        dbias_after.push_back(copy_to_host_f32(dbias));
      }
      for (std::size_t i = 0; i < dweight_after[0].size(); ++i) {
        ASSERT_NEAR(dweight_after[1][i], 2.0f * dweight_after[0][i], 1e-6f * (1.0f + std::fabs(dweight_after[0][i])));
      }
      for (std::size_t i = 0; i < dbias_after[0].size(); ++i) {
        ASSERT_EQ(dbias_after[1][i], 2.0f * dbias_after[0][i]);  // the same fixed-order sum, added twice
      }
    }
  }
}

TEST(CudaMatmulTwin, SplitBackwardMatchesOneCall) {
  FERRY_REQUIRE_GPU();
  GpuMatmul gpu;
  const auto [rows, in_features, out_features] = kSmallSizes;
  const MatmulValues values = random_matmul_values(kSmallSizes, MatmulType::f32);
  const WeightLayout layout = WeightLayout::out_in;
  const Tensor inp = gpu.upload({rows, in_features}, DType::f32, MemoryCategory::activations, values.inp, "inp");
  const Tensor weight =
      gpu.upload(weight_shape(kSmallSizes, layout), DType::f32, MemoryCategory::parameters, values.weight, "weight");
  const Tensor dout = gpu.upload({rows, out_features}, DType::f32, MemoryCategory::activations, values.dout, "dout");
  const Tensor dinp = gpu.filled_with_nan({rows, in_features}, DType::f32, "dinp");
  const Tensor dweight =
      Tensor::zeros(*gpu.device, weight_shape(kSmallSizes, layout), DType::f32, MemoryCategory::gradients, "dweight");
  const Tensor dbias = Tensor::zeros(*gpu.device, {out_features}, DType::f32, MemoryCategory::gradients, "dbias");
  // Zero Bubble's split: dinp first, dweight and dbias later.
  cuda::matmul_backward(gpu.handle, gpu.workspace(), MatmulType::f32, dinp.data(), nullptr, nullptr, dout.data(),
                        inp.data(), weight.data(), rows, in_features, out_features, layout, gpu.stream());
  cuda::matmul_backward(gpu.handle, gpu.workspace(), MatmulType::f32, nullptr, dweight.data(), dbias.data(),
                        dout.data(), inp.data(), weight.data(), rows, in_features, out_features, layout, gpu.stream());
  gpu.device->synchronize();

  const MatmulResults expected = cpu_matmul(values, kSmallSizes, layout, true, 1);
  const MatmulResults magnitude = cpu_matmul(absolute_values(values), kSmallSizes, layout, true, 1);
  EXPECT_LT(max_error(copy_to_host_f32(dinp), expected.dinp, magnitude.dinp), 1e-5);
  EXPECT_LT(max_error(copy_to_host_f32(dweight), expected.dweight, magnitude.dweight), 1e-5);
  EXPECT_LT(max_error(copy_to_host_f32(dbias), expected.dbias, magnitude.dbias), 1e-5);
}

// A bias view one element into its buffer is not 16-byte aligned: it is broadcast into out first.
TEST(CudaMatmulTwin, UnalignedBiasGivesTheSameForward) {
  FERRY_REQUIRE_GPU();
  GpuMatmul gpu;
  const auto [rows, in_features, out_features] = kSmallSizes;
  for (MatmulType type : {MatmulType::f32, MatmulType::bf16}) {
    SCOPED_TRACE(type == MatmulType::f32 ? "f32" : "bf16");
    const DType dtype = element_dtype(type);
    const MatmulValues values = random_matmul_values(kSmallSizes, type);
    const WeightLayout layout = WeightLayout::in_out;
    std::vector<float> padded_bias{0.0f};
    padded_bias.insert(padded_bias.end(), values.bias.begin(), values.bias.end());
    const Tensor bias_buffer = gpu.upload({out_features + 1}, dtype, MemoryCategory::parameters, padded_bias, "bias");
    const Tensor bias = bias_buffer.narrow(0, 1, out_features);
    const Tensor inp = gpu.upload({rows, in_features}, dtype, MemoryCategory::activations, values.inp, "inp");
    const Tensor weight =
        gpu.upload(weight_shape(kSmallSizes, layout), dtype, MemoryCategory::parameters, values.weight, "weight");
    const Tensor out = gpu.filled_with_nan({rows, out_features}, dtype, "out");
    cuda::matmul_forward(gpu.handle, gpu.workspace(), type, out.data(), inp.data(), weight.data(), bias.data(), rows,
                         in_features, out_features, layout, gpu.stream());
    gpu.device->synchronize();
    const MatmulResults expected = cpu_matmul(values, kSmallSizes, layout, true);
    const MatmulResults magnitude = cpu_matmul(absolute_values(values), kSmallSizes, layout, true);
    EXPECT_LT(max_error(copy_to_host_f32(out), expected.out, magnitude.out), type == MatmulType::f32 ? 1e-5 : 1e-2);
  }
}

TEST(CudaMatmulTwin, WorkspaceIsTheAllocatorsAndSizesAreChecked) {
  FERRY_REQUIRE_GPU();
  GpuMatmul gpu;
  const std::size_t workspace = category_index(MemoryCategory::workspace);
  const AllocatorStatistics statistics = gpu.device->allocator().statistics();
  EXPECT_EQ(statistics.category_requested_bytes[workspace].current,
            static_cast<std::int64_t>(cuda::kMatmulWorkspaceBytes));
  EXPECT_GE(statistics.category_allocated_bytes[workspace].current,
            static_cast<std::int64_t>(cuda::kMatmulWorkspaceBytes));
  EXPECT_EQ(gpu.workspace().bytes, cuda::kMatmulWorkspaceBytes);

  const Tensor out = Tensor::empty(*gpu.device, {4, 4}, DType::f32, MemoryCategory::activations, "out");
  EXPECT_THROW(cuda::matmul_forward(gpu.handle, gpu.workspace(), MatmulType::f32, out.data(), out.data(), out.data(),
                                    nullptr, -1, 4, 4, WeightLayout::in_out, gpu.stream()),
               std::invalid_argument);
  EXPECT_THROW(cuda::matmul_forward(gpu.handle, gpu.workspace(), MatmulType::f32, nullptr, out.data(), out.data(),
                                    nullptr, 4, 4, 4, WeightLayout::in_out, gpu.stream()),
               std::invalid_argument);
  EXPECT_THROW(cuda::matmul_forward(gpu.handle, cuda::MatmulWorkspace{nullptr, 1024}, MatmulType::f32, out.data(),
                                    out.data(), out.data(), nullptr, 4, 4, 4, WeightLayout::in_out, gpu.stream()),
               std::invalid_argument);
}

#else

TEST(CudaMatmulTwin, NotBuiltWithoutCuda) { GTEST_SKIP() << "this build has no CUDA"; }

#endif

}  // namespace
}  // namespace ferry
