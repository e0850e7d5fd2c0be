// Host kernels: every backward against central finite differences in double precision (L = sum(out * R),
// dout = R), the accumulate/overwrite contract of each backward, the float twin against the double one,
// dropout masks (forward = backward, rate, scale), and AdamW against torch.optim.AdamW's formula.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "engine/core/dtype.h"
#include "models/kernels/cpu/adamw.h"
#include "models/kernels/cpu/attention.h"
#include "models/kernels/cpu/compute_threads.h"
#include "models/kernels/cpu/counter_random.h"
#include "models/kernels/cpu/cross_entropy.h"
#include "models/kernels/cpu/elementwise.h"
#include "models/kernels/cpu/encoder.h"
#include "models/kernels/cpu/gelu.h"
#include "models/kernels/cpu/layernorm.h"
#include "models/kernels/cpu/matmul.h"

namespace ferry::cpu {
namespace {

using Vec = std::vector<double>;
using FVec = std::vector<float>;

constexpr double kStep = 1e-6;            // finite-difference step (double)
constexpr double kGradientTolerance = 1e-6;  // |numeric - analytic| <= tol * max(1, |analytic|)
constexpr double kTwinTolerance = 1e-5;   // |float - double| <= tol * max(1, |double|)

// Finite differences call tiny kernels thousands of times. On a loaded 2-core machine the OpenMP and
// OpenBLAS thread pools then spin against each other and the binary slows down 30-100x, so every test
// in model_tests runs on one compute thread; the multi-threaded paths are checked bitwise against it
// (KernelThreads.*, GptModelThreads.*, SumOfSquaresKernel.*).
class SingleComputeThread : public ::testing::Environment {
 public:
  void SetUp() override {
    threads_ = compute_threads();
    set_compute_threads(1);
  }
  void TearDown() override { set_compute_threads(threads_); }

 private:
  int threads_ = 0;
};
[[maybe_unused]] ::testing::Environment* const kSingleComputeThread =
    ::testing::AddGlobalTestEnvironment(new SingleComputeThread);

// Runs fn on `threads` compute threads, then goes back to the previous count.
template <typename Fn>
void with_threads(int threads, Fn&& fn) {
  const int previous = compute_threads();
  set_compute_threads(threads);
  fn();
  set_compute_threads(previous);
}

std::size_t size_of(std::int64_t count) { return static_cast<std::size_t>(count); }

Vec random_normal(std::int64_t count, std::uint64_t seed, double scale = 1.0, double offset = 0.0) {
  std::mt19937_64 generator(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  Vec values(size_of(count));
  for (double& value : values) value = offset + scale * normal(generator);
  return values;
}

FVec to_float(const Vec& values) {
  FVec result(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) result[i] = static_cast<float>(values[i]);
  return result;
}

// The double twin run on exactly the inputs the float twin sees.
Vec rounded(const Vec& values) {
  Vec result(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) result[i] = static_cast<double>(static_cast<float>(values[i]));
  return result;
}

double weighted_sum(const Vec& out, const Vec& weights) {
  double sum = 0;
  for (std::size_t i = 0; i < out.size(); ++i) sum += out[i] * weights[i];
  return sum;
}

Vec difference(const Vec& a, const Vec& b) {
  Vec result(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) result[i] = a[i] - b[i];
  return result;
}

// Central differences of loss() in every element of x against analytic (d loss / d x).
void expect_matches_finite_differences(const std::string& what, Vec& x, const Vec& analytic,
                                       const std::function<double()>& loss) {
  ASSERT_EQ(x.size(), analytic.size()) << what;
  int failures = 0;
  double largest = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double saved = x[i];
    const double up = saved + kStep;
    const double down = saved - kStep;
    x[i] = up;
    const double plus = loss();
    x[i] = down;
    const double minus = loss();
    x[i] = saved;
    const double numeric = (plus - minus) / (up - down);
    largest = std::max(largest, std::abs(numeric));
    const double tolerance = kGradientTolerance * std::max(1.0, std::abs(analytic[i]));
    if (!(std::abs(numeric - analytic[i]) <= tolerance)) {
      if (failures < 5) {
        ADD_FAILURE() << what << "[" << i << "]: numeric " << numeric << " analytic " << analytic[i];
      }
      ++failures;
    }
  }
  EXPECT_EQ(failures, 0) << what << ": " << failures << " of " << x.size() << " elements differ";
  // The loss must actually depend on x, or the comparison proves nothing.
  EXPECT_GT(largest, 1e-3) << what << ": the loss does not depend on it";
}

// How many elements of analytic fail the finite-difference comparison (for negative checks).
int finite_difference_mismatches(Vec& x, const Vec& analytic, const std::function<double()>& loss) {
  int failures = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double saved = x[i];
    x[i] = saved + kStep;
    const double plus = loss();
    x[i] = saved - kStep;
    const double minus = loss();
    x[i] = saved;
    const double numeric = (plus - minus) / ((saved + kStep) - (saved - kStep));
    if (!(std::abs(numeric - analytic[i]) <= kGradientTolerance * std::max(1.0, std::abs(analytic[i])))) ++failures;
  }
  return failures;
}

void expect_twins(const std::string& what, const FVec& single, const Vec& twin) {
  ASSERT_EQ(single.size(), twin.size()) << what;
  int failures = 0;
  for (std::size_t i = 0; i < twin.size(); ++i) {
    const double tolerance = kTwinTolerance * std::max(1.0, std::abs(twin[i]));
    if (!(std::abs(static_cast<double>(single[i]) - twin[i]) <= tolerance)) {
      if (failures < 5) ADD_FAILURE() << what << "[" << i << "]: float " << single[i] << " double " << twin[i];
      ++failures;
    }
  }
  EXPECT_EQ(failures, 0) << what;
}

// ---------------------------------------------------------------------------------------------------
// matmul

constexpr std::int64_t kRows = 6, kIn = 8, kOut = 70;  // 70 columns: two bias column blocks

void check_matmul_gradients(WeightLayout layout, bool with_bias) {
  Vec inp = random_normal(kRows * kIn, 1);
  Vec weight = random_normal(kIn * kOut, 2, 0.5);
  Vec bias = random_normal(kOut, 3, 0.5);
  const Vec R = random_normal(kRows * kOut, 4);
  Vec out(size_of(kRows * kOut));
  auto loss = [&] {
    matmul_forward(out.data(), inp.data(), weight.data(), with_bias ? bias.data() : nullptr, kRows, kIn, kOut, layout);
    return weighted_sum(out, R);
  };
  loss();

  Vec dinp(inp.size(), 1234.5);  // overwritten
  const Vec dweight_before = random_normal(kIn * kOut, 5);
  const Vec dbias_before = random_normal(kOut, 6);
  Vec dweight = dweight_before;  // accumulated into
  Vec dbias = dbias_before;
  matmul_backward(dinp.data(), dweight.data(), with_bias ? dbias.data() : nullptr, R.data(), inp.data(), weight.data(), kRows,
                  kIn, kOut, layout);
  expect_matches_finite_differences("dinp", inp, dinp, loss);
  expect_matches_finite_differences("dweight", weight, difference(dweight, dweight_before), loss);
  if (with_bias) {
    expect_matches_finite_differences("dbias", bias, difference(dbias, dbias_before), loss);
  } else {
    EXPECT_EQ(dbias, dbias_before);
  }

  // dinp may be null: the weight gradient is the same.
  Vec dweight_only = dweight_before;
  matmul_backward<double>(nullptr, dweight_only.data(), nullptr, R.data(), inp.data(), weight.data(), kRows, kIn, kOut, layout);
  EXPECT_EQ(dweight_only, dweight);
}

TEST(MatmulKernel, InOutWithBiasMatchesFiniteDifferences) { check_matmul_gradients(WeightLayout::in_out, true); }
TEST(MatmulKernel, InOutWithoutBiasMatchesFiniteDifferences) { check_matmul_gradients(WeightLayout::in_out, false); }
TEST(MatmulKernel, OutInWithBiasMatchesFiniteDifferences) { check_matmul_gradients(WeightLayout::out_in, true); }
TEST(MatmulKernel, OutInWithoutBiasMatchesFiniteDifferences) { check_matmul_gradients(WeightLayout::out_in, false); }

TEST(MatmulKernel, LayoutsAreTransposesOfEachOther) {
  const Vec inp = random_normal(kRows * kIn, 7);
  const Vec weight = random_normal(kIn * kOut, 8);  // [in, out]
  Vec transposed(weight.size());                    // [out, in]
  for (std::int64_t i = 0; i < kIn; ++i) {
    for (std::int64_t o = 0; o < kOut; ++o) transposed[size_of(o * kIn + i)] = weight[size_of(i * kOut + o)];
  }
  Vec a(size_of(kRows * kOut)), b(size_of(kRows * kOut)), reference(size_of(kRows * kOut), 0.0);
  matmul_forward<double>(a.data(), inp.data(), weight.data(), nullptr, kRows, kIn, kOut, WeightLayout::in_out);
  matmul_forward<double>(b.data(), inp.data(), transposed.data(), nullptr, kRows, kIn, kOut, WeightLayout::out_in);
  for (std::int64_t r = 0; r < kRows; ++r) {
    for (std::int64_t o = 0; o < kOut; ++o) {
      for (std::int64_t i = 0; i < kIn; ++i) reference[size_of(r * kOut + o)] += inp[size_of(r * kIn + i)] * weight[size_of(i * kOut + o)];
    }
  }
  for (std::size_t i = 0; i < reference.size(); ++i) {
    EXPECT_NEAR(a[i], reference[i], 1e-12);
    EXPECT_NEAR(b[i], reference[i], 1e-12);
  }
}

TEST(MatmulKernel, FloatTwinMatchesDouble) {
  for (WeightLayout layout : {WeightLayout::in_out, WeightLayout::out_in}) {
    SCOPED_TRACE(layout == WeightLayout::in_out ? "in_out" : "out_in");
    const Vec inp = rounded(random_normal(kRows * kIn, 11));
    const Vec weight = rounded(random_normal(kIn * kOut, 12, 0.5));
    const Vec bias = rounded(random_normal(kOut, 13));
    const Vec R = rounded(random_normal(kRows * kOut, 14));
    Vec out(size_of(kRows * kOut)), dinp(inp.size()), dweight(weight.size(), 0.0), dbias(bias.size(), 0.0);
    matmul_forward(out.data(), inp.data(), weight.data(), bias.data(), kRows, kIn, kOut, layout);
    matmul_backward(dinp.data(), dweight.data(), dbias.data(), R.data(), inp.data(), weight.data(), kRows, kIn, kOut, layout);
    const FVec finp = to_float(inp), fweight = to_float(weight), fbias = to_float(bias), fR = to_float(R);
    FVec fout(out.size()), fdinp(dinp.size()), fdweight(dweight.size(), 0.0f), fdbias(dbias.size(), 0.0f);
    matmul_forward(fout.data(), finp.data(), fweight.data(), fbias.data(), kRows, kIn, kOut, layout);
    matmul_backward(fdinp.data(), fdweight.data(), fdbias.data(), fR.data(), finp.data(), fweight.data(), kRows, kIn, kOut, layout);
    expect_twins("out", fout, out);
    expect_twins("dinp", fdinp, dinp);
    expect_twins("dweight", fdweight, dweight);
    expect_twins("dbias", fdbias, dbias);
  }
}

// Row slices of an in_out weight (a weight converted to f32, or its gradient streamed, a slice at a
// time) give the whole matmul's results: forward (bias with the first slice, the rest added), the
// input gradient's columns and the weight gradient's rows, for slices that divide the rows and not.
TEST(MatmulKernel, RowSlicesOfTheWeightGiveTheWholeProducts) {
  const Vec inp = random_normal(kRows * kIn, 21);
  const Vec weight = random_normal(kIn * kOut, 22, 0.5);
  const Vec bias = random_normal(kOut, 23);
  const Vec R = random_normal(kRows * kOut, 24);
  Vec out(size_of(kRows * kOut)), dinp(inp.size()), dweight(weight.size(), 0.0), dbias(bias.size(), 0.0);
  matmul_forward<double>(out.data(), inp.data(), weight.data(), bias.data(), kRows, kIn, kOut, WeightLayout::in_out);
  matmul_backward<double>(dinp.data(), dweight.data(), dbias.data(), R.data(), inp.data(), weight.data(), kRows, kIn, kOut,
                          WeightLayout::in_out);
  for (std::int64_t per_slice : {std::int64_t{1}, kIn / 2, kIn - 1, kIn}) {
    SCOPED_TRACE("rows per slice " + std::to_string(per_slice));
    Vec sliced_out(out.size(), -7.0), sliced_dinp(dinp.size(), -7.0), sliced_dweight(weight.size(), 0.0);
    for (std::int64_t first = 0; first < kIn; first += per_slice) {
      const std::int64_t count = std::min(per_slice, kIn - first);
      const double* rows = weight.data() + first * kOut;
      matmul_forward_rows<double>(sliced_out.data(), inp.data(), rows, bias.data(), kRows, kIn, kOut, first, count, first > 0);
      matmul_backward_input_rows<double>(sliced_dinp.data(), R.data(), rows, kRows, kIn, kOut, first, count);
      matmul_backward_weight_rows<double>(sliced_dweight.data() + first * kOut, R.data(), inp.data(), kRows, kIn, kOut, first, count);
    }
    for (std::size_t i = 0; i < out.size(); ++i) EXPECT_NEAR(sliced_out[i], out[i], 1e-12) << "out " << i;
    for (std::size_t i = 0; i < dinp.size(); ++i) EXPECT_NEAR(sliced_dinp[i], dinp[i], 1e-12) << "dinp " << i;
    for (std::size_t i = 0; i < dweight.size(); ++i) EXPECT_NEAR(sliced_dweight[i], dweight[i], 1e-12) << "dweight " << i;
  }
}

// ---------------------------------------------------------------------------------------------------
// layernorm

constexpr std::int64_t kNormRows = 6, kNormChannels = 72;  // 72 channels: two parameter-gradient blocks

TEST(LayerNormKernel, BackwardMatchesFiniteDifferencesAndAccumulates) {
  Vec inp = random_normal(kNormRows * kNormChannels, 21, 2.0, 0.5);
  Vec weight = random_normal(kNormChannels, 22, 0.3, 1.0);
  Vec bias = random_normal(kNormChannels, 23, 0.3);
  const Vec R = random_normal(kNormRows * kNormChannels, 24);
  Vec out(inp.size()), mean(size_of(kNormRows)), rstd(size_of(kNormRows));
  auto loss = [&] {
    layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), weight.data(), bias.data(), kNormRows, kNormChannels);
    return weighted_sum(out, R);
  };
  loss();
  // Forward statistics: mean and 1/sqrt(biased variance + 1e-5) per row.
  for (std::int64_t row = 0; row < kNormRows; ++row) {
    double sum = 0, squares = 0;
    for (std::int64_t c = 0; c < kNormChannels; ++c) sum += inp[size_of(row * kNormChannels + c)];
    const double m = sum / static_cast<double>(kNormChannels);
    for (std::int64_t c = 0; c < kNormChannels; ++c) {
      squares += (inp[size_of(row * kNormChannels + c)] - m) * (inp[size_of(row * kNormChannels + c)] - m);
    }
    EXPECT_NEAR(mean[size_of(row)], m, 1e-12);
    EXPECT_NEAR(rstd[size_of(row)], 1.0 / std::sqrt(squares / static_cast<double>(kNormChannels) + 1e-5), 1e-12);
  }

  const Vec dinp_before = random_normal(kNormRows * kNormChannels, 25);
  const Vec dweight_before = random_normal(kNormChannels, 26);
  const Vec dbias_before = random_normal(kNormChannels, 27);
  Vec dinp = dinp_before, dweight = dweight_before, dbias = dbias_before;
  layernorm_backward(dinp.data(), dweight.data(), dbias.data(), R.data(), inp.data(), weight.data(), mean.data(), rstd.data(),
                     kNormRows, kNormChannels);
  expect_matches_finite_differences("dinp", inp, difference(dinp, dinp_before), loss);
  expect_matches_finite_differences("dweight", weight, difference(dweight, dweight_before), loss);
  expect_matches_finite_differences("dbias", bias, difference(dbias, dbias_before), loss);
}

TEST(LayerNormKernel, FloatTwinMatchesDouble) {
  const Vec inp = rounded(random_normal(kNormRows * kNormChannels, 31, 2.0, 0.5));
  const Vec weight = rounded(random_normal(kNormChannels, 32, 0.3, 1.0));
  const Vec bias = rounded(random_normal(kNormChannels, 33, 0.3));
  const Vec R = rounded(random_normal(kNormRows * kNormChannels, 34));
  Vec out(inp.size()), mean(size_of(kNormRows)), rstd(size_of(kNormRows));
  Vec dinp(inp.size(), 0.0), dweight(weight.size(), 0.0), dbias(bias.size(), 0.0);
  layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), weight.data(), bias.data(), kNormRows, kNormChannels);
  layernorm_backward(dinp.data(), dweight.data(), dbias.data(), R.data(), inp.data(), weight.data(), mean.data(), rstd.data(),
                     kNormRows, kNormChannels);
  const FVec finp = to_float(inp), fweight = to_float(weight), fbias = to_float(bias), fR = to_float(R);
  FVec fout(out.size()), fmean(mean.size()), frstd(rstd.size());
  FVec fdinp(dinp.size(), 0.0f), fdweight(dweight.size(), 0.0f), fdbias(dbias.size(), 0.0f);
  layernorm_forward(fout.data(), fmean.data(), frstd.data(), finp.data(), fweight.data(), fbias.data(), kNormRows, kNormChannels);
  layernorm_backward(fdinp.data(), fdweight.data(), fdbias.data(), fR.data(), finp.data(), fweight.data(), fmean.data(),
                     frstd.data(), kNormRows, kNormChannels);
  expect_twins("out", fout, out);
  expect_twins("mean", fmean, mean);
  expect_twins("rstd", frstd, rstd);
  expect_twins("dinp", fdinp, dinp);
  expect_twins("dweight", fdweight, dweight);
  expect_twins("dbias", fdbias, dbias);
}

// ---------------------------------------------------------------------------------------------------
// attention

constexpr AttentionShape kAttention{2, 5, 8, 2};
constexpr std::int64_t kQkvCount = 2 * 5 * 3 * 8;
constexpr std::int64_t kAttentionOutCount = 2 * 5 * 8;
constexpr std::int64_t kAttCount = 2 * 2 * 5 * 5;
constexpr std::int64_t kScratchCount = 2 * 2 * 5 * 5;  // B * NH * T * T

struct AttentionCase {
  Vec qkv = random_normal(kQkvCount, 41);
  Vec R = random_normal(kAttentionOutCount, 42);
  Vec out = Vec(size_of(kAttentionOutCount));
  Vec att = Vec(size_of(kAttCount));
  Vec forward_scratch = Vec(size_of(kScratchCount));
  float dropout = 0.0f;
  RandomKey key{0x1234};

  double loss() {
    attention_forward(out.data(), att.data(), forward_scratch.data(), qkv.data(), kAttention, dropout, key);
    return weighted_sum(out, R);
  }
  Vec backward(RandomKey backward_key) {
    loss();
    Vec dqkv(size_of(kQkvCount), -777.0);  // overwritten
    Vec scratch(size_of(kScratchCount), 99.0);
    attention_backward(dqkv.data(), scratch.data(), R.data(), qkv.data(), att.data(), kAttention, dropout, backward_key);
    return dqkv;
  }
};

TEST(AttentionKernel, ForwardIsCausalSoftmax) {
  AttentionCase c;
  c.loss();
  const auto [B, T, C, NH] = kAttention;
  const std::int64_t hs = C / NH;
  for (std::int64_t b = 0; b < B; ++b) {
    for (std::int64_t h = 0; h < NH; ++h) {
      for (std::int64_t t = 0; t < T; ++t) {
        const double* row = c.att.data() + ((b * NH + h) * T + t) * T;
        double scores[5], maximum = -1e300, sum = 0, total = 0;
        for (std::int64_t t2 = 0; t2 <= t; ++t2) {
          double dot = 0;
          for (std::int64_t i = 0; i < hs; ++i) dot += c.qkv[size_of((b * T + t) * 3 * C + h * hs + i)] * c.qkv[size_of((b * T + t2) * 3 * C + C + h * hs + i)];
          scores[t2] = dot / std::sqrt(static_cast<double>(hs));
          maximum = std::max(maximum, scores[t2]);
        }
        for (std::int64_t t2 = 0; t2 <= t; ++t2) sum += std::exp(scores[t2] - maximum);
        for (std::int64_t t2 = 0; t2 < T; ++t2) {
          const double expected = t2 <= t ? std::exp(scores[t2] - maximum) / sum : 0.0;
          EXPECT_NEAR(row[t2], expected, 1e-14);
          total += row[t2];
        }
        EXPECT_NEAR(total, 1.0, 1e-14);
        for (std::int64_t i = 0; i < hs; ++i) {
          double expected = 0;
          for (std::int64_t t2 = 0; t2 <= t; ++t2) expected += row[t2] * c.qkv[size_of((b * T + t2) * 3 * C + 2 * C + h * hs + i)];
          EXPECT_NEAR(c.out[size_of((b * T + t) * C + h * hs + i)], expected, 1e-13);
        }
      }
    }
  }
}

TEST(AttentionKernel, BackwardMatchesFiniteDifferencesWithoutDropout) {
  AttentionCase c;
  const Vec dqkv = c.backward(c.key);
  expect_matches_finite_differences("dqkv", c.qkv, dqkv, [&] { return c.loss(); });
}

// Passing proves the backward regenerates exactly the forward's dropout mask from the key.
TEST(AttentionKernel, BackwardMatchesFiniteDifferencesWithDropout) {
  AttentionCase c;
  c.dropout = 0.3f;
  // The mask is not trivial on this shape: some kept and some dropped probabilities.
  int kept = 0, dropped = 0;
  for (std::uint64_t i = 0; i < static_cast<std::uint64_t>(kAttCount); ++i) (dropout_keeps(c.key, i, c.dropout) ? kept : dropped)++;
  EXPECT_GT(kept, 10);
  EXPECT_GT(dropped, 10);
  AttentionCase plain;
  plain.loss();
  c.loss();
  EXPECT_NE(c.out, plain.out) << "dropout 0.3 changed nothing";
  EXPECT_EQ(c.att, plain.att) << "att must hold the probabilities before dropout";
  const Vec dqkv = c.backward(c.key);
  expect_matches_finite_differences("dqkv", c.qkv, dqkv, [&] { return c.loss(); });
}

// The other side of the previous test: a backward with a different mask fails the comparison.
TEST(AttentionKernel, BackwardWithAnotherKeyFailsFiniteDifferences) {
  AttentionCase c;
  c.dropout = 0.3f;
  const Vec wrong = c.backward(RandomKey{0x4321});
  EXPECT_GT(finite_difference_mismatches(c.qkv, wrong, [&] { return c.loss(); }), 10);
}

TEST(AttentionKernel, FloatTwinMatchesDouble) {
  for (float dropout : {0.0f, 0.3f}) {
    SCOPED_TRACE("dropout " + std::to_string(dropout));
    AttentionCase c;
    c.dropout = dropout;
    c.qkv = rounded(c.qkv);
    c.R = rounded(c.R);
    const Vec dqkv = c.backward(c.key);
    const FVec qkv = to_float(c.qkv), R = to_float(c.R);
    FVec out(c.out.size()), att(c.att.size()), dqkv32(dqkv.size()), scratch(size_of(kScratchCount));
    attention_forward(out.data(), att.data(), scratch.data(), qkv.data(), kAttention, dropout, c.key);
    attention_backward(dqkv32.data(), scratch.data(), R.data(), qkv.data(), att.data(), kAttention, dropout, c.key);
    expect_twins("out", out, c.out);
    expect_twins("att", att, c.att);
    expect_twins("dqkv", dqkv32, dqkv);
  }
}

// ---------------------------------------------------------------------------------------------------
// gelu

constexpr std::int64_t kGeluCount = 41;

Vec gelu_inputs() {
  Vec values = random_normal(kGeluCount, 51, 0.1);
  for (std::int64_t i = 0; i < kGeluCount; ++i) values[size_of(i)] += -5.0 + 10.0 * static_cast<double>(i) / static_cast<double>(kGeluCount - 1);
  return values;
}

TEST(GeluKernel, ForwardIsTheTanhApproximation) {
  const Vec inp = gelu_inputs();
  Vec out(inp.size());
  gelu_forward(out.data(), inp.data(), kGeluCount);
  for (std::size_t i = 0; i < inp.size(); ++i) {
    const double x = inp[i];
    EXPECT_NEAR(out[i], 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x))), 1e-15);
  }
}

TEST(GeluKernel, BackwardMatchesFiniteDifferencesAndAccumulates) {
  Vec inp = gelu_inputs();
  const Vec R = random_normal(kGeluCount, 52);
  Vec out(inp.size());
  auto loss = [&] {
    gelu_forward(out.data(), inp.data(), kGeluCount);
    return weighted_sum(out, R);
  };
  const Vec before = random_normal(kGeluCount, 53);
  Vec dinp = before;
  gelu_backward(dinp.data(), inp.data(), R.data(), kGeluCount);
  expect_matches_finite_differences("dinp", inp, difference(dinp, before), loss);
}

TEST(GeluKernel, FloatTwinMatchesDouble) {
  const Vec inp = rounded(gelu_inputs());
  const Vec R = rounded(random_normal(kGeluCount, 54));
  Vec out(inp.size()), dinp(inp.size(), 0.0);
  gelu_forward(out.data(), inp.data(), kGeluCount);
  gelu_backward(dinp.data(), inp.data(), R.data(), kGeluCount);
  const FVec finp = to_float(inp), fR = to_float(R);
  FVec fout(out.size()), fdinp(dinp.size(), 0.0f);
  gelu_forward(fout.data(), finp.data(), kGeluCount);
  gelu_backward(fdinp.data(), finp.data(), fR.data(), kGeluCount);
  expect_twins("out", fout, out);
  expect_twins("dinp", fdinp, dinp);
}

// ---------------------------------------------------------------------------------------------------
// residual and dropout

TEST(ResidualKernel, AddsAndMayAlias) {
  const Vec a = random_normal(37, 61), b = random_normal(37, 62);
  Vec out(a.size());
  residual_forward(out.data(), a.data(), b.data(), 37);
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_EQ(out[i], a[i] + b[i]);
  Vec aliased = a;
  residual_forward(aliased.data(), aliased.data(), b.data(), 37);
  EXPECT_EQ(aliased, out);
  const FVec fa = to_float(a), fb = to_float(b);
  FVec fout(fa.size());
  residual_forward(fout.data(), fa.data(), fb.data(), 37);
  expect_twins("out", fout, out);
}

constexpr std::int64_t kDropoutCount = 64;

TEST(DropoutKernel, BackwardMatchesFiniteDifferencesAndAccumulates) {
  const RandomKey key{77};
  for (float p : {0.0f, 0.3f}) {
    SCOPED_TRACE("p " + std::to_string(p));
    Vec inp = random_normal(kDropoutCount, 71);
    const Vec R = random_normal(kDropoutCount, 72);
    Vec out(inp.size());
    auto loss = [&] {
      dropout_forward(out.data(), inp.data(), kDropoutCount, p, key);
      return weighted_sum(out, R);
    };
    const Vec before = random_normal(kDropoutCount, 73);
    Vec dinp = before;
    dropout_backward(dinp.data(), R.data(), kDropoutCount, p, key);
    expect_matches_finite_differences("dinp", inp, difference(dinp, before), loss);
  }
}

TEST(DropoutKernel, ZeroProbabilityCopies) {
  const Vec inp = random_normal(kDropoutCount, 74);
  Vec out(inp.size());
  dropout_forward(out.data(), inp.data(), kDropoutCount, 0.0f, RandomKey{1});
  EXPECT_EQ(out, inp);
}

TEST(DropoutKernel, DropsThirtyPercentAndScalesTheRest) {
  constexpr std::int64_t kCount = 100000;
  const RandomKey key = RandomKey{5}.derive(9);
  const Vec inp = random_normal(kCount, 75, 1.0, 3.0);
  Vec out(inp.size());
  dropout_forward(out.data(), inp.data(), kCount, 0.3f, key);
  std::int64_t dropped = 0;
  for (std::size_t i = 0; i < inp.size(); ++i) {
    if (out[i] == 0.0) {
      ++dropped;
    } else {
      EXPECT_NEAR(out[i], inp[i] / 0.7, 1e-6 * std::abs(inp[i])) << i;
    }
  }
  const double rate = static_cast<double>(dropped) / static_cast<double>(kCount);
  EXPECT_NEAR(rate, 0.3, 0.05);
  // In place: out may alias inp.
  Vec in_place = inp;
  dropout_forward(in_place.data(), in_place.data(), kCount, 0.3f, key);
  EXPECT_EQ(in_place, out);
}

TEST(DropoutKernel, ForwardAndBackwardDrawTheSameMask) {
  constexpr std::int64_t kCount = 10000;
  const RandomKey key{0xabcdef};
  const Vec ones(size_of(kCount), 1.0);
  Vec forward(ones.size()), backward(ones.size(), 0.0);
  dropout_forward(forward.data(), ones.data(), kCount, 0.3f, key);
  dropout_backward(backward.data(), ones.data(), kCount, 0.3f, key);
  EXPECT_EQ(forward, backward);
  // And another key gives another mask.
  Vec other(ones.size());
  dropout_forward(other.data(), ones.data(), kCount, 0.3f, RandomKey{0xabcdee});
  EXPECT_NE(other, forward);
}

TEST(DropoutKernel, FloatTwinMatchesDouble) {
  const RandomKey key{78};
  const Vec inp = rounded(random_normal(kDropoutCount, 76));
  const Vec R = rounded(random_normal(kDropoutCount, 77));
  Vec out(inp.size()), dinp(inp.size(), 0.0);
  dropout_forward(out.data(), inp.data(), kDropoutCount, 0.3f, key);
  dropout_backward(dinp.data(), R.data(), kDropoutCount, 0.3f, key);
  const FVec finp = to_float(inp), fR = to_float(R);
  FVec fout(out.size()), fdinp(dinp.size(), 0.0f);
  dropout_forward(fout.data(), finp.data(), kDropoutCount, 0.3f, key);
  dropout_backward(fdinp.data(), fR.data(), kDropoutCount, 0.3f, key);
  expect_twins("out", fout, out);
  expect_twins("dinp", fdinp, dinp);
}

// ---------------------------------------------------------------------------------------------------
// encoder

constexpr std::int64_t kEncB = 2, kEncT = 3, kEncC = 40, kEncV = 5, kEncMaxT = 4;  // 40 channels: two blocks
const std::vector<std::int32_t> kEncTokens = {1, 3, 1, 1, 0, 3};                // repeated tokens, 2 and 4 unused

TEST(EncoderKernel, BackwardMatchesFiniteDifferencesAndAccumulates) {
  Vec wte = random_normal(kEncV * kEncC, 81);
  Vec wpe = random_normal(kEncMaxT * kEncC, 82);
  const Vec R = random_normal(kEncB * kEncT * kEncC, 83);
  Vec out(R.size());
  auto loss = [&] {
    encoder_forward(out.data(), kEncTokens.data(), wte.data(), wpe.data(), kEncB, kEncT, kEncC);
    return weighted_sum(out, R);
  };
  loss();
  for (std::int64_t position = 0; position < kEncB * kEncT; ++position) {
    for (std::int64_t c = 0; c < kEncC; ++c) {
      EXPECT_EQ(out[size_of(position * kEncC + c)],
                wte[size_of(kEncTokens[size_of(position)] * kEncC + c)] + wpe[size_of((position % kEncT) * kEncC + c)]);
    }
  }
  const Vec dwte_before = random_normal(kEncV * kEncC, 84);
  const Vec dwpe_before = random_normal(kEncMaxT * kEncC, 85);
  Vec dwte = dwte_before, dwpe = dwpe_before;
  encoder_backward(dwte.data(), dwpe.data(), R.data(), kEncTokens.data(), kEncB, kEncT, kEncC);
  expect_matches_finite_differences("dwte", wte, difference(dwte, dwte_before), loss);
  expect_matches_finite_differences("dwpe", wpe, difference(dwpe, dwpe_before), loss);
  // Unused rows are untouched (exactly).
  for (std::int64_t c = 0; c < kEncC; ++c) {
    EXPECT_EQ(dwte[size_of(2 * kEncC + c)], dwte_before[size_of(2 * kEncC + c)]);
    EXPECT_EQ(dwte[size_of(4 * kEncC + c)], dwte_before[size_of(4 * kEncC + c)]);
    EXPECT_EQ(dwpe[size_of(3 * kEncC + c)], dwpe_before[size_of(3 * kEncC + c)]);
  }
}

TEST(EncoderKernel, FloatTwinMatchesDouble) {
  const Vec wte = rounded(random_normal(kEncV * kEncC, 86));
  const Vec wpe = rounded(random_normal(kEncMaxT * kEncC, 87));
  const Vec R = rounded(random_normal(kEncB * kEncT * kEncC, 88));
  Vec out(R.size()), dwte(wte.size(), 0.0), dwpe(wpe.size(), 0.0);
  encoder_forward(out.data(), kEncTokens.data(), wte.data(), wpe.data(), kEncB, kEncT, kEncC);
  encoder_backward(dwte.data(), dwpe.data(), R.data(), kEncTokens.data(), kEncB, kEncT, kEncC);
  const FVec fwte = to_float(wte), fwpe = to_float(wpe), fR = to_float(R);
  FVec fout(out.size()), fdwte(dwte.size(), 0.0f), fdwpe(dwpe.size(), 0.0f);
  encoder_forward(fout.data(), kEncTokens.data(), fwte.data(), fwpe.data(), kEncB, kEncT, kEncC);
  encoder_backward(fdwte.data(), fdwpe.data(), fR.data(), kEncTokens.data(), kEncB, kEncT, kEncC);
  expect_twins("out", fout, out);
  expect_twins("dwte", fdwte, dwte);
  expect_twins("dwpe", fdwpe, dwpe);
}

// ---------------------------------------------------------------------------------------------------
// cross-entropy

constexpr std::int64_t kCeRows = 6, kCeVocab = 11;
const std::vector<std::int32_t> kCeTargets = {0, 10, 3, 3, 7, 1};

TEST(CrossEntropyKernel, LossesAreLogSumExpMinusTargetLogit) {
  const Vec logits = random_normal(kCeRows * kCeVocab, 91, 2.0);
  Vec losses(size_of(kCeRows));
  cross_entropy_forward(losses.data(), logits.data(), kCeTargets.data(), kCeRows, kCeVocab);
  for (std::int64_t row = 0; row < kCeRows; ++row) {
    double sum = 0;
    for (std::int64_t v = 0; v < kCeVocab; ++v) sum += std::exp(logits[size_of(row * kCeVocab + v)]);
    EXPECT_NEAR(losses[size_of(row)], std::log(sum) - logits[size_of(row * kCeVocab + kCeTargets[size_of(row)])], 1e-13);
  }
  // Stable for large logits: a shift of 1000 changes nothing.
  Vec shifted = logits;
  for (double& value : shifted) value += 1000.0;
  Vec shifted_losses(losses.size());
  cross_entropy_forward(shifted_losses.data(), shifted.data(), kCeTargets.data(), kCeRows, kCeVocab);
  for (std::size_t i = 0; i < losses.size(); ++i) EXPECT_NEAR(shifted_losses[i], losses[i], 1e-9);
}

TEST(CrossEntropyKernel, InPlaceGradientMatchesFiniteDifferences) {
  Vec logits = random_normal(kCeRows * kCeVocab, 92, 2.0);
  const double dloss = 0.7;
  Vec losses(size_of(kCeRows));
  auto loss = [&] {
    cross_entropy_forward(losses.data(), logits.data(), kCeTargets.data(), kCeRows, kCeVocab);
    double sum = 0;
    for (double each : losses) sum += each;
    return sum * dloss;
  };
  loss();
  const Vec forward_losses = losses;
  Vec gradient = logits;
  Vec fused_losses(size_of(kCeRows));
  cross_entropy_forward_backward(gradient.data(), fused_losses.data(), kCeTargets.data(), kCeRows, kCeVocab, dloss);
  EXPECT_EQ(fused_losses, forward_losses);
  expect_matches_finite_differences("dlogits", logits, gradient, loss);
  // Each row of (softmax - onehot) sums to zero.
  for (std::int64_t row = 0; row < kCeRows; ++row) {
    double sum = 0;
    for (std::int64_t v = 0; v < kCeVocab; ++v) sum += gradient[size_of(row * kCeVocab + v)];
    EXPECT_NEAR(sum, 0.0, 1e-14);
  }
}

TEST(CrossEntropyKernel, FloatTwinMatchesDouble) {
  const Vec logits = rounded(random_normal(kCeRows * kCeVocab, 93, 2.0));
  Vec losses(size_of(kCeRows)), gradient = logits, fused(size_of(kCeRows));
  cross_entropy_forward(losses.data(), logits.data(), kCeTargets.data(), kCeRows, kCeVocab);
  cross_entropy_forward_backward(gradient.data(), fused.data(), kCeTargets.data(), kCeRows, kCeVocab, 0.7);
  FVec flogits = to_float(logits), flosses(losses.size()), ffused(fused.size());
  cross_entropy_forward(flosses.data(), flogits.data(), kCeTargets.data(), kCeRows, kCeVocab);
  cross_entropy_forward_backward(flogits.data(), ffused.data(), kCeTargets.data(), kCeRows, kCeVocab, 0.7f);
  expect_twins("losses", flosses, losses);
  expect_twins("fused losses", ffused, fused);
  // dloss differs by float rounding of 0.7 only.
  Vec scaled = gradient;
  for (double& value : scaled) value *= static_cast<double>(0.7f) / 0.7;
  expect_twins("gradient", flogits, scaled);
}

// ---------------------------------------------------------------------------------------------------
// AdamW

TEST(AdamWKernel, MatchesTorchFormulaForThreeSteps) {
  constexpr std::int64_t kCount = 37;
  AdamWHyperparameters hp;
  hp.learning_rate = 1e-2f;
  hp.beta1 = 0.9f;
  hp.beta2 = 0.95f;
  hp.epsilon = 1e-8f;
  hp.weight_decay = 0.1f;
  const float gradient_scale = 0.5f;

  const Vec initial = rounded(random_normal(kCount, 101));
  FVec parameter = to_float(initial), m(size_of(kCount), 0.0f), v(size_of(kCount), 0.0f);
  std::vector<std::uint16_t> bf16(size_of(kCount), 0);
  Vec p_ref = initial, m_ref(size_of(kCount), 0.0), v_ref(size_of(kCount), 0.0);
  const double lr = hp.learning_rate, b1 = hp.beta1, b2 = hp.beta2, eps = hp.epsilon, wd = hp.weight_decay;
  for (std::int64_t step = 1; step <= 3; ++step) {
    FVec gradient = to_float(random_normal(kCount, 200 + static_cast<std::uint64_t>(step), 2.0));
    gradient[0] = 0.0f;  // pure decay on this one
    adamw_update(parameter.data(), bf16.data(), gradient.data(), m.data(), v.data(), kCount, hp, step, gradient_scale);
    const double t = static_cast<double>(step);
    Vec m_scale(size_of(kCount));  // the terms' magnitude: m may cancel to far below it
    for (std::size_t i = 0; i < size_of(kCount); ++i) {
      const double g = static_cast<double>(gradient[i]) * gradient_scale;
      m_scale[i] = b1 * std::abs(m_ref[i]) + (1.0 - b1) * std::abs(g);
      p_ref[i] *= 1.0 - lr * wd;
      m_ref[i] = b1 * m_ref[i] + (1.0 - b1) * g;
      v_ref[i] = b2 * v_ref[i] + (1.0 - b2) * g * g;
      p_ref[i] -= lr / (1.0 - std::pow(b1, t)) * m_ref[i] / (std::sqrt(v_ref[i]) / std::sqrt(1.0 - std::pow(b2, t)) + eps);
    }
    for (std::size_t i = 0; i < size_of(kCount); ++i) {
      EXPECT_NEAR(parameter[i], p_ref[i], 1e-6 * std::max(1e-2, std::abs(p_ref[i]))) << "step " << step << " parameter " << i;
      EXPECT_NEAR(m[i], m_ref[i], 1e-6 * std::max(m_scale[i], 1e-12)) << "step " << step << " m " << i;
      EXPECT_NEAR(v[i], v_ref[i], 1e-6 * std::max(1e-9, std::abs(v_ref[i]))) << "step " << step << " v " << i;
      EXPECT_EQ(bf16[i], float_to_bf16(parameter[i])) << i;
    }
  }
}

TEST(AdamWKernel, NullBf16CopyIsAllowed) {
  AdamWHyperparameters hp;
  FVec p = {1.0f, -2.0f}, g = {0.5f, 0.25f}, m = {0.0f, 0.0f}, v = {0.0f, 0.0f};
  adamw_update(p.data(), nullptr, g.data(), m.data(), v.data(), 2, hp, 1, 1.0f);
  // The first step moves each parameter by lr against its gradient's sign (m/sqrt(v) = sign(g)).
  EXPECT_NEAR(p[0], 1.0f - hp.learning_rate, 1e-7);
  EXPECT_NEAR(p[1], -2.0f - hp.learning_rate, 1e-7);
}

TEST(SumOfSquaresKernel, MatchesDoubleLoopOnAnyThreadCount) {
  constexpr std::int64_t kCount = 200003;  // several blocks and a partial one
  const FVec values = to_float(random_normal(kCount, 111));
  double reference = 0;
  for (float value : values) reference += static_cast<double>(value) * static_cast<double>(value);
  const double total = sum_of_squares(values.data(), kCount);
  EXPECT_NEAR(total, reference, 1e-12 * reference);
  EXPECT_EQ(sum_of_squares(values.data(), 0), 0.0);
  EXPECT_EQ(sum_of_squares(values.data(), 1), static_cast<double>(values[0]) * static_cast<double>(values[0]));

  double one = 0, two = 0;
  with_threads(1, [&] { one = sum_of_squares(values.data(), kCount); });
  with_threads(2, [&] { two = sum_of_squares(values.data(), kCount); });
  EXPECT_EQ(one, two);
  EXPECT_EQ(one, total);
}

// ---------------------------------------------------------------------------------------------------
// Thread counts

// Every float kernel, forward and backward, on shapes that split into several blocks per thread.
std::vector<std::pair<std::string, FVec>> run_every_kernel() {
  std::vector<std::pair<std::string, FVec>> results;
  constexpr std::int64_t rows = 64, in = 48, out = 200, channels = 200, vocab = 100, count = 10000;
  {
    const FVec inp = to_float(random_normal(rows * in, 301)), weight = to_float(random_normal(in * out, 302));
    const FVec bias = to_float(random_normal(out, 303)), dout = to_float(random_normal(rows * out, 304));
    for (WeightLayout layout : {WeightLayout::in_out, WeightLayout::out_in}) {
      FVec y(size_of(rows * out)), dinp(inp.size()), dweight(weight.size(), 0.5f), dbias(bias.size(), 0.5f);
      matmul_forward(y.data(), inp.data(), weight.data(), bias.data(), rows, in, out, layout);
      matmul_backward(dinp.data(), dweight.data(), dbias.data(), dout.data(), inp.data(), weight.data(), rows, in, out, layout);
      const std::string name = layout == WeightLayout::in_out ? "matmul in_out " : "matmul out_in ";
      results.push_back({name + "out", y});
      results.push_back({name + "dinp", dinp});
      results.push_back({name + "dweight", dweight});
      results.push_back({name + "dbias", dbias});
    }
  }
  {
    const FVec inp = to_float(random_normal(rows * channels, 311, 2.0)), weight = to_float(random_normal(channels, 312, 0.3, 1.0));
    const FVec bias = to_float(random_normal(channels, 313)), dout = to_float(random_normal(rows * channels, 314));
    FVec y(inp.size()), mean(size_of(rows)), rstd(size_of(rows)), dinp(inp.size(), 0.0f), dweight(weight.size(), 0.0f),
        dbias(bias.size(), 0.0f);
    layernorm_forward(y.data(), mean.data(), rstd.data(), inp.data(), weight.data(), bias.data(), rows, channels);
    layernorm_backward(dinp.data(), dweight.data(), dbias.data(), dout.data(), inp.data(), weight.data(), mean.data(), rstd.data(),
                       rows, channels);
    results.push_back({"layernorm out", y});
    results.push_back({"layernorm dinp", dinp});
    results.push_back({"layernorm dweight", dweight});
    results.push_back({"layernorm dbias", dbias});
  }
  {
    const AttentionShape shape{2, 16, 32, 4};
    const FVec qkv = to_float(random_normal(2 * 16 * 96, 321)), dout = to_float(random_normal(2 * 16 * 32, 322));
    FVec y(dout.size()), att(size_of(2 * 4 * 16 * 16)), dqkv(qkv.size()), scratch(size_of(2 * 4 * 16 * 16));
    attention_forward(y.data(), att.data(), scratch.data(), qkv.data(), shape, 0.2f, RandomKey{3});
    attention_backward(dqkv.data(), scratch.data(), dout.data(), qkv.data(), att.data(), shape, 0.2f, RandomKey{3});
    results.push_back({"attention out", y});
    results.push_back({"attention att", att});
    results.push_back({"attention dqkv", dqkv});
  }
  {
    const FVec inp = to_float(random_normal(count, 331, 2.0)), dout = to_float(random_normal(count, 332));
    FVec y(inp.size()), dinp(inp.size(), 0.0f), dropped(inp.size()), ddropped(inp.size(), 0.0f), sum(inp.size());
    gelu_forward(y.data(), inp.data(), count);
    gelu_backward(dinp.data(), inp.data(), dout.data(), count);
    dropout_forward(dropped.data(), inp.data(), count, 0.3f, RandomKey{4});
    dropout_backward(ddropped.data(), dout.data(), count, 0.3f, RandomKey{4});
    residual_forward(sum.data(), inp.data(), dout.data(), count);
    results.push_back({"gelu out", y});
    results.push_back({"gelu dinp", dinp});
    results.push_back({"dropout out", dropped});
    results.push_back({"dropout dinp", ddropped});
    results.push_back({"residual out", sum});
  }
  {
    std::vector<std::int32_t> tokens(size_of(rows));
    for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<std::int32_t>((i * 7) % 13);
    const FVec wte = to_float(random_normal(13 * channels, 341)), wpe = to_float(random_normal(32 * channels, 342));
    const FVec dout = to_float(random_normal(rows * channels, 343));
    FVec y(dout.size()), dwte(wte.size(), 0.0f), dwpe(wpe.size(), 0.0f);
    encoder_forward(y.data(), tokens.data(), wte.data(), wpe.data(), 2, 32, channels);
    encoder_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), 2, 32, channels);
    results.push_back({"encoder out", y});
    results.push_back({"encoder dwte", dwte});
    results.push_back({"encoder dwpe", dwpe});
  }
  {
    std::vector<std::int32_t> targets(size_of(rows));
    for (std::size_t i = 0; i < targets.size(); ++i) targets[i] = static_cast<std::int32_t>((i * 31) % vocab);
    FVec logits = to_float(random_normal(rows * vocab, 351, 3.0)), losses(size_of(rows)), fused(size_of(rows));
    cross_entropy_forward(losses.data(), logits.data(), targets.data(), rows, vocab);
    cross_entropy_forward_backward(logits.data(), fused.data(), targets.data(), rows, vocab, 0.25f);
    results.push_back({"cross_entropy losses", losses});
    results.push_back({"cross_entropy gradient", logits});
  }
  {
    FVec parameter = to_float(random_normal(count, 361)), m(size_of(count), 0.0f), v(size_of(count), 0.0f);
    const FVec gradient = to_float(random_normal(count, 362));
    std::vector<std::uint16_t> bf16(size_of(count));
    AdamWHyperparameters hp;
    hp.weight_decay = 0.1f;
    adamw_update(parameter.data(), bf16.data(), gradient.data(), m.data(), v.data(), count, hp, 1, 0.5f);
    results.push_back({"adamw parameter", parameter});
    results.push_back({"adamw m", m});
    results.push_back({"adamw v", v});
  }
  return results;
}

// Every kernel is deterministic on a given thread count. Across thread counts, the kernels' own loops
// (fixed blocks summed in order) give the same bits; OpenBLAS GEMMs may sum in another order on another
// thread count, so matmul results only agree to rounding.
TEST(KernelThreads, DeterministicAndThreadCountInvariantOutsideGemm) {
  std::vector<std::pair<std::string, FVec>> one, two, again;
  with_threads(1, [&] { one = run_every_kernel(); });
  with_threads(2, [&] { two = run_every_kernel(); });
  with_threads(2, [&] { again = run_every_kernel(); });
  ASSERT_EQ(one.size(), two.size());
  ASSERT_EQ(again.size(), two.size());
  for (std::size_t i = 0; i < one.size(); ++i) {
    const std::string& name = one[i].first;
    const std::size_t bytes = one[i].second.size() * sizeof(float);
    ASSERT_EQ(one[i].second.size(), two[i].second.size()) << name;
    EXPECT_EQ(std::memcmp(two[i].second.data(), again[i].second.data(), bytes), 0) << name << ": not deterministic";
    if (name.starts_with("matmul")) {
      const FVec& a = one[i].second;
      const Vec b(two[i].second.begin(), two[i].second.end());
      expect_twins(name + " (1 vs 2 threads)", a, b);
    } else {
      EXPECT_EQ(std::memcmp(one[i].second.data(), two[i].second.data(), bytes), 0) << name << ": 1 and 2 threads differ";
    }
  }
}

}  // namespace
}  // namespace ferry::cpu
