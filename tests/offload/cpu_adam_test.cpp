// CpuAdam: bitwise equal to models' cpu::adamw_update on every SIMD level and thread count, within a
// few ULP of an f64 AdamW, exact bias correction after a resume, bf16/f16 outputs equal to
// float_to_bf16/float_to_f16, a fused gradient scale, and a deterministic gradient check; plus the
// HostThreadPool it runs on.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/core/dtype.h"
#include "models/kernels/cpu/adamw.h"
#include "offload/cpu_adam.h"
#include "offload/host_thread_pool.h"
#include "offload/simd_level.h"

namespace ferry::offload {
namespace {

constexpr SimdLevel kLevels[] = {SimdLevel::scalar, SimdLevel::avx2, SimdLevel::avx512};
constexpr float kUlp = std::numeric_limits<float>::epsilon();  // 2^-23: one ULP relative to [1, 2)

std::vector<SimdLevel> supported_levels() {
  std::vector<SimdLevel> levels;
  for (SimdLevel level : kLevels) {
    if (simd_level_supported(level)) levels.push_back(level);
  }
  return levels;
}

std::uint32_t bits(float value) { return std::bit_cast<std::uint32_t>(value); }

// Master weights, moments and gradients for `count` elements, with `guard` extra elements after the
// end that must never change.
struct State {
  static constexpr std::int64_t kGuard = 17;
  static constexpr float kSentinel = 12345.5f;
  std::vector<float> master, first_moment, second_moment, gradient;
  std::int64_t count = 0;

  State(std::int64_t n, std::uint32_t seed) : count(n) {
    const auto size = static_cast<std::size_t>(n + kGuard);
    master.assign(size, kSentinel);
    first_moment.assign(size, kSentinel);
    second_moment.assign(size, kSentinel);
    gradient.assign(size, kSentinel);
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (std::int64_t i = 0; i < n; ++i) {
      const auto k = static_cast<std::size_t>(i);
      master[k] = normal(rng);
      first_moment[k] = 0.1f * normal(rng);
      second_moment[k] = 0.01f * std::abs(normal(rng));
      gradient[k] = normal(rng);
    }
  }
  void new_gradient(std::uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (std::int64_t i = 0; i < count; ++i) gradient[static_cast<std::size_t>(i)] = normal(rng);
  }
  AdamWSpan span(void* out = nullptr, DType dtype = DType::f32, bool decay = true) {
    return AdamWSpan{master.data(), first_moment.data(), second_moment.data(), gradient.data(), out, dtype, count, decay};
  }
  void expect_guards_untouched() const {
    for (std::int64_t i = count; i < count + kGuard; ++i) {
      const auto k = static_cast<std::size_t>(i);
      ASSERT_EQ(master[k], kSentinel) << "master written past the end at " << i;
      ASSERT_EQ(first_moment[k], kSentinel) << "first moment written past the end at " << i;
      ASSERT_EQ(second_moment[k], kSentinel) << "second moment written past the end at " << i;
    }
  }
};

void expect_bitwise_equal(const std::vector<float>& actual, const std::vector<float>& expected, std::int64_t count,
                          const std::string& what) {
  for (std::int64_t i = 0; i < count; ++i) {
    const auto k = static_cast<std::size_t>(i);
    ASSERT_EQ(bits(actual[k]), bits(expected[k])) << what << " differs at " << i << " of " << count << ": "
                                                  << actual[k] << " vs " << expected[k];
  }
}

void expect_states_equal(const State& actual, const State& expected, const std::string& what) {
  expect_bitwise_equal(actual.master, expected.master, expected.count, what + " master");
  expect_bitwise_equal(actual.first_moment, expected.first_moment, expected.count, what + " first moment");
  expect_bitwise_equal(actual.second_moment, expected.second_moment, expected.count, what + " second moment");
}

cpu::AdamWHyperparameters hyperparameters(const AdamWSettings& settings) {
  return {settings.learning_rate, settings.beta1, settings.beta2, settings.epsilon, settings.weight_decay};
}

AdamWSettings test_settings() {
  AdamWSettings settings;
  settings.learning_rate = 1e-2f;
  settings.beta1 = 0.9f;
  settings.beta2 = 0.95f;
  settings.epsilon = 1e-8f;
  settings.weight_decay = 0.1f;
  return settings;
}

CpuAdamOptions options_for(SimdLevel level, int threads, std::int64_t tile_elements = 1000) {
  CpuAdamOptions options;
  options.simd = level;
  options.threads = threads;
  options.tile_elements = tile_elements;  // not a multiple of 16: every tile ends in a partial vector
  return options;
}

std::string label(SimdLevel level, int threads, std::int64_t count) {
  return std::string(simd_level_name(level)) + " threads=" + std::to_string(threads) + " n=" + std::to_string(count);
}

TEST(SimdLevel, NamesParseAndTheBestLevelIsSupported) {
  for (SimdLevel level : kLevels) EXPECT_EQ(parse_simd_level(simd_level_name(level)), level);
  EXPECT_EQ(parse_simd_level("avx"), std::nullopt);
  EXPECT_EQ(parse_simd_level(""), std::nullopt);
  EXPECT_TRUE(simd_level_supported(SimdLevel::scalar));
  EXPECT_TRUE(simd_level_supported(best_simd_level()));
  if (simd_level_supported(SimdLevel::avx512)) {
    EXPECT_TRUE(simd_level_supported(SimdLevel::avx2));
  }
  EXPECT_FALSE(simd_level_supported(static_cast<SimdLevel>(7)));
  EXPECT_EQ(CpuAdam().simd(), best_simd_level());
}

TEST(CpuAdam, InvalidOptionsAndArgumentsThrow) {
  CpuAdamOptions negative_threads;
  negative_threads.threads = -1;
  EXPECT_THROW(CpuAdam{negative_threads}, std::invalid_argument);
  for (SimdLevel level : kLevels) {
    if (!simd_level_supported(level)) {
      EXPECT_THROW(CpuAdam{options_for(level, 1)}, std::invalid_argument);
    }
  }
  EXPECT_THROW(CpuAdam{options_for(static_cast<SimdLevel>(7), 1)}, std::invalid_argument);  // no such level
  EXPECT_THROW(CpuAdam{options_for(SimdLevel::scalar, 1, 0)}, std::invalid_argument);      // empty tiles

  CpuAdam adam(options_for(SimdLevel::scalar, 1));
  State state(10, 1);
  const AdamWSpan span = state.span();
  EXPECT_THROW(adam.step({&span, 1}, test_settings(), 0, 1.0f), std::invalid_argument);  // steps count from 1
  std::vector<std::int32_t> out(10);
  const AdamWSpan integer_output = state.span(out.data(), DType::i32);
  EXPECT_THROW(adam.step({&integer_output, 1}, test_settings(), 1, 1.0f), std::invalid_argument);
  AdamWSpan null_gradient = state.span();
  null_gradient.gradient = nullptr;
  EXPECT_THROW(adam.step({&null_gradient, 1}, test_settings(), 1, 1.0f), std::invalid_argument);
}

TEST(CpuAdam, ThreadsDefaultToTheCoresOfTheProcess) {
  EXPECT_EQ(CpuAdam().threads(), HostThreadPool::cores_in_process_cpuset());
  EXPECT_EQ(CpuAdam(options_for(SimdLevel::scalar, 3)).threads(), 3);
}

// The reference the whole engine already trains with: models/kernels/cpu/adamw.cpp. Odd lengths
// (scalar tails and masked vectors), tiles that split spans, 5 steps, bf16 output, and a gradient
// scale; on every supported level with 1 and 2 threads.
TEST(CpuAdam, BitwiseEqualToModelsAdamwUpdate) {
  const std::int64_t tile = 1000;
  const AdamWSettings settings = test_settings();
  for (SimdLevel level : supported_levels()) {
    for (int threads : {1, 2}) {
      CpuAdam adam(options_for(level, threads, tile));
      for (std::int64_t count : {std::int64_t{1}, std::int64_t{15}, std::int64_t{127}, std::int64_t{129}, tile + 1,
                                 std::int64_t{65537}}) {
        State ours(count, 7);
        State reference(count, 7);
        std::vector<std::uint16_t> ours_bf16(static_cast<std::size_t>(count)), reference_bf16(ours_bf16.size());
        for (std::int64_t step = 1; step <= 5; ++step) {
          ours.new_gradient(static_cast<std::uint32_t>(100 + step));
          reference.new_gradient(static_cast<std::uint32_t>(100 + step));
          const AdamWSpan span = ours.span(ours_bf16.data(), DType::bf16);
          adam.step({&span, 1}, settings, step, 0.75f);
          cpu::adamw_update(reference.master.data(), reference_bf16.data(), reference.gradient.data(),
                            reference.first_moment.data(), reference.second_moment.data(), count,
                            hyperparameters(settings), step, 0.75f);
        }
        const std::string what = label(level, threads, count);
        expect_states_equal(ours, reference, what);
        EXPECT_EQ(ours_bf16, reference_bf16) << what;
        ours.expect_guards_untouched();
      }
    }
  }
}

// Several spans of mixed sizes in one step, some without weight decay (models' kernel with
// weight_decay 0), each with its own output dtype.
TEST(CpuAdam, MixedSpansInOneStepMatchTheReferenceSpanBySpan) {
  const std::int64_t tile = 1 << 16;  // the default tile
  const std::vector<std::int64_t> counts = {1, 15, 127, 129, tile + 1, 3 * tile - 5, 16, 0, 1000};
  const AdamWSettings settings = test_settings();
  AdamWSettings no_decay = settings;
  no_decay.weight_decay = 0;
  for (SimdLevel level : supported_levels()) {
    for (int threads : {1, 2}) {
      CpuAdam adam(options_for(level, threads, tile));
      std::vector<State> ours, reference;
      std::vector<std::vector<float>> outputs;
      for (std::size_t s = 0; s < counts.size(); ++s) {
        ours.emplace_back(counts[s], static_cast<std::uint32_t>(s + 1));
        reference.emplace_back(counts[s], static_cast<std::uint32_t>(s + 1));
        outputs.emplace_back(static_cast<std::size_t>(counts[s]));
      }
      for (std::int64_t step = 1; step <= 3; ++step) {
        std::vector<AdamWSpan> spans;
        for (std::size_t s = 0; s < counts.size(); ++s) {
          ours[s].new_gradient(static_cast<std::uint32_t>(step * 31 + s));
          reference[s].new_gradient(static_cast<std::uint32_t>(step * 31 + s));
          spans.push_back(ours[s].span(outputs[s].data(), DType::f32, s % 2 == 0));
        }
        adam.step(spans, settings, step, 1.0f);
        for (std::size_t s = 0; s < counts.size(); ++s) {
          State& r = reference[s];
          cpu::adamw_update(r.master.data(), nullptr, r.gradient.data(), r.first_moment.data(),
                            r.second_moment.data(), r.count, hyperparameters(s % 2 == 0 ? settings : no_decay), step,
                            1.0f);
        }
      }
      for (std::size_t s = 0; s < counts.size(); ++s) {
        const std::string what = label(level, threads, counts[s]) + " span " + std::to_string(s);
        expect_states_equal(ours[s], reference[s], what);
        expect_bitwise_equal(outputs[s], reference[s].master, counts[s], what + " f32 output");
        ours[s].expect_guards_untouched();
      }
    }
  }
}

// Every supported level and thread count gives the scalar single-thread bits, for all three output
// dtypes. A level this CPU lacks is skipped by name.
class EveryLevel : public ::testing::TestWithParam<SimdLevel> {};

TEST_P(EveryLevel, IdenticalBitsToScalarForAnyThreadCount) {
  const SimdLevel level = GetParam();
  if (!simd_level_supported(level)) GTEST_SKIP() << simd_level_name(level) << " is not supported on this CPU/OS";
  const std::vector<std::int64_t> counts = {1, 15, 127, 129, 4097, 100003};
  for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    auto run = [&](SimdLevel run_level, int threads, std::vector<State>& states,
                   std::vector<std::vector<std::uint32_t>>& outputs) {
      CpuAdam adam(options_for(run_level, threads, 4096 + 3));
      for (std::int64_t step = 1; step <= 3; ++step) {
        std::vector<AdamWSpan> spans;
        for (std::size_t s = 0; s < states.size(); ++s) {
          states[s].new_gradient(static_cast<std::uint32_t>(step * 7 + s));
          spans.push_back(states[s].span(outputs[s].data(), dtype, s != 2));
        }
        adam.step(spans, test_settings(), step, 0.5f);
      }
    };
    auto fresh = [&](std::vector<State>& states, std::vector<std::vector<std::uint32_t>>& outputs) {
      for (std::size_t s = 0; s < counts.size(); ++s) {
        states.emplace_back(counts[s], static_cast<std::uint32_t>(s + 11));
        outputs.emplace_back(static_cast<std::size_t>(counts[s]), 0u);  // room for f32; 16-bit fill half
      }
    };
    std::vector<State> expected;
    std::vector<std::vector<std::uint32_t>> expected_out;
    fresh(expected, expected_out);
    run(SimdLevel::scalar, 1, expected, expected_out);
    for (int threads : {1, 2, 3}) {
      std::vector<State> actual;
      std::vector<std::vector<std::uint32_t>> actual_out;
      fresh(actual, actual_out);
      run(level, threads, actual, actual_out);
      for (std::size_t s = 0; s < counts.size(); ++s) {
        const std::string what = label(level, threads, counts[s]) + " " + std::string(dtype_name(dtype));
        expect_states_equal(actual[s], expected[s], what);
        EXPECT_EQ(actual_out[s], expected_out[s]) << what << " parameter output";
        actual[s].expect_guards_untouched();
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(CpuAdam, EveryLevel, ::testing::ValuesIn(kLevels),
                         [](const ::testing::TestParamInfo<SimdLevel>& level) {
                           return std::string(simd_level_name(level.param));
                         });

// Against AdamW in f64 from the same f32 inputs, where the f32 computation is well conditioned: each
// gradient keeps its sign over the steps and each parameter starts on the side its updates push it
// to, so no sum cancels. Every f32 operation then adds at most half an ULP of relative error, and a
// step chains ~10 of them, and the errors of the steps add up. Measured on every level (identical
// bits), max relative error in ULP of 2^-23 for master, m, v: step 1 0.90, 0.48, 0.85; steps 1-10
// 5.09, 2.25, 2.39. Bounds: <= 4 ULP after one step, <= 8 ULP over 10 steps.
TEST(CpuAdam, WithinFewUlpOfFloat64AdamW) {
  const std::int64_t count = 20000;
  const AdamWSettings settings = test_settings();
  for (SimdLevel level : supported_levels()) {
    State state(count, 3);
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> magnitude(0.1f, 2.0f);
    std::vector<float> sign(static_cast<std::size_t>(count));
    std::vector<double> p(sign.size()), m(sign.size()), v(sign.size());
    for (std::size_t i = 0; i < sign.size(); ++i) {
      sign[i] = (rng() & 1u) != 0 ? 1.0f : -1.0f;
      state.master[i] = -sign[i] * magnitude(rng);
      state.first_moment[i] = 0.0f;
      state.second_moment[i] = 0.0f;
      p[i] = state.master[i];
    }
    CpuAdam adam(options_for(level, 2));
    double worst_after_one[3] = {0, 0, 0};
    double worst_after_ten[3] = {0, 0, 0};
    for (std::int64_t step = 1; step <= 10; ++step) {
      for (std::size_t i = 0; i < sign.size(); ++i) state.gradient[i] = sign[i] * magnitude(rng);
      const AdamWSpan span = state.span();
      adam.step({&span, 1}, settings, step, 1.0f);
      const double lr = settings.learning_rate, b1 = settings.beta1, b2 = settings.beta2;
      const double bias_correction1 = 1 - std::pow(b1, static_cast<double>(step));
      const double bias_correction2 = 1 - std::pow(b2, static_cast<double>(step));
      for (std::size_t i = 0; i < sign.size(); ++i) {
        const double g = state.gradient[i];
        m[i] = b1 * m[i] + (1 - b1) * g;
        v[i] = b2 * v[i] + (1 - b2) * g * g;
        p[i] = p[i] * (1 - lr * settings.weight_decay) -
               lr / bias_correction1 * m[i] / (std::sqrt(v[i]) / std::sqrt(bias_correction2) + settings.epsilon);
        const double errors[3] = {std::abs(state.master[i] - p[i]) / std::abs(p[i]),
                                  std::abs(state.first_moment[i] - m[i]) / std::abs(m[i]),
                                  std::abs(state.second_moment[i] - v[i]) / std::abs(v[i])};
        for (int k = 0; k < 3; ++k) {
          if (step == 1) worst_after_one[k] = std::max(worst_after_one[k], errors[k] / kUlp);
          worst_after_ten[k] = std::max(worst_after_ten[k], errors[k] / kUlp);
        }
      }
    }
    std::printf("  %s: max relative error in ULP (master, m, v): step 1 %.2f %.2f %.2f; steps 1-10 %.2f %.2f %.2f\n",
                std::string(simd_level_name(level)).c_str(), worst_after_one[0], worst_after_one[1],
                worst_after_one[2], worst_after_ten[0], worst_after_ten[1], worst_after_ten[2]);
    for (int k = 0; k < 3; ++k) {
      EXPECT_LE(worst_after_one[k], 4.0) << simd_level_name(level) << " quantity " << k;
      EXPECT_LE(worst_after_ten[k], 8.0) << simd_level_name(level) << " quantity " << k;
    }
  }
}

// The optimizer keeps no step state: steps 1..k, a new CpuAdam, then k+1..k+n equals one run of
// 1..k+n, and both equal the reference (which recomputes beta^step with pow at each step).
TEST(CpuAdam, ResumedRunContinuesExactly) {
  const std::int64_t count = 3001, k = 7, n = 5;
  const AdamWSettings settings = test_settings();
  for (SimdLevel level : supported_levels()) {
    State straight(count, 9), resumed(count, 9), reference(count, 9);
    {
      CpuAdam adam(options_for(level, 2));
      for (std::int64_t step = 1; step <= k + n; ++step) {
        straight.new_gradient(static_cast<std::uint32_t>(step));
        const AdamWSpan span = straight.span();
        adam.step({&span, 1}, settings, step, 1.0f);
      }
    }
    {
      CpuAdam first(options_for(level, 1));
      for (std::int64_t step = 1; step <= k; ++step) {
        resumed.new_gradient(static_cast<std::uint32_t>(step));
        const AdamWSpan span = resumed.span();
        first.step({&span, 1}, settings, step, 1.0f);
      }
    }
    CpuAdam second(options_for(level, 2));
    for (std::int64_t step = k + 1; step <= k + n; ++step) {
      resumed.new_gradient(static_cast<std::uint32_t>(step));
      const AdamWSpan span = resumed.span();
      second.step({&span, 1}, settings, step, 1.0f);
    }
    for (std::int64_t step = 1; step <= k + n; ++step) {
      reference.new_gradient(static_cast<std::uint32_t>(step));
      cpu::adamw_update(reference.master.data(), nullptr, reference.gradient.data(), reference.first_moment.data(),
                        reference.second_moment.data(), count, hyperparameters(settings), step, 1.0f);
    }
    expect_states_equal(resumed, straight, std::string(simd_level_name(level)) + " resumed vs straight");
    expect_states_equal(straight, reference, std::string(simd_level_name(level)) + " straight vs reference");
  }
}

// Step 1000 read back from the update itself: with a zero gradient and no weight decay,
// p' - p = -step_size * m' / (sqrt(v') / sqrt(1 - beta2^1000) + eps), so step_size =
// -(p' - p) * denominator / m' must be lr / (1 - beta1^1000) (and at step 10, where beta1^10 still
// matters, lr / (1 - beta1^10)).
TEST(CpuAdam, BiasCorrectionAtALateStepUsesBetaToThatPower) {
  AdamWSettings settings;
  settings.learning_rate = 1e-3f;
  settings.beta1 = 0.9f;
  settings.beta2 = 0.999f;
  settings.epsilon = 1e-8f;
  settings.weight_decay = 0.0f;
  for (SimdLevel level : supported_levels()) {
    for (std::int64_t step : {std::int64_t{10}, std::int64_t{1000}}) {
      const std::int64_t count = 33;
      State state(count, 4);
      for (std::size_t i = 0; i < static_cast<std::size_t>(count); ++i) {
        state.master[i] = 1.0f;
        state.first_moment[i] = 0.5f;
        state.second_moment[i] = 0.25f;
        state.gradient[i] = 0.0f;
      }
      CpuAdam adam(options_for(level, 1));
      const AdamWSpan span = state.span();
      adam.step({&span, 1}, settings, step, 1.0f);
      const double b1 = settings.beta1, b2 = settings.beta2, lr = settings.learning_rate;
      const double expected_step_size = lr / (1 - std::pow(b1, static_cast<double>(step)));
      const double bias_correction2_sqrt = std::sqrt(1 - std::pow(b2, static_cast<double>(step)));
      for (std::size_t i = 0; i < static_cast<std::size_t>(count); ++i) {
        const double m = state.first_moment[i], v = state.second_moment[i];
        const double denominator = std::sqrt(v) / bias_correction2_sqrt + settings.epsilon;
        const double measured_step_size = -(static_cast<double>(state.master[i]) - 1.0) * denominator / m;
        // p' - p is rounded to an ULP of p (2^-24 at 1 - delta), about 1e-4 of the update of ~1e-3.
        EXPECT_NEAR(measured_step_size / expected_step_size, 1.0, 2e-4)
            << simd_level_name(level) << " step " << step << " element " << i;
      }
      if (step == 1000) {
        // At step 1000 beta1^1000 ~ 2e-46: the step size is lr, but beta2^1000 ~ 0.37 still divides v.
        EXPECT_NEAR(expected_step_size, lr, 1e-12);
        EXPECT_NEAR(bias_correction2_sqrt, 0.7951, 1e-4);
      }
    }
  }
}

// gradient_scale is applied to the gradient before anything else: scale 0.5 gives the bits of a
// gradient halved beforehand, on every level.
TEST(CpuAdam, GradientScaleIsFusedExactly) {
  const std::int64_t count = 4099;
  for (SimdLevel level : supported_levels()) {
    CpuAdam adam(options_for(level, 2));
    State scaled(count, 21), halved(count, 21);
    for (std::int64_t step = 1; step <= 3; ++step) {
      scaled.new_gradient(static_cast<std::uint32_t>(step));
      halved.new_gradient(static_cast<std::uint32_t>(step));
      for (std::int64_t i = 0; i < count; ++i) halved.gradient[static_cast<std::size_t>(i)] *= 0.5f;
      const AdamWSpan scaled_span = scaled.span();
      const AdamWSpan halved_span = halved.span();
      adam.step({&scaled_span, 1}, test_settings(), step, 0.5f);
      adam.step({&halved_span, 1}, test_settings(), step, 1.0f);
    }
    expect_states_equal(scaled, halved, std::string(simd_level_name(level)) + " scale 0.5");
  }
}

// Values whose bf16/f16 rounding is delicate: ties both ways, NaNs (quiet, signalling, payloads,
// negative), infinities, f32 subnormals, f16 subnormals and their ties, the f16 overflow boundary,
// plus random bit patterns.
std::vector<float> delicate_values() {
  std::vector<std::uint32_t> patterns = {
      0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00000u, 0x7f800001u, 0x7fbfffffu,
      0xff812345u, 0x7fffffffu, 0x00000001u, 0x807fffffu, 0x00400000u, 0x3f808000u, 0x3f818000u, 0x3f808001u,
      0x3f80ffffu, 0x3f817fffu, 0x7f7fffffu, 0xff7fffffu, 0x7f7f8000u, 0x7f7f7fffu, 0x33800000u, 0x33000000u,
      0x33000001u, 0x33c00000u, 0x38800000u, 0x387fe000u, 0x387ff000u, 0x387fefffu, 0x477fe000u, 0x477fefffu,
      0x477ff000u, 0x477ff001u, 0x3f801000u, 0x3f803000u, 0x3f802fffu, 0x3f801001u, 0xbf801000u, 0xc77ff000u};
  std::mt19937 rng(99);
  for (int i = 0; i < 20000; ++i) patterns.push_back(static_cast<std::uint32_t>(rng()));
  // Ties at the bf16 and f16 rounding points for random mantissas.
  for (int i = 0; i < 2000; ++i) {
    const auto base = static_cast<std::uint32_t>(rng());
    patterns.push_back((base & 0xffff0000u) | 0x8000u);
    patterns.push_back((base & 0xc7ffe000u) | 0x00001000u);
  }
  std::vector<float> values;
  for (std::uint32_t pattern : patterns) values.push_back(std::bit_cast<float>(pattern));
  return values;
}

// With lr = 0, no weight decay and zero moments and gradient, the step leaves every master value
// as it is (p + -0 * 0), NaN included (quieted), so the output is the conversion of that value.
TEST(CpuAdam, Bf16AndF16OutputsEqualTheEngineConversions) {
  const std::vector<float> values = delicate_values();
  const auto count = static_cast<std::int64_t>(values.size());
  AdamWSettings settings;
  settings.learning_rate = 0.0f;
  settings.weight_decay = 0.0f;
  for (SimdLevel level : supported_levels()) {
    for (DType dtype : {DType::bf16, DType::f16}) {
      State state(count, 1);
      for (std::size_t i = 0; i < values.size(); ++i) {
        state.master[i] = values[i];
        state.first_moment[i] = 0.0f;
        state.second_moment[i] = 0.0f;
        state.gradient[i] = 0.0f;
      }
      std::vector<std::uint16_t> out(values.size() + 16, 0xabcd);
      CpuAdam adam(options_for(level, 2));
      const AdamWSpan span = state.span(out.data(), dtype);
      adam.step({&span, 1}, settings, 1, 1.0f);
      for (std::size_t i = 0; i < values.size(); ++i) {
        const float p = state.master[i];
        if (!std::isnan(values[i])) {
          ASSERT_EQ(bits(p), bits(values[i])) << "the step moved element " << i;
        }
        const std::uint16_t expected = dtype == DType::bf16 ? float_to_bf16(p) : float_to_f16(p);
        ASSERT_EQ(out[i], expected) << simd_level_name(level) << " " << dtype_name(dtype) << " of 0x" << std::hex
                                    << bits(p);
      }
      for (std::size_t i = values.size(); i < out.size(); ++i) ASSERT_EQ(out[i], 0xabcd) << "written past the end";
    }
  }
}

// Sum of squares of gradient * unscale: within 1e-12 of a compensated f64 sum, bitwise the same for
// every thread count and level, and not finite exactly when some element is inf or NaN.
TEST(CpuAdam, CheckGradientsSumsDeterministicallyAndFindsInfAndNan) {
  const std::int64_t count = 1000003;
  std::vector<float> gradient(static_cast<std::size_t>(count));
  std::mt19937 rng(17);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (float& g : gradient) g = normal(rng);
  const float unscale = 1.0f / 1024.0f * 3.0f;

  double sum = 0, compensation = 0;  // Kahan-Babuska-Neumaier
  for (float g : gradient) {
    const auto x = static_cast<double>(g * unscale);
    const double term = x * x;
    const double total = sum + term;
    compensation += std::abs(sum) >= std::abs(term) ? (sum - total) + term : (term - total) + sum;
    sum = total;
  }
  const double reference = sum + compensation;

  const std::uint64_t expected_bits =
      std::bit_cast<std::uint64_t>(CpuAdam(options_for(SimdLevel::scalar, 1, 1 << 16)).check_gradients(gradient, unscale).sum_of_squares);
  for (SimdLevel level : supported_levels()) {
    for (int threads : {1, 2, 3}) {
      CpuAdam adam(options_for(level, threads, 1 << 16));
      const GradientCheck check = adam.check_gradients(gradient, unscale);
      EXPECT_TRUE(check.finite);
      EXPECT_NEAR(check.sum_of_squares / reference, 1.0, 1e-12) << label(level, threads, count);
      EXPECT_EQ(std::bit_cast<std::uint64_t>(check.sum_of_squares), expected_bits) << label(level, threads, count);

      for (std::int64_t odd : {1, 15, 127, 129, 65537}) {
        const std::span<const float> part(gradient.data(), static_cast<std::size_t>(odd));
        const GradientCheck scalar = CpuAdam(options_for(SimdLevel::scalar, 1, 1 << 16)).check_gradients(part, unscale);
        EXPECT_EQ(std::bit_cast<std::uint64_t>(adam.check_gradients(part, unscale).sum_of_squares),
                  std::bit_cast<std::uint64_t>(scalar.sum_of_squares))
            << label(level, threads, odd);
      }

      std::vector<float> bad = gradient;
      for (float poison : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                           std::numeric_limits<float>::quiet_NaN()}) {
        for (std::size_t where : {std::size_t{0}, std::size_t{77777}, gradient.size() - 1}) {
          bad[where] = poison;
          EXPECT_FALSE(adam.check_gradients(bad, unscale).finite) << poison << " at " << where;
          bad[where] = gradient[where];
        }
      }
      bad[5] = 1e30f;  // finite, but 1e30 * 1e10 overflows f32: the scaled gradient is inf
      EXPECT_TRUE(adam.check_gradients(bad, 1.0f).finite);
      EXPECT_FALSE(adam.check_gradients(bad, 1e10f).finite);
      const GradientCheck empty = adam.check_gradients({}, unscale);
      EXPECT_EQ(empty.sum_of_squares, 0.0);
      EXPECT_TRUE(empty.finite);
    }
  }
}

TEST(HostThreadPool, RunsEveryTaskOnceOnAnyThreadCount) {
  for (int threads : {1, 2, 4}) {
    HostThreadPool pool(threads, true);
    EXPECT_EQ(pool.threads(), threads);
    EXPECT_LE(pool.bound_workers(), threads - 1);
    if (pool.bound_workers() < threads - 1) std::printf("  binding note: %s\n", pool.binding_note().c_str());
    for (std::int64_t tasks : {0, 1, 2, 3, 1000}) {
      std::vector<std::atomic<int>> calls(static_cast<std::size_t>(tasks));
      pool.run(tasks, [&](std::int64_t i) { calls[static_cast<std::size_t>(i)].fetch_add(1); });
      for (std::int64_t i = 0; i < tasks; ++i) ASSERT_EQ(calls[static_cast<std::size_t>(i)].load(), 1) << i;
    }
  }
  EXPECT_EQ(HostThreadPool(0, false).threads(), HostThreadPool::cores_in_process_cpuset());
  EXPECT_THROW(HostThreadPool(-1, false), std::invalid_argument);
}

TEST(HostThreadPool, ATaskExceptionReachesTheCallerAndThePoolStaysUsable) {
  for (int threads : {1, 2, 3}) {
    HostThreadPool pool(threads, false);
    EXPECT_THROW(pool.run(100,
                          [](std::int64_t i) {
                            if (i == 42) throw std::runtime_error("task 42");
                          }),
                 std::runtime_error);
    std::atomic<std::int64_t> sum{0};
    pool.run(100, [&](std::int64_t i) { sum += i; });
    EXPECT_EQ(sum.load(), 4950);
  }
}

}  // namespace
}  // namespace ferry::offload
