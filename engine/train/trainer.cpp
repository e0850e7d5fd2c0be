#include "engine/train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <optional>
#include <vector>

#include "allocator/allocator_errors.h"
#include "allocator/byte_size.h"
#include "engine/core/safetensors.h"
#include "engine/train/checkpoint.h"
#include "engine/train/data_parallel_optimizer.h"
#include "engine/train/evaluation.h"
#include "engine/train/learning_rate.h"
#include "engine/train/model_config.h"
#include "engine/train/memory_advice.h"
#include "engine/train/metrics_file.h"
#include "engine/report/model_state_report.h"
#include "engine/train/pipeline_trainer.h"
#include "engine/train/progress.h"
#include "engine/train/resume_checks.h"
#include "engine/report/summary_file.h"
#include "engine/train/token_data.h"
#include "engine/train/training_profile.h"
#include "engine/train/training_plan.h"
#include "engine/train/training_setup.h"
#include "engine/train/training_step.h"
#include "models/gpt_model.h"
#include "models/gpt_weights.h"
#include "models/kernels/cpu/compute_threads.h"

namespace ferry {
namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

nlohmann::json memory_summary(const Device& device, const nlohmann::json& optimizer) {
  const AllocatorStatistics stats = device.allocator().statistics();
  return {{"peak_allocated", stats.allocated_bytes.all().peak}, {"peak_reserved", stats.reserved_bytes.all().peak},
          {"at_peak", bytes_by_category(stats.category_allocated_at_peak)}, {"max_by_category", bytes_by_category(category_peaks(stats))},
          {"host_pinned_peak", optimizer.value("host_pinned_peak", std::int64_t{0})}, {"nvme_bytes", optimizer.value("nvme_bytes", std::int64_t{0})},
          {"num_ooms", stats.num_ooms}, {"num_alloc_retries", stats.num_alloc_retries}, {"device_memory_limit", device.memory_limit()}};
}

namespace {

// This rank's entry of the summary's `ranks`: its grid coordinates, memory and traffic.
nlohmann::json rank_entry(const ProcessGrid& grid, const Device& device, std::int64_t steps_run) {
  const AllocatorStatistics stats = device.allocator().statistics();
  nlohmann::json entry = grid.describe();
  std::uint64_t sent = 0;
  for (const GridAxis axis : {GridAxis::tp, GridAxis::dp, GridAxis::pp}) sent += grid.group(axis).bytes_sent();
  entry["peak_allocated"] = stats.allocated_bytes.all().peak;
  entry["peak_reserved"] = stats.reserved_bytes.all().peak;
  entry["max_by_category"] = bytes_by_category(category_peaks(stats));
  entry["at_peak"] = bytes_by_category(stats.category_allocated_at_peak);
  entry["bytes_sent"] = sent;
  entry["bytes_sent_per_step"] = steps_run > 0 ? sent / static_cast<std::uint64_t>(steps_run) : 0;
  return entry;
}

// ZeRO-Offload's settings for this rank: with several dp ranks each keeps its NVMe state in a directory
// of its own (nvme_path/rank-R), as DeepSpeed's ranks do.
offload::ZeroOffloadSettings rank_offload_settings(const TrainOptions& o, const ProcessGrid& grid) {
  offload::ZeroOffloadSettings settings = offload_settings(o);
  if (grid.shape().world() > 1 && !settings.nvme_path.empty()) settings.nvme_path += "/rank-" + std::to_string(grid.rank());
  return settings;
}

// One rank of the grid trains (every rank of a data-parallel group runs this same loop).
nlohmann::json train_on_grid(const TrainOptions& o, const TrainingPlan& plan, const ProcessGrid& grid) {
  const bool speaks = grid.rank() == 0;  // rank 0 prints and writes the summary
  cpu::set_compute_threads(o.threads);
  const DType dtype = parse_precision(o.precision);
  GptConfig config = o.resume.empty() ? resolve_model_config(o) : read_checkpoint_config(o.resume);
  if (!o.resume.empty()) check_shape_flags_against_checkpoint(o, config);
  const std::int64_t sequence = o.seq.value_or(config.max_sequence);
  if (sequence > config.max_sequence) {
    throw std::invalid_argument("--seq " + std::to_string(sequence) + " exceeds the model's " + std::to_string(config.max_sequence) + " positions");
  }
  const std::optional<TrainerState> saved = o.resume.empty() ? std::nullopt : std::optional(read_trainer_state(o.resume));
  const OptimizerSettings hyper = saved ? resolve_resumed_settings(o.optimizer, saved->optimizer, o.resume)
                                        : resolve_new_run_settings(o.optimizer, o.steps);

  const std::unique_ptr<Device> device = make_training_device(o.device, o.device_memory);
  if (!device->has_storage() && !o.save.empty()) {
    throw std::invalid_argument("--device meta is a dry run without values: it cannot --save (--init-from and --resume give it the shape)");
  }
  const TokenDataset data = open_training_data(o.data);
  check_vocabulary(data, config);
  DataLoader loader(data, o.batch, sequence, o.shuffle, o.seed);
  const std::optional<TokenDataset> eval_data = o.eval_data.empty() ? std::nullopt : std::optional(TokenDataset::open(o.eval_data));
  if (eval_data) {
    check_vocabulary(*eval_data, config);
    DataLoader(*eval_data, o.batch, sequence, false, 0);  // refuses data shorter than one micro-batch, before training
  }
  MetricsFile metrics(speaks ? o.metrics : std::string());  // rank 0's lines; the loss is the group's already

  const GptDropout dropout{o.dropout, o.dropout, o.dropout};
  const StepSettings settings{o.batch, sequence, o.grad_accum, o.seed, hyper.grad_clip,
                              plan.data_parallel() ? &grid.dp() : nullptr};
  RecomputePolicy policy = RecomputePolicy::parse(o.checkpointing);
  const bool offloaded = o.offload_optimizer != "none";
  DryRunSetup dry_run_setup{config, dtype, dropout, &data, settings, policy, o.loss_chunk, AllocatorConfig::from_environment(),
                            offloaded, device->kind() == DeviceKind::cuda ? DeviceKind::cuda : DeviceKind::cpu,
                            plan.reduce_bucket_elements, o.weight_copy_elements,
                            {grid.dp().rank(), grid.dp().size(), plan.zero_stage, plan.allgather_bucket_elements, plan.overlap_comm}};
  if (speaks) {
    for (const std::string& note : run_notes(o, plan.grid.dp)) std::printf("  note: %s\n", note.c_str());
    for (const std::string& note : plan.notes) std::printf("  note: %s\n", note.c_str());
  }
  if (policy.kind == RecomputeKind::automatic) {
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
  // Each rank of a grid profiles into a directory of its own, as pipeline stages do.
  const std::string profile_directory = o.profile.empty() || plan.grid.world() == 1 ? o.profile : o.profile + "/rank-" + std::to_string(grid.rank());
  TrainingProfile profile(*device, profile_directory, ProfileSteps::parse(o.profile_steps),
                          {{"command", "train"}, {"model", config.name}, {"parameters", config.parameter_count()}, {"grid", plan.to_json()},
                           {"device", std::string(device_kind_name(device->kind()))}, {"precision", o.precision},
                           {"micro_batch", o.batch}, {"seq", sequence}, {"grad_accum", o.grad_accum}, {"checkpointing", policy.name()}},
                          plan.grid.world() == 1 ? std::string(TrainingProfile::kFailureDirectory)
                                                 : std::string(TrainingProfile::kFailureDirectory) + "/rank-" + std::to_string(grid.rank()));
  ProgressPrinter progress(speaks ? stdout : nullptr, speaks && is_terminal(stdout), o.log_every);
  nlohmann::json steps = nlohmann::json::array();
  std::vector<double> throughputs;
  std::vector<double> step_seconds;
  const double tokens_per_step = static_cast<double>(plan.global_batch() * sequence);  // over every dp rank
  double last_loss = std::nan("");
  std::optional<double> last_eval_loss;
  nlohmann::json optimizer_description = nlohmann::json::object();
  std::int64_t first_step = 0;
  std::int64_t last_step = o.steps;
  std::int64_t current_step = 0;  // 0 while the model is built
  try {
    GptModel model(*device, config, dtype, dropout, offloaded || plan.data_parallel() ? GradientStorage::streamed : GradientStorage::whole);
    model.set_loss_chunk(o.loss_chunk);
    model.set_gradient_bucket_elements(dry_run_setup.gradient_bucket_elements);
    model.set_weight_copy_elements(dry_run_setup.weight_copy_elements);
    if (!o.init_from.empty() && o.resume.empty()) {
      if (device->has_storage()) load_gpt_parameters(SafetensorsFile(o.init_from), model.parameters());  // meta: the shape only
    } else {
      initialize_gpt_parameters(model.parameters(), config, o.seed);
    }
    const std::unique_ptr<TrainingOptimizer> optimizer =
        plan.data_parallel()       ? make_data_parallel_optimizer(model, hyper.adamw(), grid.dp(),
                                                                  {plan.zero_stage, plan.reduce_bucket_elements, plan.allgather_bucket_elements,
                                                                   plan.overlap_comm},
                                                                  offloaded ? std::optional(rank_offload_settings(o, grid)) : std::nullopt)
        : !offloaded               ? make_device_optimizer(model, hyper.adamw())
        : device->has_storage()    ? make_offload_optimizer(model, hyper.adamw(), offload_settings(o))
                                   : make_discarding_optimizer(model);

    const nlohmann::json contract = resume_contract(o, plan, sequence, data);
    if (saved) {
      check_resume_contract(saved->run, contract, o.resume);
      if (saved->step > o.steps) {
        throw std::invalid_argument("--resume '" + o.resume + "' is at step " + std::to_string(saved->step) + ", beyond --steps " +
                                    std::to_string(o.steps) + " (--steps counts total steps)");
      }
      if (device->has_storage()) load_checkpoint(o.resume, model, *optimizer);  // meta: the shape and the state only
      first_step = saved->step;
      loader.set_position(saved->data_position);
      if (scaler) {
        if (!saved->loss_scaler) throw CheckpointError("checkpoint '" + o.resume + "' of an fp16 run has no loss_scaler state");
        scaler->restore(*saved->loss_scaler);
      }
    }
    last_step = stopping_step(o, first_step);
    auto save = [&](std::int64_t steps_done) {
      TrainerState state;
      state.step = steps_done;
      state.data_position = loader.position();
      state.seed = o.seed;
      state.run = contract;
      state.run["data_name"] = data.name();  // for people; the data's identity is what a resume checks
      state.optimizer = hyper;
      if (scaler) state.loss_scaler = scaler->state();
      state.run["grid"] = plan.to_json();  // for people: a checkpoint resumes at any grid
      if (grid.dp().rank() == 0) {
        save_checkpoint(o.save, model, *optimizer, state);
      } else {
        optimizer->snapshot();  // every dp rank gives its share of the optimizer state to rank 0's snapshot
      }
      grid.dp().barrier();
    };

    if (speaks) std::printf("ferry train: %s (%lld layers, hidden %lld, %lld heads, vocab %lld), %s parameters, %s on %s\n", config.name.c_str(),
                static_cast<long long>(config.layers), static_cast<long long>(config.hidden), static_cast<long long>(config.heads),
                static_cast<long long>(config.vocab), std::to_string(config.parameter_count()).c_str(), o.precision.c_str(),
                device->name().c_str());
    if (speaks) std::printf("  data %s (%s, %lld tokens), batch %lld x seq %lld x grad-accum %lld, steps %lld..%lld, %d threads, BLAS kernels %s\n",
                data.name().c_str(), data.format().c_str(), static_cast<long long>(data.size()), static_cast<long long>(o.batch),
                static_cast<long long>(sequence), static_cast<long long>(o.grad_accum), static_cast<long long>(first_step + 1),
                static_cast<long long>(last_step), cpu::compute_threads(), cpu::blas_core_name().c_str());
    std::fflush(stdout);

    for (std::int64_t step = first_step; step < last_step; ++step) {
      const auto start = Clock::now();
      const double learning_rate = hyper.schedule.at(step);
      current_step = step + 1;
      profile.begin_step(step + 1);
      StepResult result;
      {
        const OpScope op(*device, "step", "step " + std::to_string(step + 1));
        result = run_training_step(*device, model, *optimizer, loader, settings, step, learning_rate, keeps,
                                   scaler ? &*scaler : nullptr);
      }
      profile.end_step(step + 1);
      const double loss = result.loss;
      const double norm = result.gradient_norm;
      const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
      const double throughput = tokens_per_step / seconds;
      step_seconds.push_back(seconds);
      if (step > first_step) throughputs.push_back(throughput);
      last_loss = loss;
      steps.push_back({{"step", step + 1}, {"loss", loss}, {"tokens_per_second", throughput}, {"lr", learning_rate},
                       {"grad_norm", std::isfinite(norm) ? nlohmann::json(norm) : nlohmann::json(nullptr)}, {"seconds", seconds}});
      if (scaler) {
        steps.back()["loss_scale"] = result.loss_scale;
        steps.back()["skipped"] = result.skipped;
      }
      std::optional<double> eval_loss;
      if (eval_data && ((o.eval_every > 0 && (step + 1) % o.eval_every == 0) || step + 1 == last_step)) {
        const OpScope op(*device, "eval", "eval after step " + std::to_string(step + 1));
        eval_loss = evaluate_loss(*device, model, *eval_data, o.batch, sequence, o.eval_batches).loss;
        steps.back()["eval_loss"] = *eval_loss;
        last_eval_loss = *eval_loss;
      }
      metrics.append(steps.back(), *device);
      const double typical = median(step_seconds);
      progress.update(StepProgress{step + 1, last_step, loss, throughput, learning_rate, norm,
                                   device->allocator().statistics().allocated_bytes.all().peak,
                                   typical * static_cast<double>(last_step - step - 1), !device->has_storage(), eval_loss});
      if (o.save_every > 0 && (step + 1) % o.save_every == 0 && step + 1 < last_step) save(step + 1);
    }
    progress.finish();
    profile.finish();
    optimizer_description = optimizer->describe();
    if (speaks && last_step < o.steps) std::printf("  stopped after step %lld (--exit-interval %lld)\n", static_cast<long long>(last_step),
                                         static_cast<long long>(*o.exit_interval));
    if (!o.save.empty()) {
      save(std::max(first_step, last_step));
      if (speaks) std::printf("  saved checkpoint %s\n", o.save.c_str());
    }
  } catch (const OutOfMemoryError& error) {
    progress.finish();
    const std::string directory = profile.save_failure(error.what());
    const MemoryAdvice advice = advise_memory(dry_run_setup, device->memory_limit());
    throw std::runtime_error("out of device memory " +
                             (current_step == 0 ? std::string("while building the model and optimizer")
                                                : "in step " + std::to_string(current_step)) +
                             ": " + error.what() + "\n" + describe_memory_advice(advice, device->memory_limit()) +
                             "\nthe memory profile up to the failure is in " + directory + ": run `ferry report " + directory + "`");
  }

  nlohmann::json summary = {
      {"command", "train"},
      {"model", model_summary(config)},
      {"run", {{"device", std::string(device_kind_name(device->kind()))}, {"device_memory_limit", device->memory_limit()},
               {"precision", o.precision}, {"micro_batch", o.batch}, {"seq", sequence}, {"grad_accum", o.grad_accum},
               {"steps", o.steps}, {"first_step", first_step + 1}, {"checkpointing", policy.name()}, {"checkpointing_requested", o.checkpointing},
               {"loss_chunk", o.loss_chunk},
               {"offload_optimizer", o.offload_optimizer}, {"data", data.name()}, {"shuffle", o.shuffle}, {"seed", o.seed},
               {"last_step", last_step}, {"lr", hyper.schedule.peak}, {"lr_schedule", learning_rate_kind_name(hyper.schedule.kind)},
               {"optimizer_settings", hyper.to_json()}, {"threads", cpu::compute_threads()}, {"blas_kernels", cpu::blas_core_name()},
               {"dry_run", !device->has_storage()}}},
      {"steps", steps},
      {"final_loss", steps.empty() ? nlohmann::json(nullptr) : nlohmann::json(last_loss)},
      {"tokens_per_second", median(throughputs)},
      {"memory", memory_summary(*device, optimizer_description)},
      {"optimizer", optimizer_description},
      {"model_states", model_state_report(device->allocator().statistics(), config.parameter_count(), dtype, offloaded,
                                             plan.zero_stage, plan.grid.dp)},
  };
  if (scaler) summary["loss_scaling"] = scaler->describe();
  if (eval_data) {
    summary["eval"] = {{"data", eval_data->name()}, {"every", o.eval_every}, {"batches", o.eval_batches}};
    summary["final_eval_loss"] = last_eval_loss ? nlohmann::json(*last_eval_loss) : nlohmann::json(nullptr);
  }
  if (throughputs.empty() && !step_seconds.empty()) summary["tokens_per_second"] = tokens_per_step / step_seconds.front();
  summary["grid"] = plan.to_json();
  summary["ranks"] = nlohmann::json::array({rank_entry(grid, *device, last_step - first_step)});
  if (!profile.written().empty()) summary["profile"] = profile.written();
  if (!speaks) return summary;
  if (!profile.written().empty()) {
    std::printf("  memory profile in %s: run `ferry report %s`\n", profile.written().c_str(), profile.written().c_str());
  }
  const nlohmann::json& memory = summary["memory"];
  if (device->has_storage()) {
    std::printf("  final loss %.4f | %.0f tok/s (median) | peak allocated %s | peak reserved %s\n", steps.empty() ? 0.0 : last_loss,
                summary["tokens_per_second"].get<double>(), format_bytes(memory["peak_allocated"].get<std::size_t>()).c_str(),
                format_bytes(memory["peak_reserved"].get<std::size_t>()).c_str());
  } else {
    summary["tokens_per_second"] = nullptr;  // a dry run computes nothing: no rate to report
    std::printf("  dry run on meta (no values computed) | peak allocated %s | peak reserved %s\n",
                format_bytes(memory["peak_allocated"].get<std::size_t>()).c_str(), format_bytes(memory["peak_reserved"].get<std::size_t>()).c_str());
  }
  std::printf("  at peak:");
  for (const auto& [category, bytes] : memory["at_peak"].items()) {
    if (bytes.get<std::int64_t>() > 0) std::printf(" %s %s", category.c_str(), format_bytes(bytes.get<std::size_t>()).c_str());
  }
  std::printf("\n%s\n", describe_model_state_report(summary["model_states"]).c_str());
  if (scaler) {
    std::printf("  fp16 loss scale %g (%s): %lld overflowing steps skipped\n", scaler->scale(), scaler->dynamic() ? "dynamic" : "static",
                static_cast<long long>(scaler->skipped_steps()));
  }
  if (offloaded && device->has_storage()) {
    const nlohmann::json& phases = optimizer_description["last_step_seconds"];
    std::printf("  offload %s: host pinned peak %s, NVMe %s; last optimizer step %.3f s (CpuAdam %.3f s, %s x %d threads)\n",
                o.offload_optimizer.c_str(), format_bytes(memory["host_pinned_peak"].get<std::size_t>()).c_str(),
                format_bytes(memory["nvme_bytes"].get<std::size_t>()).c_str(), phases["step"].get<double>(), phases["adam"].get<double>(),
                optimizer_description["cpu_adam"]["simd"].get<std::string>().c_str(), optimizer_description["cpu_adam"]["threads"].get<int>());
  }
  return summary;
}

// The contract's memory peaks are those of the fullest rank (the one that needs the largest device), as
// a pipeline's are; its rank is named.
void take_fullest_rank_peaks(nlohmann::json& summary) {
  const nlohmann::json& ranks = summary["ranks"];
  const auto fullest = std::max_element(ranks.begin(), ranks.end(), [](const nlohmann::json& a, const nlohmann::json& b) {
    return a["peak_reserved"].get<std::int64_t>() < b["peak_reserved"].get<std::int64_t>();
  });
  nlohmann::json& memory = summary["memory"];
  for (const char* key : {"peak_allocated", "peak_reserved", "at_peak", "max_by_category"}) memory[key] = (*fullest)[key];
  memory["rank"] = (*fullest)["rank"];
}

// Prints every rank's line of a data-parallel run (rank 0's summary holds them all).
void print_rank_lines(const nlohmann::json& ranks) {
  for (const nlohmann::json& entry : ranks) {
    std::printf("  rank %d (dp %d): peak allocated %s, peak reserved %s, optimizer states %s, gradients %s, sent %s per step\n",
                entry["rank"].get<int>(), entry["dp"].get<int>(), format_bytes(entry["peak_allocated"].get<std::size_t>()).c_str(),
                format_bytes(entry["peak_reserved"].get<std::size_t>()).c_str(),
                format_bytes(entry["max_by_category"].value("optimizer_states", std::size_t{0})).c_str(),
                format_bytes(entry["max_by_category"].value("gradients", std::size_t{0})).c_str(),
                format_bytes(entry["bytes_sent_per_step"].get<std::size_t>()).c_str());
  }
}

}  // namespace

nlohmann::json run_training(const TrainOptions& o) {
  const TrainingPlan plan = make_training_plan(o, detect_rank_environment());
  if (plan.grid.pp > 1) return run_pipeline_training(o);
  if (plan.simulated_ranks()) {
    // A dry run of every rank in this process: each runs the same loop on meta over groups that move nothing.
    nlohmann::json summary;
    nlohmann::json ranks = nlohmann::json::array();
    for (int rank = plan.grid.world() - 1; rank >= 0; --rank) {  // rank 0 last: its lines close the output
      nlohmann::json rank_summary = train_on_grid(o, plan, ProcessGrid::dry_run(plan.grid, rank));
      ranks.insert(ranks.begin(), rank_summary["ranks"][0]);
      if (rank == 0) summary = std::move(rank_summary);
    }
    summary["ranks"] = ranks;
    take_fullest_rank_peaks(summary);
    print_rank_lines(ranks);
    return summary;
  }
  if (plan.world == 1) return train_on_grid(o, plan, ProcessGrid::split(*make_single_rank_communicator(), plan.grid));
  const std::unique_ptr<Communicator> world = make_communicator();
  nlohmann::json summary;
  std::vector<std::string> gathered;
  try {
    summary = train_on_grid(o, plan, ProcessGrid::split(*world, plan.grid));
    gathered = world->gather_strings(summary["ranks"][0].dump(), 0);
  } catch (const std::exception& error) {
    // The other ranks would wait on this one in their next collective: end the whole job with the reason.
    std::fflush(stdout);
    std::fprintf(stderr, "ferry: error: rank %d of %d: %s\n", world->rank(), world->size(), error.what());
    std::fflush(stderr);
    world->abort(1);
  }
  if (world->rank() != 0) return nullptr;  // rank 0 writes the summary
  summary["ranks"] = nlohmann::json::array();
  for (const std::string& entry : gathered) summary["ranks"].push_back(nlohmann::json::parse(entry));
  take_fullest_rank_peaks(summary);
  print_rank_lines(summary["ranks"]);
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
