// The bf16 LM head of cuda/matmul.h (the table read in place, f32 logits and gradients) against its CPU
// twin cpu::lm_head_* on the same bf16 values widened: logits over the whole vocabulary, then the input
// and table gradients over slices of it (an odd vocabulary in padded rows, slices that are column views
// of the gradient at any offset), accumulating as the model calls them; the padding is never written.
// Skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <stdexcept>
#include <vector>

#include "engine/core/device.h"
#include "engine/core/dtype.h"
#include "engine/core/tensor.h"
#include "models/kernels/cpu/lm_head.h"

#ifdef FERRY_HAVE_CUDA
#include "engine/core/cuda_device.h"
#include "models/kernels/cuda/matmul.h"
#endif

namespace ferry {
namespace {

#ifdef FERRY_HAVE_CUDA

constexpr std::int64_t kRows = 37, kChannels = 48, kVocab = 301;
constexpr std::int64_t kStride = 304;  // rows of logits and of their gradient padded, as the model pads them

std::vector<float> bf16_values(std::int64_t count, std::uint32_t seed, bool absolute) {
  std::mt19937 generator(seed);
  std::uniform_real_distribution<float> distribution(-1.0f, 1.0f);
  std::vector<float> values(static_cast<std::size_t>(count));
  for (float& value : values) value = bf16_to_float(float_to_bf16(absolute ? std::fabs(distribution(generator)) : distribution(generator)));
  return values;
}

struct HeadValues {
  std::vector<float> inp, table, dlogits;
};

HeadValues head_values(bool absolute) {
  return {bf16_values(kRows * kChannels, 21, absolute), bf16_values(kVocab * kChannels, 22, absolute),
          bf16_values(kRows * kVocab, 23, absolute)};
}

struct HeadResults {
  std::vector<float> logits, dinp, dtable;
};

// Logits once; then the gradients slice by slice (dinp accumulating after the first), twice over, so
// the table's gradient is added to.
HeadResults cpu_head(const HeadValues& values, std::int64_t slice) {
  HeadResults results{std::vector<float>(kRows * kVocab), std::vector<float>(kRows * kChannels),
                      std::vector<float>(kVocab * kChannels, 0.0f)};
  cpu::lm_head_logits_slice(results.logits.data(), kVocab, 0, values.inp.data(), values.table.data(), kRows, kChannels, kVocab);
  for (int pass = 0; pass < 2; ++pass) {
    for (std::int64_t first = 0; first < kVocab; first += slice) {
      const std::int64_t count = std::min(slice, kVocab - first);
      cpu::lm_head_backward_slice(results.dinp.data(), first > 0, results.dtable.data() + first * kChannels, values.dlogits.data(), kVocab,
                                  first, values.inp.data(), values.table.data() + first * kChannels, kRows, kChannels, count);
    }
  }
  return results;
}

HeadResults gpu_head(const HeadValues& values, std::int64_t slice) {
  const std::unique_ptr<Device> device = create_device(DeviceOptions{DeviceKind::cuda, std::size_t{1} << 30});
  const cuda::CublasLtHandle handle;
  const Tensor workspace = Tensor::empty(*device, {static_cast<std::int64_t>(cuda::kMatmulWorkspaceBytes / 4)}, DType::f32,
                                         MemoryCategory::workspace, "matmul workspace");
  const cuda::MatmulWorkspace matmul_workspace{workspace.data(), workspace.nbytes()};
  const cudaStream_t stream = static_cast<CudaDevice&>(*device).native_stream(Stream{});
  auto upload = [&](const Shape& shape, const std::vector<float>& host, const char* tag) {
    Tensor tensor = Tensor::empty(*device, shape, DType::bf16, MemoryCategory::activations, tag);
    copy_from_host_f32(tensor, host.data());
    return tensor;
  };
  const Tensor inp = upload({kRows, kChannels}, values.inp, "inp");
  const Tensor table = upload({kVocab, kChannels}, values.table, "table");
  std::vector<float> padded_dlogits(kRows * kStride, std::numeric_limits<float>::quiet_NaN());
  for (std::int64_t row = 0; row < kRows; ++row) {
    std::copy_n(values.dlogits.begin() + row * kVocab, kVocab, padded_dlogits.begin() + row * kStride);
  }
  const Tensor dlogits = upload({kRows, kStride}, padded_dlogits, "dlogits");
  const std::vector<float> not_a_number(kRows * kStride, std::numeric_limits<float>::quiet_NaN());
  const Tensor logits = Tensor::empty(*device, {kRows, kStride}, DType::f32, MemoryCategory::workspace, "logits");
  copy_from_host_f32(logits, not_a_number.data());  // overwritten but for the padding
  const Tensor dinp = Tensor::empty(*device, {kRows, kChannels}, DType::f32, MemoryCategory::workspace, "dinp");
  copy_from_host_f32(dinp, not_a_number.data());  // overwritten by the first slice
  const Tensor dtable = Tensor::zeros(*device, {kVocab, kChannels}, DType::f32, MemoryCategory::gradients, "dtable");

  cuda::lm_head_logits_bf16(handle, matmul_workspace, logits.data_as<float>(), kStride, inp.data(), table.data(), kRows, kChannels, kVocab,
                            stream);
  for (int pass = 0; pass < 2; ++pass) {
    for (std::int64_t first = 0; first < kVocab; first += slice) {
      const std::int64_t count = std::min(slice, kVocab - first);
      cuda::lm_head_backward_bf16(handle, matmul_workspace, dinp.data_as<float>(), first > 0, dtable.data_as<float>() + first * kChannels,
                                  dlogits.data(), kStride, inp.data(), static_cast<const std::uint16_t*>(table.data()) + first * kChannels, kRows,
                                  kChannels, kVocab, first, count, stream);
    }
  }
  device->synchronize();
  const std::vector<float> padded_logits = copy_to_host_f32(logits);
  std::vector<float> packed(kRows * kVocab);
  for (std::int64_t row = 0; row < kRows; ++row) {
    std::copy_n(padded_logits.begin() + row * kStride, kVocab, packed.begin() + row * kVocab);
    for (std::int64_t column = kVocab; column < kStride; ++column) EXPECT_TRUE(std::isnan(padded_logits[row * kStride + column]));
  }
  return {packed, copy_to_host_f32(dinp), copy_to_host_f32(dtable)};
}

// |actual - expected| over the sum of |terms| (the same computation on absolute values).
double max_error(const std::vector<float>& actual, const std::vector<float>& expected, const std::vector<float>& magnitude) {
  if (actual.size() != expected.size() || actual.size() != magnitude.size()) return std::numeric_limits<double>::infinity();
  double worst = 0.0;
  for (std::size_t i = 0; i < actual.size(); ++i) {
    if (!std::isfinite(actual[i])) return std::numeric_limits<double>::infinity();
    worst = std::max(worst, std::fabs(static_cast<double>(actual[i]) - expected[i]) / std::max<double>(magnitude[i], 1e-30));
  }
  return worst;
}

#define FERRY_REQUIRE_GPU() \
  if (!cuda_available()) GTEST_SKIP() << "no GPU present"

// bf16 products are exact in fp32 and the sums are fp32: the f32 bound, on any slicing.
TEST(CudaLmHeadTwin, Bf16TableInPlaceMatchesTheCpuTwin) {
  FERRY_REQUIRE_GPU();
  const HeadValues values = head_values(false);
  const HeadValues absolute = head_values(true);
  for (std::int64_t slice : {kVocab, std::int64_t{64}, std::int64_t{77}}) {
    SCOPED_TRACE("vocabulary slices of " + std::to_string(slice) + " rows");
    const HeadResults gpu = gpu_head(values, slice);
    const HeadResults cpu = cpu_head(values, slice);
    const HeadResults magnitude = cpu_head(absolute, slice);
    EXPECT_LT(max_error(gpu.logits, cpu.logits, magnitude.logits), 1e-5) << "logits";
    EXPECT_LT(max_error(gpu.dinp, cpu.dinp, magnitude.dinp), 1e-5) << "dinp";
    EXPECT_LT(max_error(gpu.dtable, cpu.dtable, magnitude.dtable), 1e-5) << "dtable";
  }
}

TEST(CudaLmHeadTwin, SlicesOutsideTheVocabularyAndShortRowsAreRefused) {
  FERRY_REQUIRE_GPU();
  const cuda::CublasLtHandle handle;
  float dinp = 0.0f;
  const std::uint16_t values[4] = {};
  EXPECT_THROW(cuda::lm_head_backward_bf16(handle, {}, &dinp, false, nullptr, values, 4, values, values, 1, 1, 4, 3, 2, nullptr),
               std::invalid_argument);
  EXPECT_THROW(cuda::lm_head_backward_bf16(handle, {}, &dinp, false, nullptr, values, 4, values, values, 1, 1, 4, -1, 2, nullptr),
               std::invalid_argument);
  EXPECT_THROW(cuda::lm_head_backward_bf16(handle, {}, &dinp, false, nullptr, values, 3, values, values, 1, 1, 4, 0, 2, nullptr),
               std::invalid_argument);  // rows closer together than the vocabulary
}

#else

TEST(CudaLmHeadTwin, NotBuiltWithoutCuda) { GTEST_SKIP() << "this build has no CUDA"; }

#endif

}  // namespace
}  // namespace ferry
