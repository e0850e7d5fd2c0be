// Runs one micro-batch through ferry's GPT (fp32 or bf16, cpu) and writes the loss and every parameter's
// gradient (Hugging Face names) to a safetensors file, for gpt2_parity_test.py to compare with PyTorch
// (bf16: with torch.autocast's).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/core/safetensors.h"
#include "engine/data/token_data.h"
#include "engine/train/training_step.h"
#include "models/gpt_model.h"
#include "models/gpt_weights.h"

int main(int argc, char** argv) {
  CLI::App app{"ferry GPT gradient probe"};
  std::string weights, data, out, precision = "fp32";
  std::int64_t batch = 0, sequence = 0;
  app.add_option("--init-from", weights)->required();
  app.add_option("--data", data)->required();
  app.add_option("--batch", batch)->required();
  app.add_option("--seq", sequence)->required();
  app.add_option("--out", out)->required();
  app.add_option("--precision", precision, "fp32 | bf16 (parameters rounded to bf16, activations and their gradients in bf16)");
  CLI11_PARSE(app, argc, argv);
  try {
    const auto config = ferry::read_hf_gpt_config_beside(weights);
    if (!config) throw std::invalid_argument("no config.json beside " + weights);
    const auto device = ferry::create_device(ferry::DeviceOptions{});
    if (precision != "fp32" && precision != "bf16") throw std::invalid_argument("--precision '" + precision + "' is not fp32 or bf16");
    ferry::GptModel model(*device, *config, precision == "bf16" ? ferry::DType::bf16 : ferry::DType::f32);
    ferry::load_gpt_parameters(ferry::SafetensorsFile(weights), model.parameters());
    const ferry::TokenDataset dataset = ferry::TokenDataset::open(data);
    ferry::DataLoader loader(dataset, batch, sequence, false, 0);
    std::vector<std::int32_t> inputs, targets;
    loader.next(inputs, targets);
    model.zero_gradients();
    const float loss = static_cast<float>(model.train_micro_batch(ferry::device_tokens(*device, inputs, batch, sequence, "tokens"),
                                                              ferry::device_tokens(*device, targets, batch, sequence, "targets"), ferry::MicroBatchKey{}, 1.0f));
    ferry::SafetensorsWriter writer;
    writer.add("loss", ferry::DType::f32, {1}, &loss);
    std::vector<std::vector<float>> host;
    const auto gradients = model.gradients().named();
    host.reserve(gradients.size());
    for (const ferry::NamedTensor& each : gradients) {
      host.emplace_back(static_cast<std::size_t>(each.tensor->numel()));
      each.tensor->copy_to_host(host.back().data());
      writer.add(each.name, ferry::DType::f32, each.tensor->shape(), host.back().data());
    }
    writer.write(out);
    std::printf("loss %.9g\n", static_cast<double>(loss));
  } catch (const std::exception& error) {
    std::fprintf(stderr, "gpt_gradient_probe: error: %s\n", error.what());
    return 1;
  }
  return 0;
}
