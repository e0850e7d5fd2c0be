#include "engine/train/pipeline_trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <thread>

#include "allocator/byte_size.h"
#include "engine/comm/communicator.h"
#include "engine/core/safetensors.h"
#include "engine/train/learning_rate.h"
#include "allocator/allocator_errors.h"
#include "engine/train/metrics_file.h"
#include "engine/train/model_config.h"
#include "engine/train/pipeline_advice.h"
#include "engine/train/pipeline_layout.h"
#include "engine/train/pipeline_step.h"
#include "engine/pipeline/pipeline_transports.h"
#include "engine/train/progress.h"
#include "engine/train/trainer.h"
#include "engine/train/training_profile.h"
#include "engine/train/training_setup.h"
#include "engine/train/training_step.h"
#include "models/gpt_weights.h"
#include "models/kernels/cpu/compute_threads.h"
#include "schedule/pipeline_lowering.h"
#include "schedule/pipeline_simulator.h"

namespace ferry {
namespace {

using Clock = std::chrono::steady_clock;

// The summary's simulation: a backward costs two forwards (input and weight gradients, one each), the
// same for every schedule so that their bubbles compare; Zero Bubble moves the weight part. Interleaved
// virtual stages cost 1/V each.
constexpr PipelineCosts kUnitCosts{1.0, 1.0, 1.0, 0.0};

std::int64_t micro_batch_count(const TrainOptions& o) {
  if (o.micro_batches && o.grad_accum != 1 && *o.micro_batches != o.grad_accum) {
    throw std::invalid_argument("--micro-batches " + std::to_string(*o.micro_batches) + " and --grad-accum " + std::to_string(o.grad_accum) +
                                " disagree: a pipeline step runs --micro-batches micro-batches (give one of the two)");
  }
  const std::int64_t count = o.micro_batches.value_or(o.grad_accum);
  if (count < 1) throw std::invalid_argument("--micro-batches must be >= 1, got " + std::to_string(count));
  return count;
}

void reject_unsupported(const TrainOptions& o) {
  auto refuse = [](bool used, const char* what) {
    if (used) throw std::invalid_argument(std::string(what) + " is not supported with --pp yet: run it without pipeline parallelism");
  };
  refuse(!o.save.empty() || !o.resume.empty(), "--save/--resume (checkpoints of pipeline stages)");
  refuse(o.exit_interval.has_value(), "--exit-interval (it stops to save a checkpoint)");
  refuse(!o.eval_data.empty(), "--eval-data (validation loss through the stages)");
  // The stages exchange activations and tied-embedding gradients through host pointers (MPI, or memcpy
  // in one process); device-to-device transfers (NCCL, CUDA-aware MPI) are not built.
  refuse(o.device == "cuda", "--device cuda (stage-to-stage transfers of GPU tensors)");
  refuse(o.precision == "fp16", "--precision fp16 (one loss scale agreed across stages)");
  if (o.pipeline_stages < 1) throw std::invalid_argument("--pp must be >= 1, got " + std::to_string(o.pipeline_stages));
}

// One rank's parts: its device, model, optimizer, transport and executor.
struct PipelineRank {
  std::int32_t index = 0;
  std::unique_ptr<Device> device;
  std::unique_ptr<TrainingProfile> profile;  // --profile DIR/rank-R, or on a failure ferry-oom-profile/rank-R
  std::unique_ptr<GptModel> model;
  std::unique_ptr<TrainingOptimizer> optimizer;
  std::unique_ptr<PipelineTransport> transport;
  std::unique_ptr<PipelineRankExecutor> executor;
};

struct PipelinePlan {
  PipelineSchedule schedule;  // lowered
  PipelineCosts costs;        // unit costs per rank's blocks
  std::vector<StageBlocks> stage_blocks;
  PipelineSimulation simulation;
};

// ZeRO-Offload for one rank: its own NVMe directory (DIR/rank-R) and its share of the cores.
offload::ZeroOffloadSettings rank_offload_settings(const TrainOptions& o, std::int32_t rank, int threads) {
  offload::ZeroOffloadSettings settings = offload_settings(o);
  if (!settings.nvme_path.empty()) settings.nvme_path += "/rank-" + std::to_string(rank);
  settings.adam.threads = threads;
  return settings;
}

nlohmann::json rank_summary(const PipelineRank& rank, const PipelinePlan& plan) {
  const std::int32_t r = rank.executor->setup().rank;
  nlohmann::json stages = nlohmann::json::array();
  for (std::int32_t stage = 0; stage < plan.schedule.stages; ++stage) {
    if (plan.schedule.rank_of_stage(stage) == r) stages.push_back(stage);
  }
  const nlohmann::json optimizer = rank.optimizer->describe();
  const nlohmann::json memory = memory_summary(*rank.device, optimizer);
  // The prediction: the simulator replays the rank's actions with what one micro-batch keeps on each of
  // its stages (measured on the stage's first F and W).
  const PipelineStashMeasure& stash = rank.executor->stash();
  const PipelineSimulation replay = simulate_pipeline_schedule(plan.schedule, plan.costs, stage_memory(stash, plan.schedule.stages));
  const std::int64_t predicted = replay.rank_peak_activation_bytes.at(static_cast<std::size_t>(r));
  nlohmann::json per_stage = nlohmann::json::array();
  for (const StageStashBytes& stage : stash.stages) {
    per_stage.push_back({{"stage", stage.stage}, {"forward", stage.forward}, {"kept_for_weight", stage.kept_for_weight}});
  }
  return {{"rank", r}, {"stage", stages.front()}, {"stages", stages},
          {"peak_allocated", memory["peak_allocated"]}, {"peak_reserved", memory["peak_reserved"]},
          {"max_by_category", memory["max_by_category"]}, {"at_peak", memory["at_peak"]},
          {"host_pinned_peak", memory["host_pinned_peak"]}, {"nvme_bytes", memory["nvme_bytes"]}, {"num_ooms", memory["num_ooms"]},
          {"num_alloc_retries", memory["num_alloc_retries"]}, {"optimizer", optimizer},
          {"activation_stash",
           {{"one_micro_batch", stash.after_first_forward}, {"peak", stash.peak}, {"predicted_peak", predicted}, {"stages", per_stage}}}};
}

// The whole job's host and NVMe bytes and allocator failures: every rank's together.
std::int64_t sum_over(const nlohmann::json& rank_entries, const char* key) {
  std::int64_t sum = 0;
  for (const nlohmann::json& entry : rank_entries) sum += entry[key].get<std::int64_t>();
  return sum;
}

nlohmann::json train_pipeline(const TrainOptions& o, Communicator& communicator, const PipelineLayout* given_layout);

// Each rank's peak reserved bytes in an in-process dry run of every stage of `layout` on meta (every
// rank computes the same choices from them).
std::vector<std::int64_t> dry_run_stages(const TrainOptions& o, const PipelineLayout& layout) {
  TrainOptions dry = o;
  dry.device = "meta";
  dry.device_memory = "1024TiB";  // a dry run measures; it does not enforce a limit
  dry.steps = 1;
  dry.quiet = true;
  dry.profile.clear();
  dry.metrics.clear();
  dry.checkpointing = layout.policy.name();
  if (dry.offload_optimizer == "nvme") dry.offload_optimizer = "cpu";  // the same device memory, nothing written
  dry.nvme_path.clear();
  const nlohmann::json summary = train_pipeline(dry, *make_single_rank_communicator(), &layout);
  std::vector<std::int64_t> peaks;
  for (const nlohmann::json& rank : summary["ranks"]) peaks.push_back(rank["peak_reserved"].get<std::int64_t>());
  return peaks;
}

// The error of a pipeline that ran out of device memory, as for one rank: where (rank and step), the
// failing rank's profile up to the failure (saved), and what would fit, by dry runs of every stage.
std::string describe_pipeline_out_of_memory(const TrainOptions& o, const RecomputePolicy& policy, std::vector<PipelineRank>& local,
                                            std::int64_t step, const OutOfMemoryError& error, const PipelineShape& shape) {
  std::string ranks, directories;
  for (PipelineRank& rank : local) {
    if (rank.device->allocator().statistics().num_ooms == 0) continue;
    ranks += (ranks.empty() ? "" : ", ") + std::to_string(rank.index);
    directories += (directories.empty() ? "" : " ") + rank.profile->save_failure(error.what());
  }
  TrainOptions current = o;
  current.checkpointing = policy.name();  // alternatives against the configuration that ran
  const std::size_t limit = local.front().device->memory_limit();
  const MemoryAdvice advice = advise_pipeline_memory(current, shape.config.layers, limit, [&](const TrainOptions& variant) {
    const PipelineLayoutChoice choice =
        choose_pipeline_layout(variant, shape, false, [&](const PipelineLayout& candidate) { return dry_run_stages(variant, candidate); });
    const std::vector<std::int64_t> peaks = dry_run_stages(variant, choice.layout);
    return *std::max_element(peaks.begin(), peaks.end());
  });
  return "out of device memory on pipeline rank " + ranks +
         (step == 0 ? std::string(" while building its stages") : " in step " + std::to_string(step)) + ": " + error.what() + "\n" +
         describe_memory_advice(advice, limit) + "\nthe memory profile up to the failure is in " + directories + ": run `ferry report " +
         directories + "`";
}

// `given_layout`: the dry runs' (no choice made); null: chosen here.
nlohmann::json train_pipeline(const TrainOptions& o, Communicator& communicator, const PipelineLayout* given_layout) {
  const int world = communicator.size();
  const std::int32_t ranks = o.pipeline_stages;
  if (world > 1 && world != ranks) {
    throw std::invalid_argument("launched as " + std::to_string(world) + " ranks for --pp " + std::to_string(ranks) +
                                ": launch `mpirun -np " + std::to_string(ranks) + "` (one rank per stage; data parallelism with pipelines is not built yet)");
  }
  const bool in_process = world == 1;
  const int threads = o.threads > 0 ? o.threads : std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / world);
  cpu::set_compute_threads(threads);
  try {
    const DType dtype = parse_precision(o.precision);
    const GptConfig config = resolve_model_config(o);
    const std::int64_t sequence = o.seq.value_or(config.max_sequence);
    if (sequence > config.max_sequence) throw std::invalid_argument("--seq exceeds the model's " + std::to_string(config.max_sequence) + " positions");
    check_pipeline_tags(std::int64_t{ranks} * pipeline_stages_per_rank(o.schedule), micro_batch_count(o), communicator.max_tag());
    const auto micro_batches = static_cast<std::int32_t>(micro_batch_count(o));
    const OptimizerSettings hyper = resolve_new_run_settings(o.optimizer, o.steps);  // pipelines refuse --resume
    PipelinePlan plan;
    const PipelineSchedule compute = generate_pipeline_schedule(o.schedule, ranks, micro_batches);
    PipelineCosts& costs = plan.costs;  // per rank's share of the blocks: a virtual stage costs 1/V of it
    costs = kUnitCosts;
    const double chunks = compute.stages_per_rank();
    costs.forward /= chunks;
    costs.backward /= chunks;
    costs.weight /= chunks;
    plan.schedule = lower_pipeline_communication(compute, costs);  // receives placed where they delay least
    if (const ScheduleValidation validation = validate_pipeline_schedule(plan.schedule); !validation.ok()) {
      throw std::logic_error("the " + o.schedule + " schedule failed validation: " + validation.problems.front());
    }
    plan.simulation = simulate_pipeline_schedule(plan.schedule, costs);
    const TokenDataset data = open_training_data(o.data);
    check_vocabulary(data, config);
    const bool writes_summary = communicator.rank() == 0;
    const bool prints = writes_summary && !o.quiet;
    const PipelineLayoutChoice layout =
        given_layout != nullptr ? PipelineLayoutChoice{*given_layout, nullptr}
                                : choose_pipeline_layout(o, PipelineShape{config, sequence, plan.schedule.stages, ranks}, prints,
                                                         [&](const PipelineLayout& candidate) { return dry_run_stages(o, candidate); });
    const RecomputePolicy& policy = layout.layout.policy;
    plan.stage_blocks = layout.layout.stage_blocks;
    const std::vector<ActivationKeep> keeps = activation_keeps(policy, config.layers);
    const GptDropout dropout{o.dropout, o.dropout, o.dropout};
    const cpu::AdamWHyperparameters hyperparameters = hyper.adamw();

    const bool offloaded = o.offload_optimizer != "none";
    std::vector<PipelineRank> local;  // the ranks this process runs
    PipelineMailbox mailbox;          // after `local`: its tensors go before their devices do
    nlohmann::json steps = nlohmann::json::array();
    std::vector<double> throughputs;
    double last_loss = std::nan("");
    std::int64_t current_step = 0;  // 0 while the stages are built
    try {
      for (std::int32_t r = in_process ? 0 : communicator.rank(); r < (in_process ? ranks : communicator.rank() + 1); ++r) {
        PipelineRank rank;
        rank.device = make_training_device(o.device, o.device_memory);
        if (!in_process && !rank.device->has_storage()) {
          throw std::invalid_argument("--device meta under mpirun: a dry run of a pipeline runs in one process (drop mpirun)");
        }
        // Every rank records its profile: written to --profile DIR/rank-R, or on a failure to
        // ferry-oom-profile/rank-R.
        const std::string rank_directory = "/rank-" + std::to_string(r);
        rank.profile = std::make_unique<TrainingProfile>(
            *rank.device, o.profile.empty() ? std::string() : o.profile + rank_directory, ProfileSteps::parse(o.profile_steps),
            nlohmann::json{{"command", "train"}, {"model", config.name}, {"parameters", config.parameter_count()}, {"device", o.device},
                           {"precision", o.precision}, {"micro_batch", o.batch}, {"seq", sequence}, {"grad_accum", micro_batches},
                           {"checkpointing", policy.name()}, {"pipeline_rank", r}, {"schedule", o.schedule}, {"pp", ranks}},
            TrainingProfile::kFailureDirectory + rank_directory);
        rank.index = r;
        local.push_back(std::move(rank));  // now: an out-of-memory while building keeps the rank's profile
        PipelineRank& built = local.back();
        built.model = std::make_unique<GptModel>(*built.device, config, dtype, dropout, offloaded ? GradientStorage::streamed : GradientStorage::whole,
                                                pipeline_rank_part(plan.schedule, r, plan.stage_blocks, config.layers));
        built.model->set_loss_chunk(o.loss_chunk);
        built.model->set_gradient_bucket_elements(o.reduce_bucket_size.value_or(0));
        built.model->set_weight_copy_elements(o.weight_copy_elements);
        if (o.init_from.empty()) {
          initialize_gpt_parameters(built.model->parameters(), config, o.seed);
        } else {
          if (built.device->has_storage()) load_gpt_parameters(SafetensorsFile(o.init_from), built.model->parameters());
        }
        built.optimizer = !offloaded                    ? make_device_optimizer(*built.model, hyperparameters)
                         : built.device->has_storage() ? make_offload_optimizer(*built.model, hyperparameters, rank_offload_settings(o, r, threads))
                                                      : make_discarding_optimizer(*built.model);
        built.transport = in_process ? std::unique_ptr<PipelineTransport>(std::make_unique<InProcessTransport>(mailbox, r))
                                    : std::make_unique<CommunicatorTransport>(communicator);
        built.executor = std::make_unique<PipelineRankExecutor>(
            *built.model, *built.transport, PipelineRankSetup{&plan.schedule, r, plan.stage_blocks, o.batch, sequence, o.seed, keeps});
      }
      if (prints) {
        std::printf("ferry train: %s, %lld layers, pipeline of %d stages (%s, %d micro-batches of %lld x %lld) on %s\n", config.name.c_str(),
                    static_cast<long long>(config.layers), plan.schedule.stages, o.schedule.c_str(), micro_batches,
                    static_cast<long long>(o.batch), static_cast<long long>(sequence),
                    in_process ? ("one process (" + std::to_string(ranks) + " devices)").c_str() : (std::to_string(world) + " ranks").c_str());
        for (const std::string& note : run_notes(o, 1)) std::printf("  note: %s\n", note.c_str());  // pipelines run dp 1
        for (std::int32_t stage = 0; stage < plan.schedule.stages; ++stage) {
          const StageBlocks& blocks = plan.stage_blocks[static_cast<std::size_t>(stage)];
          std::printf("  stage %d on rank %d: blocks %lld..%lld%s%s\n", stage, plan.schedule.rank_of_stage(stage),
                      static_cast<long long>(blocks.first), static_cast<long long>(blocks.end - 1), stage == 0 ? " + embedding" : "",
                      stage == plan.schedule.stages - 1 ? " + LM head and loss" : "");
        }
        std::fflush(stdout);
      }

      DataLoader loader(data, o.batch, sequence, o.shuffle, o.seed);
      MetricsFile metrics(writes_summary ? o.metrics : std::string());
      ProgressPrinter progress(stdout, prints && world == 1 && is_terminal(stdout), o.log_every);  // mpirun forwards output: no live line
      const double tokens_per_step = static_cast<double>(o.batch * sequence * micro_batches);
      std::vector<MicroBatchTokens> tokens(static_cast<std::size_t>(micro_batches));
      std::vector<InProcessRank> turns;
      for (PipelineRank& rank : local) turns.push_back({rank.executor.get(), rank.optimizer.get()});
      for (std::int64_t step = 0; step < o.steps; ++step) {
        current_step = step + 1;
        const auto start = Clock::now();
        for (MicroBatchTokens& micro_batch : tokens) loader.next(micro_batch.inputs, micro_batch.targets);
        const PipelineStepSettings settings{step, hyper.schedule.at(step), hyper.grad_clip};
        for (PipelineRank& rank : local) {
          if (rank.profile) rank.profile->begin_step(step + 1);
        }
        const PipelineStepResult result = in_process ? run_pipeline_step_in_process(turns, tokens, settings)
                                                     : run_pipeline_step(*local.front().executor, *local.front().optimizer, communicator, tokens, settings);
        for (PipelineRank& rank : local) {
          if (rank.profile) rank.profile->end_step(step + 1);
        }
        const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
        if (step > 0) throughputs.push_back(tokens_per_step / seconds);
        last_loss = result.loss;
        steps.push_back({{"step", step + 1}, {"loss", result.loss}, {"tokens_per_second", tokens_per_step / seconds}, {"lr", settings.learning_rate},
                         {"grad_norm", result.gradient_norm}, {"seconds", seconds}});
        if (writes_summary) metrics.append(steps.back(), *local.front().device);  // rank 0's memory
        if (prints) {
          progress.update(StepProgress{step + 1, o.steps, result.loss, tokens_per_step / seconds, settings.learning_rate, result.gradient_norm,
                                       local.front().device->allocator().statistics().allocated_bytes.all().peak, 0.0,
                                       !local.front().device->has_storage(), std::nullopt});
        }
      }
      progress.finish();
      for (PipelineRank& rank : local) rank.profile->finish();
    } catch (const OutOfMemoryError& error) {
      throw std::runtime_error(
          describe_pipeline_out_of_memory(o, policy, local, current_step, error, PipelineShape{config, sequence, plan.schedule.stages, ranks}));
    }

    // Every rank's memory, gathered where the summary is written.
    nlohmann::json rank_entries = nlohmann::json::array();
    for (const PipelineRank& rank : local) rank_entries.push_back(rank_summary(rank, plan));
    if (!in_process) {
      const std::vector<std::string> gathered = communicator.gather_strings(rank_entries.front().dump(), 0);
      rank_entries = nlohmann::json::array();
      for (const std::string& entry : gathered) rank_entries.push_back(nlohmann::json::parse(entry));
    }
    if (!writes_summary) return nullptr;
    // The contract's memory section: the rank with the highest peak (the one that needs the largest device).
    const auto fullest = std::max_element(rank_entries.begin(), rank_entries.end(), [](const nlohmann::json& a, const nlohmann::json& b) {
      return a["peak_reserved"].get<std::int64_t>() < b["peak_reserved"].get<std::int64_t>();
    });
    nlohmann::json partition = nlohmann::json::array();
    for (std::int32_t stage = 0; stage < plan.schedule.stages; ++stage) {
      const StageBlocks& blocks = plan.stage_blocks[static_cast<std::size_t>(stage)];
      partition.push_back({{"stage", stage}, {"rank", plan.schedule.rank_of_stage(stage)}, {"blocks", {blocks.first, blocks.end}}});
    }
    nlohmann::json summary = {
        {"command", "train"},
        {"profile", o.profile.empty() ? nlohmann::json(nullptr) : nlohmann::json(o.profile)},
        {"model", model_summary(config)},
        {"run", {{"device", o.device}, {"device_memory_limit", local.front().device->memory_limit()}, {"precision", o.precision},
                 {"micro_batch", o.batch}, {"seq", sequence}, {"grad_accum", micro_batches}, {"steps", o.steps},
                 {"checkpointing", policy.name()}, {"checkpointing_requested", o.checkpointing}, {"offload_optimizer", o.offload_optimizer}, {"data", data.name()}, {"seed", o.seed},
                 {"threads", threads}, {"dry_run", !local.front().device->has_storage()}}},
        {"steps", steps},
        {"final_loss", steps.empty() ? nlohmann::json(nullptr) : nlohmann::json(last_loss)},
        {"tokens_per_second", median(throughputs)},
        {"memory", {{"peak_allocated", (*fullest)["peak_allocated"]}, {"peak_reserved", (*fullest)["peak_reserved"]},
                    {"at_peak", (*fullest)["at_peak"]}, {"max_by_category", (*fullest)["max_by_category"]}, {"rank", (*fullest)["rank"]},
                    {"host_pinned_peak", sum_over(rank_entries, "host_pinned_peak")}, {"nvme_bytes", sum_over(rank_entries, "nvme_bytes")},
                    {"num_ooms", sum_over(rank_entries, "num_ooms")}, {"num_alloc_retries", sum_over(rank_entries, "num_alloc_retries")}}},
        {"pipeline", {{"pp", ranks}, {"stages", plan.schedule.stages}, {"schedule", o.schedule}, {"micro_batches", micro_batches},
                      {"processes", world}, {"partition", partition}, {"partition_choice", layout.partition},
                      {"unit_cost_simulation", {{"costs", "F=1 B=1 W=1 per rank's blocks"}, {"makespan", plan.simulation.makespan},
                                                {"bubble_fraction", plan.simulation.bubble_fraction}}}}},
        {"ranks", rank_entries},
    };
    if (!prints) return summary;
    if (local.front().device->has_storage()) {
      std::printf("  final loss %.4f | %.0f tok/s (median)\n", steps.empty() ? 0.0 : last_loss, median(throughputs));
    } else {
      std::printf("  dry run on meta of every stage (no values computed)\n");
    }
    if (!o.profile.empty()) std::printf("  memory profiles in %s/rank-*: run `ferry report %s`\n", o.profile.c_str(), o.profile.c_str());
    for (const nlohmann::json& entry : rank_entries) {
      std::printf("  rank %d (stage %d): peak allocated %s, peak reserved %s, activation stash peak %s (one micro-batch %s)\n",
                  entry["rank"].get<int>(), entry["stage"].get<int>(), format_bytes(entry["peak_allocated"].get<std::size_t>()).c_str(),
                  format_bytes(entry["peak_reserved"].get<std::size_t>()).c_str(),
                  format_bytes(entry["activation_stash"]["peak"].get<std::size_t>()).c_str(),
                  format_bytes(entry["activation_stash"]["one_micro_batch"].get<std::size_t>()).c_str());
    }
    return summary;
  } catch (const std::exception& error) {
    if (world == 1) throw;
    // The other ranks would wait on this one: end the whole job with the reason.
    std::fflush(stdout);
    std::fprintf(stderr, "ferry: error: rank %d of %d: %s\n", communicator.rank(), world, error.what());
    std::fflush(stderr);
    communicator.abort(1);
  }
  return nullptr;  // not reached: abort ends the process
}

}  // namespace

bool pipeline_requested(const TrainOptions& options) {
  return options.pipeline_stages > 1 || detect_rank_environment().world_size > 1;
}

nlohmann::json run_pipeline_training(const TrainOptions& options) {
  reject_unsupported(options);
  const std::unique_ptr<Communicator> communicator = make_communicator();
  return train_pipeline(options, *communicator, nullptr);
}

}  // namespace ferry
