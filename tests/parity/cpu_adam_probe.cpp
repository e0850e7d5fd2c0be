// cpu_adam_probe: runs CpuAdam for the PyTorch parity test (cpu_adam_parity_test.py). Reads raw
// little-endian f32 files from --dir: master.bin (count values) and gradients.bin (steps x count,
// one step's gradient after another); steps with m = v = 0 at the start, and writes master_out.bin,
// first_moment_out.bin and second_moment_out.bin beside them.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

#include "offload/cpu_adam.h"
#include "offload/simd_level.h"

namespace {

std::vector<float> read_floats(const std::string& path, std::size_t count) {
  std::ifstream file(path, std::ios::binary);
  std::vector<float> values(count);
  file.read(reinterpret_cast<char*>(values.data()), static_cast<std::streamsize>(count * sizeof(float)));
  if (!file || file.peek() != std::char_traits<char>::eof()) {
    throw std::runtime_error(path + ": expected exactly " + std::to_string(count) + " f32 values");
  }
  return values;
}

void write_floats(const std::string& path, const std::vector<float>& values) {
  std::ofstream file(path, std::ios::binary);
  file.write(reinterpret_cast<const char*>(values.data()), static_cast<std::streamsize>(values.size() * sizeof(float)));
  if (!file) throw std::runtime_error("cannot write " + path);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("Steps CpuAdam over raw f32 files for the PyTorch parity test");
  std::string dir, simd = std::string(ferry::offload::simd_level_name(ferry::offload::best_simd_level()));
  std::int64_t count = 0, steps = 0;
  int threads = 1;
  float gradient_scale = 1.0f;
  ferry::offload::AdamWSettings settings;
  app.add_option("--dir", dir, "folder with master.bin and gradients.bin")->required();
  app.add_option("--count", count, "elements")->required();
  app.add_option("--steps", steps, "AdamW steps, numbered from 1")->required();
  app.add_option("--lr", settings.learning_rate);
  app.add_option("--beta1", settings.beta1);
  app.add_option("--beta2", settings.beta2);
  app.add_option("--eps", settings.epsilon);
  app.add_option("--weight-decay", settings.weight_decay);
  app.add_option("--gradient-scale", gradient_scale);
  app.add_option("--simd", simd, "scalar | avx2 | avx512");
  app.add_option("--threads", threads);
  CLI11_PARSE(app, argc, argv);
  try {
    const auto level = ferry::offload::parse_simd_level(simd);
    if (!level) throw std::invalid_argument("unknown --simd " + simd);
    const auto n = static_cast<std::size_t>(count);
    std::vector<float> master = read_floats(dir + "/master.bin", n);
    const std::vector<float> gradients = read_floats(dir + "/gradients.bin", n * static_cast<std::size_t>(steps));
    std::vector<float> first_moment(n, 0.0f), second_moment(n, 0.0f);
    ferry::offload::CpuAdamOptions options;
    options.simd = *level;
    options.threads = threads;
    ferry::offload::CpuAdam adam(options);
    for (std::int64_t step = 1; step <= steps; ++step) {
      const ferry::offload::AdamWSpan span{master.data(), first_moment.data(), second_moment.data(),
                                           gradients.data() + static_cast<std::size_t>(step - 1) * n,
                                           nullptr, ferry::DType::f32, count, true};
      adam.step({&span, 1}, settings, step, gradient_scale);
    }
    write_floats(dir + "/master_out.bin", master);
    write_floats(dir + "/first_moment_out.bin", first_moment);
    write_floats(dir + "/second_moment_out.bin", second_moment);
  } catch (const std::exception& error) {
    std::cerr << "cpu_adam_probe: " << error.what() << "\n";
    return 1;
  }
  return 0;
}
