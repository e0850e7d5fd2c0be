#include "engine/report/model_state_report.h"

#include <algorithm>
#include <cstdio>
#include <string>

#include "allocator/byte_size.h"

namespace ferry {
namespace {

// The optimizer's f32 bytes a parameter: AdamW's moments, and master weights for 16-bit parameters.
std::int64_t optimizer_state_bytes(DType parameter_dtype) { return parameter_dtype == DType::f32 ? 8 : 12; }
// The gradients are f32 whatever the parameters' dtype.
constexpr std::int64_t kGradientBytes = 4;

}  // namespace

OffloadedHostBytes offloaded_host_bytes(std::int64_t parameters, DType parameter_dtype, int zero_stage, int dp, bool parameters_offloaded) {
  const std::int64_t updated = zero_stage >= 1 ? (parameters + dp - 1) / dp : parameters;
  return {optimizer_state_bytes(parameter_dtype) * updated, kGradientBytes * updated,
          parameters_offloaded ? static_cast<std::int64_t>(dtype_size(parameter_dtype)) * updated : 0};
}

DeviceModelStates device_model_states(std::int64_t parameters, DType parameter_dtype, bool optimizer_offloaded, int zero_stage, int dp,
                                      bool parameters_offloaded) {
  const std::int64_t share = (parameters + dp - 1) / dp;
  const auto parameter_bytes = static_cast<std::int64_t>(dtype_size(parameter_dtype));
  return {parameters_offloaded ? 0 : parameter_bytes * (zero_stage >= 3 ? share : parameters),
          optimizer_offloaded ? 0 : kGradientBytes * (zero_stage >= 2 ? share : parameters),
          optimizer_offloaded ? 0 : optimizer_state_bytes(parameter_dtype) * (zero_stage >= 1 ? share : parameters)};
}

nlohmann::json model_state_report(const AllocatorStatistics& device_statistics, std::int64_t parameters, DType parameter_dtype,
                                  const std::string& optimizer_offload, int zero_stage, int dp, const nlohmann::json& memory_bound) {
  const bool offloaded = optimizer_offload != "none";
  const auto at_peak = [&](MemoryCategory category) { return device_statistics.category_allocated_at_peak[category_index(category)]; };
  const auto largest = [&](MemoryCategory category) { return device_statistics.category_allocated_bytes[category_index(category)].peak; };
  const auto psi = parameters;
  const auto parameter_bytes = static_cast<std::int64_t>(dtype_size(parameter_dtype));
  // The configuration ferry runs: its gradients are f32 whatever the parameters' dtype, so 16-bit
  // parameters come with 4 + 12 (fp32 master, m, v): 18 bytes per parameter, Megatron's figure for bf16
  // parameters with fp32 gradients (ZeRO's 16 assumes 16-bit gradients). In fp32 the parameters are the
  // master weights: 4 + 4 + 8 = 16.
  const std::int64_t gradient_bytes = kGradientBytes;
  const std::int64_t state_bytes = optimizer_state_bytes(parameter_dtype);
  const std::string per_parameter = std::to_string(parameter_bytes + gradient_bytes + state_bytes) + " bytes per parameter: " +
                                    std::string(dtype_name(parameter_dtype)) + " parameters, f32 gradients, " +
                                    (parameter_dtype == DType::f32 ? "f32 moments" : "f32 master weights and moments");
  // ZeRO partitions over dp ranks: stage 1 the optimizer state, stage 2 the gradients too (a rank's
  // share is ceil(Ψ/dp), before alignment and the buckets in flight): device_model_states.
  // ZeRO-Infinity's parameter offload: the partition lives on the host or NVMe, the device holds only
  // the gathered working set (the bound's, not the formula's).
  const bool parameters_offloaded = memory_bound.is_object() && memory_bound.contains("parameters") &&
                                    memory_bound["parameters"].value("offloaded", std::string("none")) != "none";
  const OffloadedHostBytes host = offloaded_host_bytes(psi, parameter_dtype, zero_stage, dp);
  const DeviceModelStates device = device_model_states(psi, parameter_dtype, offloaded, zero_stage, dp, parameters_offloaded);
  nlohmann::json formula = {
      {"parameters", device.parameters},
      {"gradients", device.gradients},
      {"optimizer_states", device.optimizer_states},
      {"host", offloaded ? nlohmann::json{{"optimizer_states", host.optimizer_states}, {"optimizer_states_on", optimizer_offload}, {"gradients", host.gradients}}
                         : nlohmann::json::object()},
      {"name", parameters_offloaded ? "ZeRO-Infinity (stage 3 over " + std::to_string(dp) + " ranks): " + std::string(dtype_name(parameter_dtype)) +
                                          " parameters / dp off the device (" + memory_bound["parameters"]["offloaded"].get<std::string>() +
                                          "), only the gathered layers on it"
               : offloaded ? "ZeRO-Offload (stage " + std::to_string(std::max(zero_stage, 2)) + (dp > 1 ? " over " + std::to_string(dp) + " ranks" : ", one rank") +
                               "): " + std::string(dtype_name(parameter_dtype)) + (zero_stage >= 3 ? " parameters / dp" : " parameters") + " on the device"
               : zero_stage > 0 ? "ZeRO stage " + std::to_string(zero_stage) + " over " + std::to_string(dp) + " ranks (" + per_parameter +
                                      (zero_stage == 1   ? ", the optimizer's / dp)"
                                       : zero_stage == 2 ? ", gradients and the optimizer's / dp)"
                                                         : ", parameters, gradients and the optimizer's / dp)")
                                : "no partitioning (" + per_parameter + ")"},
      {"bytes_per_parameter", offloaded ? parameter_bytes : parameter_bytes + gradient_bytes + state_bytes},
  };
  nlohmann::json report = {{"parameters", psi},
                            {"device_at_peak",
                             {{"parameters", at_peak(MemoryCategory::parameters)},
                              {"gradients", at_peak(MemoryCategory::gradients)},
                              {"optimizer_states", at_peak(MemoryCategory::optimizer_states)}}},
                            {"device_max",
                             {{"parameters", largest(MemoryCategory::parameters)},
                              {"gradients", largest(MemoryCategory::gradients)},
                              {"communication", largest(MemoryCategory::communication)}}},
                            {"formula", formula}};
  if (memory_bound.is_object()) report["bound"] = memory_bound;
  if (zero_stage == 3 && memory_bound.is_object() && memory_bound.contains("parameters")) {
    const std::int64_t largest_layer = memory_bound["parameters"]["largest_parameter_elements"].get<std::int64_t>();
    report["deepspeed_estimate"] = static_cast<std::int64_t>(
        deepspeed_zero3_estimate(static_cast<double>(psi), static_cast<double>(largest_layer), dp, offloaded, parameters_offloaded));
  }
  return report;
}

double deepspeed_zero3_estimate(double parameters, double largest_layer, double ranks, bool optimizer_offloaded, bool parameters_offloaded) {
  if (parameters_offloaded) return 4 * largest_layer;
  return 4 * largest_layer + (optimizer_offloaded ? 2 : 18) * parameters / ranks;
}

std::string describe_model_state_report(const nlohmann::json& report) {
  const nlohmann::json& device = report["device_at_peak"];
  const nlohmann::json& formula = report["formula"];
  std::string text = "  model states on the device at the peak, beside the formula for " +
                     std::to_string(report["parameters"].get<std::int64_t>()) + " parameters, " + formula["name"].get<std::string>() + ":";
  for (const char* category : {"parameters", "gradients", "optimizer_states"}) {
    char line[200];
    std::snprintf(line, sizeof line, "\n    %-17s %12s on the device | formula %12s", category,
                  format_bytes(device[category].get<std::size_t>()).c_str(), format_bytes(formula[category].get<std::size_t>()).c_str());
    text += line;
  }
  if (report.contains("bound")) {
    const nlohmann::json& gradients = report["bound"]["gradients"];
    const nlohmann::json& communication = report["bound"]["communication"];
    const auto bytes = [](const nlohmann::json& value) { return format_bytes(value.get<std::size_t>()); };
    std::string terms = gradients["flat"].get<std::int64_t>() > 0 ? "flat " + bytes(gradients["flat"]) : std::string();
    if (gradients["partition"].get<std::int64_t>() > 0) terms += "partition " + bytes(gradients["partition"]);
    if (gradients["buckets"].get<std::int64_t>() > 0) {
      terms += (terms.empty() ? "" : " + ") + gradients["buckets"].dump() + " buckets of " + bytes(gradients["bucket"]);
    }
    if (gradients["whole"].get<std::int64_t>() > 0) terms += (terms.empty() ? "" : " + ") + std::string("the tied table whole ") + bytes(gradients["whole"]);
    terms += (terms.empty() ? "" : " + ") + std::string("the model's pieces ") + bytes(gradients["model_pieces"]);
    text += "\n    gradients, most at once " + bytes(report["device_max"]["gradients"]) + " | bound " + bytes(gradients["total"]) + " = " + terms;
    text += "\n    communication, most at once " + bytes(report["device_max"]["communication"]) + " | bound " + bytes(communication["total"]) + " = " +
            communication["received_pieces"].dump() + " received pieces of " + bytes(communication["received_piece"]) +
            (communication.value("held_by_sink", 0) > 0 ? " (+ " + communication["held_by_sink"].dump() + " the host's staging slots hold)" : std::string()) +
            ", or the all-gather's bucket " + bytes(communication["allgather_bucket"]);
    if (report["bound"].contains("parameters")) {  // ZeRO 3
      const nlohmann::json& parameters = report["bound"]["parameters"];
      const std::string home = parameters.value("offloaded", std::string("none"));
      text += "\n    parameters, most at once " + bytes(report["device_max"]["parameters"]) + " | bound " + bytes(parameters["total"]) +
              " = partition " + bytes(parameters["partition"]) + (home != "none" ? " (it lives on " + home + ")" : std::string()) + " + gathered " + bytes(parameters["gathered"]) + " (blocks of " +
              bytes(parameters["block"]) + (parameters["reshard_after_forward"].get<bool>() ? ": the layer running and the next one's prefetch)"
                                                                                          : ": every block kept from forward to backward, and the head's)");
      const auto states = report["device_at_peak"]["parameters"].get<std::int64_t>() + report["device_at_peak"]["gradients"].get<std::int64_t>() +
                          report["device_at_peak"]["optimizer_states"].get<std::int64_t>();
      text += "\n    model states at the peak " + format_bytes(static_cast<std::size_t>(states)) + " | DeepSpeed's stage-3 estimator " +
              bytes(report["deepspeed_estimate"]) + " (4 x the largest layer" +
              (parameters.value("offloaded", std::string("none")) != "none"            ? std::string(": parameters offloaded)")
               : report["formula"]["host"].contains("optimizer_states") ? std::string(" + 2 x parameters / dp)")
                                                                       : std::string(" + 18 x parameters / dp)"));
    }
  }
  if (report["formula"]["host"].contains("optimizer_states")) {
    text += "\n    (the gradients on the device are one bucket at a time, at most " +
            format_bytes(report["device_max"]["gradients"].get<std::size_t>()) + "; " +
            format_bytes(formula["host"]["optimizer_states"].get<std::size_t>()) + " of optimizer state " +
            (formula["host"].value("optimizer_states_on", std::string("cpu")) == "nvme" ? "on NVMe" : "on the host") + ", " +
            format_bytes(formula["host"]["gradients"].get<std::size_t>()) + " of fp32 gradients on the host)";
  }
  return text;
}

}  // namespace ferry
