#include "engine/train/rank_training.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <optional>
#include <thread>
#include <vector>

#include "allocator/allocator_errors.h"
#include "allocator/byte_size.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/checkpoint/checkpoint_directory.h"
#include "engine/checkpoint/save_root_lock.h"
#include "engine/checkpoint/sharded_save.h"
#include "engine/core/safetensors.h"
#include "engine/data/token_data.h"
#include "engine/optim/data_parallel_optimizer.h"
#include "engine/optim/learning_rate.h"
#include "engine/report/model_state_report.h"
#include "engine/train/evaluation.h"
#include "engine/train/metrics_file.h"
#include "engine/train/model_config.h"
#include "engine/train/pipeline_layout.h"
#include "engine/train/pipeline_stage.h"
#include "engine/train/progress.h"
#include "engine/train/resume_checks.h"
#include "engine/train/run_summary.h"
#include "engine/train/training_plan.h"
#include "engine/train/training_profile.h"
#include "engine/train/training_setup.h"
#include "engine/train/training_step.h"
#include "models/gpt_model.h"
#include "models/gpt_weights.h"
#include "models/kernel_backend.h"
#include "models/kernels/cpu/compute_threads.h"

namespace ferry {
namespace {

using Clock = std::chrono::steady_clock;

// ZeRO-Offload's settings for this rank: with several ranks each keeps its NVMe state in a directory of
// its own (nvme_path/rank-R), as DeepSpeed's ranks do.
offload::ZeroOffloadSettings rank_offload_settings(const TrainingPlan& plan, const ProcessGrid& grid) {
  offload::ZeroOffloadSettings settings = plan.offload;
  settings.device = *plan.offload_optimizer;
  if (grid.shape().world() > 1 && !settings.nvme_path.empty()) settings.nvme_path += "/rank-" + std::to_string(grid.rank());
  if (plan.threads == 0) settings.adam.threads = cpu::compute_threads();
  return settings;
}

// Parameter offload's settings for this rank: its NVMe file in the rank's directory, beside its optimizer state.
std::optional<offload::ParameterOffloadSettings> rank_parameter_offload(const TrainingPlan& plan, const ProcessGrid& grid) {
  std::optional<offload::ParameterOffloadSettings> settings = plan.offload_param;
  if (settings && grid.shape().world() > 1 && !settings->nvme_path.empty()) settings->nvme_path += "/rank-" + std::to_string(grid.rank());
  return settings;
}

nlohmann::json step_entry(std::int64_t step, const StepResult& result, double throughput, double learning_rate, double seconds, bool scaled) {
  nlohmann::json entry = {{"step", step}, {"loss", result.loss}, {"tokens_per_second", throughput}, {"lr", learning_rate},
                          {"grad_norm", std::isfinite(result.gradient_norm) ? nlohmann::json(result.gradient_norm) : nlohmann::json(nullptr)},
                          {"seconds", seconds}};
  if (scaled) {
    entry["loss_scale"] = result.loss_scale;
    entry["skipped"] = result.skipped;
  }
  return entry;
}

// Said when steps of the run lie past a cosine schedule's horizon, where the rate stays at its minimum
// (a resumed run extended with --steps, or a --lr-decay-steps under --steps).
std::optional<std::string> schedule_horizon_note(const LearningRateSchedule& schedule, std::int64_t first_step, std::int64_t last_step,
                                                 bool resumed) {
  if (schedule.kind != LearningRateKind::cosine || last_step <= schedule.decay_steps) return std::nullopt;
  char rate[32];
  std::snprintf(rate, sizeof rate, "%.2e", schedule.at(schedule.decay_steps));
  const std::int64_t from = std::max(first_step, schedule.decay_steps) + 1;
  return "steps " + std::to_string(from) + "-" + std::to_string(last_step) + " lie past the cosine schedule's horizon (lr_decay_steps " +
         std::to_string(schedule.decay_steps) + ") and run at its minimum rate " + rate + "; " +
         (resumed ? "to stretch the schedule over them, resume with --override-lr-schedule (its horizon becomes --steps " +
                        std::to_string(last_step) + ")"
                  : "--lr-decay-steps " + std::to_string(last_step) + " would stretch it over them");
}

}  // namespace

// One rank of the grid trains: every rank of every grid runs this same loop (one rank, dp ranks,
// pipeline ranks, each simulated on meta). `layout`: a pipeline's, chosen once for a dry run of every
// rank (null: chosen here).
nlohmann::json train_on_grid(const TrainingPlan& plan, const ProcessGrid& grid, const PipelineLayoutChoice* layout) {
  const bool speaks = grid.rank() == 0 && !plan.io.quiet;  // rank 0 prints
  const bool pipelined = plan.grid.pp > 1;
  cpu::set_compute_threads(plan.threads > 0 || plan.world == 1 ? plan.threads
                                                            : std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / plan.world));
  const DType dtype = plan.precision;
  const GptConfig& config = plan.model;
  const std::int64_t sequence = plan.sequence;
  const std::optional<TrainerState> saved = plan.io.resume.empty() ? std::nullopt : std::optional(read_trainer_state(plan.io.resume));
  const OptimizerSettings hyper = saved ? resolve_resumed_settings(plan.optimizer, saved->optimizer, plan.io.resume,
                                                                   plan.io.override_lr_schedule ? std::optional(plan.steps) : std::nullopt)
                                        : resolve_new_run_settings(plan.optimizer, plan.steps);
  nlohmann::json schedule_overrides = saved ? saved->schedule_overrides : nlohmann::json::array();
  if (saved && plan.io.override_lr_schedule) {
    schedule_overrides.push_back({{"step", saved->step}, {"from", saved->optimizer.to_json()}, {"to", hyper.to_json()}});
  }

  const std::unique_ptr<Device> device =
      make_training_device(plan.device, plan.device_memory_limit, plan.allocator, plan.kernels, grid.gpu().value_or(0));
  grid.order_after_compute(*device);
  const ProcessGrid::CommunicationRecording communication_ops = grid.record_communication(*device);
  if (device->kind() == DeviceKind::meta) ops::stand_in_for(*device, plan.kernels);
  if (!device->has_storage() && !plan.io.save.empty()) {
    throw std::invalid_argument("--device meta is a dry run without values: it cannot --save (--init-from and --resume give it the shape)");
  }
  const TokenDataset data = open_training_data(plan.io.data);
  check_vocabulary(data, config);
  DataLoader loader(data, plan.micro_batch, sequence, plan.io.shuffle, plan.seed);
  const std::optional<TokenDataset> eval_data = plan.io.eval_data.empty() ? std::nullopt : std::optional(TokenDataset::open(plan.io.eval_data));
  if (eval_data) {
    check_vocabulary(*eval_data, config);
    DataLoader(*eval_data, plan.micro_batch, sequence, false, 0);  // refuses data shorter than one micro-batch, before training
  }
  MetricsFile metrics(grid.rank() == 0 ? plan.io.metrics : std::string());  // rank 0's lines; the loss is the job's already

  const GptDropout dropout = plan.dropout;
  const StepSettings settings{plan.micro_batch, sequence, plan.micro_batches, plan.seed, hyper.grad_clip, plan.data_parallel() ? &grid.dp() : nullptr};
  RecomputePolicy policy = plan.recompute;
  const bool offloaded = plan.offload_optimizer.has_value();
  DryRunSetup dry_run_setup{config, dtype, dropout, &data, settings, policy, plan.loss_chunk, plan.allocator,
                            offloaded, plan.kernels,
                            plan.reduce_bucket_elements, plan.weight_copy_elements,
                            {grid.dp().rank(), grid.dp().size(), plan.zero_stage, plan.allgather_bucket_elements, plan.overlap_comm,
                             plan.tied_table_gradient(), plan.gather, plan.offload_param.has_value()}};
  if (speaks) {
    for (const std::string& note : plan.notes) std::printf("  note: %s\n", note.c_str());
    if (const auto note = schedule_horizon_note(hyper.schedule, saved ? saved->step : 0, plan.steps, saved.has_value())) {
      std::printf("  note: %s\n", note->c_str());
    }
    if (saved && plan.io.override_lr_schedule) {
      std::printf("  note: --override-lr-schedule: from step %lld the learning rate follows %s (peak %.2e, warmup %lld, horizon %lld, "
                  "minimum ratio %g) instead of the checkpoint's (peak %.2e, horizon %lld)\n",
                  static_cast<long long>(saved->step + 1), learning_rate_kind_name(hyper.schedule.kind), hyper.schedule.peak,
                  static_cast<long long>(hyper.schedule.warmup_steps), static_cast<long long>(hyper.schedule.decay_steps),
                  hyper.schedule.min_ratio, saved->optimizer.schedule.peak, static_cast<long long>(saved->optimizer.schedule.decay_steps));
    }
  }
  // A pipeline: the schedule, and the split of the blocks with the recompute policy (by dry runs of
  // every rank when a memory limit or --checkpointing auto asks for them).
  std::optional<PipelineSchedulePlan> schedule;
  std::optional<PipelineLayoutChoice> chosen;
  if (pipelined) {
    schedule = plan_pipeline_schedule(plan.pipeline_schedule, plan.grid.pp, static_cast<std::int32_t>(plan.micro_batches), grid.pp().max_tag());
    chosen = layout != nullptr ? *layout : choose_grid_layout(plan, speaks);
    policy = chosen->layout.policy;
  } else if (policy.kind == RecomputeKind::automatic) {
    const PolicyChoice choice = choose_recompute_policy(dry_run_setup, device->memory_limit());
    if (!choice.fits) {
      throw std::invalid_argument("--checkpointing auto: no recompute policy fits --device-memory " + format_bytes(device->memory_limit()) +
                                  "; the smallest, " + choice.policy.name() + ", needs " +
                                  format_bytes(static_cast<std::size_t>(choice.dry_run.peak_reserved)) +
                                  " (raise --device-memory, lower --batch or --seq)");
    }
    policy = choice.policy;
    if (speaks) std::printf("  checkpointing auto: %s (dry run: peak reserved %s of %s)\n", policy.name().c_str(),
                format_bytes(static_cast<std::size_t>(choice.dry_run.peak_reserved)).c_str(), format_bytes(device->memory_limit()).c_str());
  }
  dry_run_setup.policy = policy;
  const std::vector<ActivationKeep> keeps = activation_keeps(policy, config.layers);
  std::optional<LossScaler> scaler;  // fp16: the backward runs on the scaled loss
  if (dtype == DType::f16) scaler.emplace(hyper.loss_scaling);
  // Each rank of a grid profiles into a directory of its own.
  const std::string rank_directory = plan.grid.world() == 1 ? std::string() : "/rank-" + std::to_string(grid.rank());
  TrainingProfile profile(*device, plan.io.profile.empty() ? plan.io.profile : plan.io.profile + rank_directory, plan.io.profile_steps,
                          {{"command", "train"}, {"model", config.name}, {"parameters", config.parameter_count()}, {"grid", plan.to_json()},
                           {"rank", grid.rank()}, {"device", std::string(device_kind_name(device->kind()))}, {"precision", precision_name(plan.precision)},
                           {"micro_batch", plan.micro_batch}, {"seq", sequence}, {"grad_accum", plan.micro_batches}, {"checkpointing", policy.name()}},
                          std::string(TrainingProfile::kFailureDirectory) + rank_directory, plan.io.memory_profile);
  ProgressPrinter progress(speaks ? stdout : nullptr, speaks && plan.world == 1 && is_terminal(stdout), plan.io.log_every);
  nlohmann::json steps = nlohmann::json::array();
  std::vector<double> throughputs;
  std::vector<double> step_seconds;
  const double tokens_per_step = static_cast<double>(plan.global_batch() * sequence);  // over every dp rank
  double last_loss = std::nan("");
  std::optional<double> last_eval_loss;
  nlohmann::json optimizer_description = nlohmann::json::object();
  nlohmann::json stage_description = nlohmann::json::object();
  std::int64_t first_step = 0;
  std::int64_t last_step = plan.steps;
  std::int64_t current_step = 0;  // 0 while the model is built
  std::int64_t held_parameters = config.parameter_count();  // a pipeline rank holds its stages' share
  try {
    // ZeRO 3: the model holds no parameter whole; its blocks' are gathered from the ranks' partitions.
    const bool partitioned_parameters = plan.data_parallel() && plan.zero_stage == 3;
    GptModel model(*device, config, dtype, dropout, offloaded || plan.data_parallel() ? GradientStorage::streamed : GradientStorage::whole,
                   pipelined ? pipeline_rank_part(schedule->schedule, grid.pp().rank(), chosen->layout.stage_blocks, config.layers) : GptModelPart{},
                   partitioned_parameters ? ParameterResidence::provided : ParameterResidence::whole);
    held_parameters = 0;  // the parameters of the rank's part, held whole or (ZeRO 3) partitioned
    for (const ParameterSpec& parameter : model.parameter_specs()) held_parameters += parameter.numel();
    model.set_loss_chunk(plan.loss_chunk);
    model.set_gradient_bucket_elements(dry_run_setup.gradient_bucket_elements);
    model.set_weight_copy_elements(dry_run_setup.weight_copy_elements);
    if (partitioned_parameters) {
      // ZeRO 3: the partition is set once the optimizer holds it (below).
    } else if (!plan.io.init_from.empty() && plan.io.resume.empty()) {
      if (device->has_storage()) load_gpt_parameters(SafetensorsFile(plan.io.init_from), model.parameters());  // meta: the shape only
    } else {
      initialize_gpt_parameters(model.parameters(), config, plan.seed);
    }
    const DataParallelGradients::BucketCuts buckets =
        pipelined ? pipeline_buckets(model.parameter_specs(), chosen->layout.stage_blocks, config.layers) : DataParallelGradients::BucketCuts{};
    const std::unique_ptr<TrainingOptimizer> optimizer =
        plan.data_parallel()       ? make_data_parallel_optimizer(model, hyper.adamw(), grid.dp(),
                                                                  {plan.zero_stage, plan.reduce_bucket_elements, plan.allgather_bucket_elements,
                                                                   plan.overlap_comm, buckets, plan.tied_table_gradient(),
                                                                   plan.gather, rank_parameter_offload(plan, grid)},
                                                                  offloaded ? std::optional(rank_offload_settings(plan, grid)) : std::nullopt)
        : !offloaded               ? make_device_optimizer(model, hyper.adamw())
        : device->has_storage()    ? make_offload_optimizer(model, hyper.adamw(), rank_offload_settings(plan, grid))
                                   : make_discarding_optimizer(model);
    if (partitioned_parameters && device->has_storage()) {  // meta has no values
      // The rank's partition starts as the seed's initialization or the --init-from file's elements (a
      // resume then replaces it), read piece by piece.
      std::optional<SafetensorsFile> file;
      std::optional<GptParameterReader> reader;
      if (!plan.io.init_from.empty() && plan.io.resume.empty()) reader.emplace(file.emplace(plan.io.init_from), config);
      optimizer->start_from(model, [&](const ParameterSpec& spec, std::int64_t offset, std::int64_t count) {
        return reader ? reader->elements(spec, offset, count) : initial_gpt_parameter_values(spec, config, plan.seed, offset, count);
      });
    }
    std::optional<PipelineStage> stage;
    if (pipelined) stage.emplace(model, grid.pp(), *schedule, chosen->layout.stage_blocks, settings, keeps);

    const nlohmann::json contract = resume_contract(plan, data);
    if (saved) {
      check_resume_contract(saved->run, contract, plan.io.resume, plan.grid.dp);
      if (saved->step > plan.steps) {
        throw std::invalid_argument("--resume '" + plan.io.resume + "' is at step " + std::to_string(saved->step) + ", beyond --steps " +
                                    std::to_string(plan.steps) + " (--steps counts total steps)");
      }
      if (device->has_storage()) load_checkpoint(plan.io.resume, model, *optimizer);  // meta: the shape and the state only
      first_step = saved->step;
      loader.set_position(saved->data_position);
      if (scaler) {
        if (!saved->loss_scaler) throw CheckpointError("checkpoint '" + plan.io.resume + "' of an fp16 run has no loss_scaler state");
        scaler->restore(*saved->loss_scaler);
      }
    }
    last_step = stopping_step(plan, first_step);
    // Every rank writes its shard of the checkpoint's consolidated files (sharded_save.h).
    std::string saved_to;
    std::optional<SaveRootLock> save_root_lock;  // held by rank 0 for the run's life: one run saves into a root at a time
    if (!plan.io.save.empty() && grid.rank() == 0) {
      save_root_lock.emplace(plan.io.save);
      require_save_root_usable(plan.io.save, plan.io.resume, plan.io.overwrite_checkpoints);
      for (const std::string& path : remove_stale_checkpoint_files(plan.io.save)) {
        if (speaks) std::printf("  removed what an interrupted save left: %s\n", path.c_str());
      }
    }
    // The last stage's copy of the tied table is the first stage's: only the first writes it.
    const std::vector<std::string> skipped =
        model.part().head && !model.part().embedding ? std::vector<std::string>{"wte.weight"} : std::vector<std::string>{};
    auto save = [&](std::int64_t steps_done) {
      TrainerState state;
      state.step = steps_done;
      state.data_position = loader.position();
      state.seed = plan.seed;
      state.run = contract;
      state.run["data_name"] = data.name();  // for people; the data's identity is what a resume checks
      state.optimizer = hyper;
      state.schedule_overrides = schedule_overrides;
      if (scaler) state.loss_scaler = scaler->state();
      state.run["grid"] = plan.to_json();  // for people: a checkpoint resumes at any grid
      saved_to = save_sharded_checkpoint(grid.world(), plan.io.save, steps_done, plan.io.keep_checkpoints, config, optimizer->export_shard(), skipped, state);
    };

    if (speaks) {
      std::printf("ferry train: %s (%lld layers, hidden %lld, %lld heads, vocab %lld), %s parameters, %s on %s, grid %s\n", config.name.c_str(),
                  static_cast<long long>(config.layers), static_cast<long long>(config.hidden), static_cast<long long>(config.heads),
                  static_cast<long long>(config.vocab), std::to_string(config.parameter_count()).c_str(), precision_name(plan.precision).c_str(),
                  device->name().c_str(), plan.grid.text().c_str());
      std::printf("  data %s (%s, %lld tokens), batch %lld x seq %lld x grad-accum %lld, steps %lld..%lld, %d threads, BLAS kernels %s\n",
                  data.name().c_str(), data.format().c_str(), static_cast<long long>(data.size()), static_cast<long long>(plan.micro_batch),
                  static_cast<long long>(sequence), static_cast<long long>(plan.micro_batches), static_cast<long long>(first_step + 1),
                  static_cast<long long>(last_step), cpu::compute_threads(), cpu::blas_core_name().c_str());
      if (pipelined) {
        std::printf("  pipeline: %s schedule, %d stages on %d ranks\n", schedule->name.c_str(), schedule->schedule.stages, plan.grid.pp);
        print_pipeline_stages(*schedule, chosen->layout.stage_blocks);
      }
      std::fflush(stdout);
    }

    for (std::int64_t step = first_step; step < last_step; ++step) {
      const auto start = Clock::now();
      const double learning_rate = hyper.schedule.at(step);
      current_step = step + 1;
      profile.begin_step(step + 1);
      StepResult result;
      {
        const OpScope op(*device, "step", "step " + std::to_string(step + 1));
        result = stage ? stage->run_step(*optimizer, loader, step, learning_rate, scaler ? &*scaler : nullptr)
                       : run_training_step(*device, model, *optimizer, loader, settings, step, learning_rate, keeps, scaler ? &*scaler : nullptr);
      }
      profile.end_step(step + 1);
      const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
      const double throughput = tokens_per_step / seconds;
      step_seconds.push_back(seconds);
      if (step > first_step) throughputs.push_back(throughput);
      last_loss = result.loss;
      steps.push_back(step_entry(step + 1, result, throughput, learning_rate, seconds, scaler.has_value()));
      std::optional<double> eval_loss;
      if (eval_data && ((plan.io.eval_every > 0 && (step + 1) % plan.io.eval_every == 0) || step + 1 == last_step)) {
        const OpScope op(*device, "eval", "eval after step " + std::to_string(step + 1));
        eval_loss = (stage ? stage->evaluate(*eval_data, plan.io.eval_batches) : evaluate_loss(*device, model, *eval_data, plan.micro_batch, sequence, plan.io.eval_batches)).loss;
        steps.back()["eval_loss"] = *eval_loss;
        last_eval_loss = *eval_loss;
      }
      metrics.append(steps.back(), *device);
      const double typical = median(step_seconds);
      progress.update(StepProgress{step + 1, last_step, result.loss, throughput, learning_rate, result.gradient_norm,
                                   device->allocator().statistics().allocated_bytes.all().peak,
                                   typical * static_cast<double>(last_step - step - 1), !device->has_storage(), eval_loss});
      if (plan.io.save_every > 0 && (step + 1) % plan.io.save_every == 0 && step + 1 < last_step) save(step + 1);
    }
    progress.finish();
    profile.finish();
    optimizer_description = optimizer->describe();
    if (stage) stage_description = stage->describe();
    if (speaks && last_step < plan.steps) std::printf("  stopped after step %lld (--exit-interval %lld)\n", static_cast<long long>(last_step),
                                         static_cast<long long>(*plan.exit_interval));
    if (!plan.io.save.empty()) {
      save(std::max(first_step, last_step));
      if (speaks) std::printf("  saved checkpoint %s (%s/latest)\n", saved_to.c_str(), plan.io.save.c_str());
    }
  } catch (const OutOfMemoryError& error) {
    progress.finish();
    const std::string directory = profile.save_failure(error.what());
    const std::size_t limit = device->memory_limit();
    TrainingPlan current = plan;
    current.recompute = policy;  // alternatives against the configuration that ran
    const std::string advice = plan.io.memory_advisor ? plan.io.memory_advisor(current, limit)
                                                      : std::string("(no search for changes that fit was given to this trainer)");
    throw std::runtime_error("out of device memory" + (plan.grid.world() > 1 ? " on rank " + std::to_string(grid.rank()) : std::string()) +
                             (current_step == 0 ? std::string(" while building the model and optimizer")
                                                : " in step " + std::to_string(current_step)) +
                             ": " + error.what() + "\n" + advice +
                             (directory.empty() ? std::string() : "\nthe memory profile up to the failure is in " + directory + ": run `ferry report " + directory + "`"));
  }

  nlohmann::json summary = {
      {"command", "train"},
      {"model", model_summary(config)},
      {"run", {{"device", std::string(device_kind_name(device->kind()))}, {"device_memory_limit", device->memory_limit()},
               {"precision", precision_name(plan.precision)}, {"micro_batch", plan.micro_batch}, {"seq", sequence}, {"grad_accum", plan.micro_batches},
               {"steps", plan.steps}, {"first_step", first_step + 1}, {"checkpointing", policy.name()}, {"checkpointing_requested", plan.recompute.name()},
               {"loss_chunk", plan.loss_chunk},
               {"offload_optimizer", offloaded ? offload::offload_device_name(*plan.offload_optimizer) : "none"},
               {"offload_param", plan.offload_param ? (plan.offload_param->nvme ? "nvme" : "cpu") : "none"}, {"data", data.name()}, {"shuffle", plan.io.shuffle}, {"seed", plan.seed},
               {"last_step", last_step}, {"lr", hyper.schedule.peak}, {"lr_schedule", learning_rate_kind_name(hyper.schedule.kind)},
               {"optimizer_settings", hyper.to_json()}, {"lr_schedule_overrides", schedule_overrides},
               {"lr_schedule_note", nlohmann::json(schedule_horizon_note(hyper.schedule, saved ? saved->step : 0, plan.steps, saved.has_value())
                                                       .value_or(std::string()))},
               {"threads", cpu::compute_threads()}, {"blas_kernels", cpu::blas_core_name()},
               {"dry_run", !device->has_storage()}, {"kernels", std::string(device_kind_name(plan.kernels))}}},
      {"steps", steps},
      {"final_loss", steps.empty() ? nlohmann::json(nullptr) : nlohmann::json(last_loss)},
      {"tokens_per_second", median(throughputs)},
      {"memory", memory_summary(*device, optimizer_description)},
      {"optimizer", optimizer_description},
      {"model_states", model_state_report(device->allocator().statistics(), held_parameters, dtype,
                                             offloaded ? offload::offload_device_name(*plan.offload_optimizer) : "none",
                                             plan.zero_stage, plan.grid.dp, optimizer_description.value("memory_bound", nlohmann::json()))},
  };
  if (scaler) summary["loss_scaling"] = scaler->describe();
  if (eval_data) {
    summary["eval"] = {{"data", eval_data->name()}, {"every", plan.io.eval_every}, {"batches", plan.io.eval_batches}};
    summary["final_eval_loss"] = last_eval_loss ? nlohmann::json(*last_eval_loss) : nlohmann::json(nullptr);
  }
  if (throughputs.empty() && !step_seconds.empty()) summary["tokens_per_second"] = tokens_per_step / step_seconds.front();
  if (!device->has_storage()) summary["tokens_per_second"] = nullptr;  // a dry run computes nothing: no rate to report
  summary["grid"] = plan.to_json();
  if (!metrics.stopped().empty()) summary["metrics_stopped"] = metrics.stopped();
  if (pipelined) summary["pipeline"] = pipeline_summary(*schedule, chosen->layout.stage_blocks, chosen->partition, plan.world);
  nlohmann::json entry = rank_entry(grid, *device, optimizer_description, last_step - first_step);
  entry.update(stage_description);
  summary["ranks"] = nlohmann::json::array({entry});
  if (!plan.io.profile.empty()) summary["profile"] = plan.grid.world() == 1 ? profile.written() : plan.io.profile;
  return summary;
}

}  // namespace ferry
