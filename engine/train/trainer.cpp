#include "engine/train/trainer.h"
#include "engine/core/bounded_json.h"

#include <cstdio>
#include <new>
#include <optional>

#include "engine/checkpoint/checkpoint_directory.h"
#include "engine/comm/host_staged_communicator.h"
#include "engine/core/safetensors.h"
#include "engine/train/evaluation.h"
#include "engine/train/job_agreement.h"
#include "engine/train/model_config.h"
#include "engine/train/rank_training.h"
#include "engine/train/run_summary.h"
#include "engine/train/training_plan.h"
#include "engine/train/training_setup.h"
#include "models/gpt_model.h"
#include "models/gpt_weights.h"
#include "models/kernels/cpu/compute_threads.h"

namespace ferry {

nlohmann::json run_training(const TrainOptions& options, const MemoryAdvisor& advisor) {
  TrainOptions o = options;
  if (!o.resume.empty()) o.resume = resolve_checkpoint(o.resume);  // a --save root: the checkpoint its `latest` names
  const RankEnvironment environment = detect_rank_environment();
  TrainingPlan plan = make_training_plan(o, environment);
  plan.io.memory_advisor = advisor;
  warn_about_device_memory(plan, environment);
  if (plan.simulated_ranks()) {
    // A dry run of every rank in this process: each runs the same loop on meta over groups that move nothing.
    std::optional<PipelineLayoutChoice> layout;  // a pipeline's split, chosen once for every rank
    if (plan.grid.pp > 1) layout = choose_grid_layout(plan, !plan.io.quiet);
    nlohmann::json summary = simulate_every_rank(plan, layout ? &*layout : nullptr);
    if (!plan.io.quiet) print_training_result(summary);
    return summary;
  }
  if (plan.world == 1) {
    // A dry run's groups move nothing (on meta there is nothing to move, not even a one-rank copy); one
    // GPU's collectives (ZeRO's at dp 1) copy device memory, which the single-rank communicator cannot.
    const std::unique_ptr<Communicator> single = make_single_rank_communicator();
    const bool gpu = plan.device == DeviceKind::cuda && !plan.dry_run;
    if (gpu && plan.zero_stage > 0 && !nccl_backend_built()) {
      throw std::invalid_argument("--zero-stage " + std::to_string(plan.zero_stage) + " on one GPU: this ferry was built without NCCL, and "
                                  "with it without the device-buffer communicators ZeRO's partitions use; use --zero-stage 0, or a build with NCCL");
    }
    const std::unique_ptr<Communicator> one_gpu = gpu && nccl_backend_built() ? make_host_staged_communicator(*single) : nullptr;
    nlohmann::json summary = train_on_grid(
        plan, plan.dry_run ? ProcessGrid::dry_run(plan.grid, 0) : ProcessGrid::split(one_gpu ? *one_gpu : *single, plan.grid), nullptr);
    merge_rank_entries(summary, summary["ranks"]);
    if (!plan.io.quiet) print_training_result(summary);
    return summary;
  }
  const std::unique_ptr<Communicator> world = make_communicator();
  nlohmann::json summary;
  std::vector<std::string> gathered;
  try {
    require_same_job(*world, plan);  // before any other collective: a rank with other settings would mismatch them
    // A cuda job's groups are NCCL's (device buffers by NCCL, host values by MPI underneath); the world
    // stays the bootstrap, and outlives them.
    if (plan.device == DeviceKind::cuda && !nccl_backend_built()) {
      throw std::invalid_argument("--device cuda on " + std::to_string(plan.world) + " ranks: this ferry was built without NCCL (it needs CUDA "
                                  "and NCCL 2.10 or newer when configured); use --device cpu, or one GPU without a launcher");
    }
    const std::unique_ptr<Communicator> nccl_world = plan.device == DeviceKind::cuda ? make_cuda_communicator(*world) : nullptr;
    summary = train_on_grid(plan, ProcessGrid::split(nccl_world ? *nccl_world : *world, plan.grid), nullptr);
    gathered = world->gather_strings(json_text(summary["ranks"][0]), 0);
  } catch (const std::exception& error) {
    // The other ranks would wait on this one in their next collective: end the whole job with the reason.
    std::fflush(stdout);
    const bool out_of_host_memory = dynamic_cast<const std::bad_alloc*>(&error) != nullptr;
    const std::string rank = "rank " + std::to_string(world->rank()) + " of " + std::to_string(world->size()) + ": ";
    const std::string what = out_of_host_memory ? "this machine ran out of host memory (RAM); use smaller sizes or fewer ranks per machine" : error.what();
    std::fprintf(stderr, "ferry: error: %s\n", (what.starts_with(rank) ? what : rank + what).c_str());  // once, where the error named it
    std::fflush(stderr);
    world->abort(1);
  }
  if (world->rank() != 0) return nullptr;  // rank 0 writes the summary
  nlohmann::json ranks = nlohmann::json::array();
  for (const std::string& entry : gathered) ranks.push_back(nlohmann::json::parse(entry));
  merge_rank_entries(summary, std::move(ranks));
  if (!plan.io.quiet) print_training_result(summary);
  return summary;
}

nlohmann::json run_evaluation(const EvalOptions& o) {
  cpu::set_compute_threads(o.threads);
  const DType dtype = parse_precision(o.precision);
  TrainOptions shape;
  shape.init_from = o.init_from;
  shape.heads = o.heads;
  const GptConfig config = resolve_model_config(shape);
  const std::int64_t sequence = o.seq.value_or(config.max_sequence);
  require_positive(o.batch, "--batch");
  if (sequence > config.max_sequence) throw std::invalid_argument("--seq exceeds the model's " + std::to_string(config.max_sequence) + " positions");
  if (o.batches < 0) throw std::invalid_argument("--batches must be >= 0 (0: the whole data)");
  const std::unique_ptr<Device> device = make_training_device(o.device, o.device_memory);
  const TokenDataset data = open_training_data(o.data);
  check_vocabulary(data, config);
  GptModel model(*device, config, dtype);
  if (device->has_storage()) load_gpt_parameters(SafetensorsFile(o.init_from), model.parameters());
  const EvaluationResult evaluation = evaluate_loss(*device, model, data, o.batch, sequence, o.batches);
  const double loss = evaluation.loss;
  const std::int64_t batches = evaluation.batches;
  std::printf("ferry eval: %s on %s: mean loss %.6f over %lld micro-batches of %lld x %lld tokens\n", o.init_from.c_str(),
              data.name().c_str(), loss, static_cast<long long>(batches), static_cast<long long>(o.batch), static_cast<long long>(sequence));
  return {{"command", "eval"},
          {"model", {{"name", config.name}, {"parameters", config.parameter_count()}}},
          {"data", data.name()},
          {"batches", batches},
          {"micro_batch", o.batch},
          {"seq", sequence},
          {"loss", loss},
          {"memory", memory_summary(*device, nlohmann::json::object())}};
}

}  // namespace ferry
