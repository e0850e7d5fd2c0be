#include "engine/plan/plan_search.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <stdexcept>

#include "allocator/byte_size.h"
#include "engine/comm/communicator.h"
#include "engine/plan/cheapest_first.h"
#include "engine/report/model_state_report.h"
#include "engine/train/model_config.h"
#include "engine/train/rank_training.h"
#include "engine/train/training_plan.h"
#include "offload/zero_offload_optimizer.h"

namespace ferry {
namespace {

std::vector<std::int64_t> divisors(std::int64_t n) {
  std::vector<std::int64_t> result;
  for (std::int64_t d = 1; d <= n; ++d) {
    if (n % d == 0) result.push_back(d);
  }
  return result;
}

// Recompute policies the search tries, from the least memory saving to the most.
const std::vector<std::string>& recompute_choices() {
  static const std::vector<std::string> choices = {"none", "selective", "full"};
  return choices;
}

std::size_t recompute_strength(const std::string& policy) {
  const auto& choices = recompute_choices();
  return static_cast<std::size_t>(std::find(choices.begin(), choices.end(), policy) - choices.begin());
}

// A byte count as --device-memory takes it: whole MiB or GiB where it is one, else bytes.
std::string memory_flag(std::size_t bytes) {
  if (bytes % (std::size_t{1} << 30) == 0) return std::to_string(bytes >> 30) + "GiB";
  if (bytes % (std::size_t{1} << 20) == 0) return std::to_string(bytes >> 20) + "MiB";
  return std::to_string(bytes) + "B";
}

}  // namespace

TrainOptions plan_train_options(const TrainOptions& base, const PlanSettings& settings, const ClusterSpec& cluster) {
  TrainOptions options = base;
  options.device = cluster.kind == DeviceKind::cuda ? "cuda" : "cpu";
  options.device_memory = memory_flag(cluster.device_memory);
  options.tp = 1;
  options.dp = settings.dp;
  options.pipeline_stages = settings.pp;
  options.batch = settings.micro_batch;
  options.grad_accum = settings.micro_batches;
  options.batch_given = options.grad_accum_given = true;
  options.micro_batches.reset();
  options.train_batch_size.reset();
  options.checkpointing = settings.recompute;
  options.zero_stage = settings.zero_stage;
  options.offload_optimizer = settings.nvme ? "nvme" : settings.offload_optimizer ? "cpu" : "none";
  if (!settings.nvme) options.nvme_path.clear();  // an NVMe plan trains in the request's --nvme-path
  options.offload_param = settings.offload_parameters ? "cpu" : "none";
  return options;
}

namespace {

// The candidate as a dry run of every rank in this process, on meta with the cluster's kernels' sizes.
TrainingPlan dry_run_plan_of(const TrainOptions& options, const ClusterSpec& cluster) {
  TrainOptions dry = options;
  if (dry.offload_optimizer == "nvme") dry.offload_optimizer = "cpu";  // the device holds the same either way; meta offloads nothing
  dry.nvme_path.clear();
  dry.device = "meta";
  dry.dry_run_of = std::string(device_kind_name(cluster.kind));
  dry.quiet = true;
  dry.summary.clear();
  dry.save.clear();
  dry.metrics.clear();
  dry.profile.clear();
  return make_training_plan(dry, RankEnvironment{});
}

// The largest category at the fullest rank's peak, for "why not".
std::string largest_category(const nlohmann::json& rank) {
  std::string name = "?";
  std::int64_t most = -1;
  for (const auto& [category, bytes] : rank["at_peak"].items()) {
    if (bytes.get<std::int64_t>() > most) {
      most = bytes.get<std::int64_t>();
      name = category + " " + format_bytes(static_cast<std::size_t>(most));
    }
  }
  return name;
}

// Each node's host memory must hold what its ranks keep there: with the optimizer offloaded, ZeRO-Offload's
// state and gradients (the formula; pinned staging buffers on top), and on cpu devices each rank's device
// memory too (the same RAM: measured candidates only). Sets candidate.host_bytes (the fullest node's);
// returns why not when a node is over.
std::optional<std::string> host_memory_over(PlanCandidate& candidate, const PlanSearchRequest& request, const TrainingPlan& plan) {
  const ClusterSpec& cluster = request.cluster;
  const std::int64_t stage_parameters = plan.model.parameter_count() / std::max(plan.grid.pp, 1);
  const PlanSettings& s = candidate.settings;
  const OffloadedHostBytes state =
      s.offload_optimizer ? offloaded_host_bytes(stage_parameters, plan.precision, s.zero_stage, plan.grid.dp, s.offload_parameters) : OffloadedHostBytes{};
  // With NVMe the optimizer state lives there; the host keeps the gradients and the NVMe buffers.
  const auto nvme_buffers = static_cast<std::int64_t>(offload::ZeroOffloadSettings{}.buffer_pool_bytes);
  const std::int64_t offloaded = s.nvme ? state.gradients + state.parameters + nvme_buffers : state.total();
  const std::int64_t on_nvme = s.nvme ? state.optimizer_states : 0;
  const bool device_in_ram = cluster.kind == DeviceKind::cpu;
  const auto world = static_cast<std::size_t>(cluster.world()), per_node = static_cast<std::size_t>(cluster.devices_per_node);
  candidate.nvme_bytes = on_nvme * static_cast<std::int64_t>(std::min(world, per_node));
  if (s.nvme && candidate.nvme_bytes > static_cast<std::int64_t>(cluster.nvme_memory)) {
    return "node 0's NVMe holds the offloaded optimizer state (" + format_bytes(static_cast<std::size_t>(on_nvme)) + " a rank): " +
           format_bytes(static_cast<std::size_t>(candidate.nvme_bytes)) + ", " +
           format_bytes(static_cast<std::size_t>(candidate.nvme_bytes) - cluster.nvme_memory) + " over its " + format_bytes(cluster.nvme_memory) + " (--nvme)";
  }
  std::int64_t fullest = 0;
  std::size_t fullest_node = 0;
  for (std::size_t first = 0; first < world; first += per_node) {
    std::int64_t bytes = 0;
    for (std::size_t rank = first; rank < std::min(world, first + per_node); ++rank) {
      bytes += offloaded + (device_in_ram ? candidate.ranks.at(rank)["peak_reserved"].get<std::int64_t>() : 0);
    }
    if (bytes > fullest) {
      fullest = bytes;
      fullest_node = first / per_node;
    }
  }
  candidate.host_bytes = fullest;
  if (fullest <= static_cast<std::int64_t>(cluster.host_memory)) return std::nullopt;
  std::string what = offloaded > 0 ? std::string(s.nvme                 ? "the gradients and NVMe buffers of the optimizer on NVMe ("
                                                 : s.offload_parameters ? "the offloaded parameters, optimizer state and gradients ("
                                                                        : "the offloaded optimizer's state and gradients (") +
                                         format_bytes(static_cast<std::size_t>(offloaded)) + " a rank)"
                                   : "";
  if (device_in_ram) what += (what.empty() ? "" : " and ") + std::string("the cpu devices' memory (the same RAM)");
  return "node " + std::to_string(fullest_node) + "'s host memory holds " + what + ": " + format_bytes(static_cast<std::size_t>(fullest)) + ", " +
         format_bytes(static_cast<std::size_t>(fullest) - cluster.host_memory) + " over its " + format_bytes(cluster.host_memory) + " (--host-memory)";
}

void measure(PlanCandidate& candidate, const PlanSearchRequest& request, const TrainingPlan& plan) {
  const nlohmann::json ranks = dry_run_every_rank(plan);
  candidate.ranks = nlohmann::json::array();
  for (std::size_t rank = 0; rank < ranks.size(); ++rank) {
    const nlohmann::json& each = ranks[rank];
    candidate.ranks.push_back({{"rank", rank}, {"peak_reserved", each["peak_reserved"]}, {"peak_allocated", each["peak_allocated"]},
                               {"max_by_category", each["max_by_category"]}, {"at_peak", each["at_peak"]}});
    if (each["peak_reserved"].get<std::int64_t>() > candidate.peak_reserved) {
      candidate.peak_reserved = each["peak_reserved"].get<std::int64_t>();
      candidate.fullest_rank = static_cast<int>(rank);
    }
  }
  const auto limit = static_cast<std::int64_t>(request.cluster.device_memory);
  if (candidate.peak_reserved <= limit) {
    const std::optional<std::string> over = host_memory_over(candidate, request, plan);
    candidate.status = over ? PlanCandidate::Status::too_big : PlanCandidate::Status::fits;
    candidate.why_not = over.value_or("");
    return;
  }
  candidate.status = PlanCandidate::Status::too_big;
  candidate.why_not = "rank " + std::to_string(candidate.fullest_rank) + " needs " + format_bytes(static_cast<std::size_t>(candidate.peak_reserved)) +
                      ", " + format_bytes(static_cast<std::size_t>(candidate.peak_reserved - limit)) + " over the device's " +
                      format_bytes(request.cluster.device_memory) + " (the most at its peak: " + largest_category(ranks[static_cast<std::size_t>(candidate.fullest_rank)]) + ")";
}

// Does a plan of settings `a` hold at least as much as one of `b`: the same grid, ZeRO stage and offload,
// a micro-batch no smaller, recompute no stronger? (Too big where `b` is.)
bool holds_no_less(const PlanSettings& a, const PlanSettings& b) {
  return a.dp == b.dp && a.pp == b.pp && a.zero_stage == b.zero_stage && a.offload_optimizer == b.offload_optimizer && a.nvme == b.nvme &&
         a.offload_parameters == b.offload_parameters && a.micro_batch >= b.micro_batch && recompute_strength(a.recompute) <= recompute_strength(b.recompute);
}

int status_order(PlanCandidate::Status status) {
  switch (status) {
    case PlanCandidate::Status::fits: return 0;
    case PlanCandidate::Status::too_big: return 1;
    case PlanCandidate::Status::refused: return 2;
    case PlanCandidate::Status::not_measured: return 3;
  }
  return 4;
}

}  // namespace

std::vector<std::string> PlanSettings::flags() const {
  std::vector<std::string> flags = {"--dp", std::to_string(dp)};
  if (pp > 1) flags.insert(flags.end(), {"--pp", std::to_string(pp)});
  flags.insert(flags.end(), {"--batch", std::to_string(micro_batch), "--grad-accum", std::to_string(micro_batches), "--checkpointing", recompute});
  if (zero_stage > 0) flags.insert(flags.end(), {"--zero-stage", std::to_string(zero_stage)});
  if (offload_optimizer) flags.insert(flags.end(), {"--offload-optimizer", nvme ? "nvme" : "cpu"});
  if (offload_parameters) flags.insert(flags.end(), {"--offload-param", "cpu"});
  return flags;
}

std::string PlanSettings::text() const {
  return "dp " + std::to_string(dp) + " x pp " + std::to_string(pp) + ", micro-batch " + std::to_string(micro_batch) + " x " +
         std::to_string(micro_batches) + ", recompute " + recompute + ", ZeRO " + std::to_string(zero_stage) + ", optimizer " +
         (offload_parameters ? "and parameters on the host" : nvme ? "on NVMe" : offload_optimizer ? "on the host" : "on the device");
}

const char* PlanSettings::offload_text() const {
  return offload_parameters ? "host+params" : nvme ? "nvme" : offload_optimizer ? "host" : "device";
}

nlohmann::json PlanSettings::to_json() const {
  return {{"dp", dp}, {"pp", pp}, {"tp", 1}, {"micro_batch", micro_batch}, {"micro_batches", micro_batches}, {"recompute", recompute},
          {"zero_stage", zero_stage}, {"offload_optimizer", nvme ? "nvme" : offload_optimizer ? "cpu" : "none"}, {"offload_param", offload_parameters ? "cpu" : "none"}};
}

PlanSettings PlanSettings::from_json(const nlohmann::json& json) {
  PlanSettings settings;
  settings.dp = json.at("dp").get<int>();
  settings.pp = json.at("pp").get<int>();
  settings.micro_batch = json.at("micro_batch").get<std::int64_t>();
  settings.micro_batches = json.at("micro_batches").get<std::int64_t>();
  settings.recompute = json.at("recompute").get<std::string>();
  settings.zero_stage = json.at("zero_stage").get<int>();
  settings.offload_optimizer = json.at("offload_optimizer").get<std::string>() != "none";
  settings.nvme = json.at("offload_optimizer").get<std::string>() == "nvme";
  settings.offload_parameters = json.value("offload_param", std::string("none")) != "none";
  return settings;
}

const char* plan_status_name(PlanCandidate::Status status) {
  switch (status) {
    case PlanCandidate::Status::fits: return "fits";
    case PlanCandidate::Status::too_big: return "too big";
    case PlanCandidate::Status::refused: return "refused";
    case PlanCandidate::Status::not_measured: return "not measured";
  }
  return "?";
}

PlanSearch search_plans(const PlanSearchRequest& request) {
  const auto start = std::chrono::steady_clock::now();
  const ClusterSpec& cluster = request.cluster;
  const int world = cluster.world();
  if (request.global_batch < 1) throw std::invalid_argument("--global-batch must be positive, got " + std::to_string(request.global_batch));
  resolve_model_config(request.base);  // a model that does not exist is the request's error, not each plan's
  PlanSearch search;
  std::vector<PlanCandidate> candidates;
  const bool nvme_plans = cluster.nvme_memory > 0 && !request.base.nvme_path.empty();  // they train in that directory
  for (const std::int64_t pp : divisors(world)) {
    const int dp = world / static_cast<int>(pp);
    if (request.global_batch % dp != 0) continue;
    const std::int64_t per_rank = request.global_batch / dp;
    for (const std::int64_t micro_batch : divisors(per_rank)) {
      for (const std::string& recompute : recompute_choices()) {
        // Offload: none, the optimizer, at stage 3 (on one rank too: ZeRO-Infinity's single device) the
        // parameters with it, and the optimizer on NVMe where the cluster has some.
        for (int stage = 0; stage <= 3; ++stage) {
          for (const int offload : {0, 1, 2, 3}) {
            if ((stage > 0 && dp == 1 && offload != 2) || (offload == 2 && stage != 3) || (offload == 3 && !nvme_plans)) continue;
            PlanCandidate candidate;
            candidate.settings = {dp, static_cast<int>(pp), micro_batch, per_rank / micro_batch, recompute, stage, offload >= 1, offload == 2, offload == 3};
            candidate.options = plan_train_options(request.base, candidate.settings, cluster);
            candidates.push_back(std::move(candidate));
          }
        }
      }
    }
  }
  if (candidates.empty()) {
    throw std::invalid_argument("no data-parallel size divides --global-batch " + std::to_string(request.global_batch) + " on " + cluster.name +
                                "'s " + std::to_string(world) + " devices: give a global batch that is a multiple of the devices or of a divisor of them");
  }
  // Each candidate's plan as the trainer makes it (its refusals are the candidate's), and its predicted time.
  std::vector<TrainingPlan> plans(candidates.size());
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    PlanCandidate& candidate = candidates[i];
    try {
      plans[i] = dry_run_plan_of(candidate.options, cluster);
    } catch (const std::invalid_argument& error) {
      candidate.status = PlanCandidate::Status::refused;
      candidate.why_not = error.what();
      continue;
    }
    TrainingPlan timed = plans[i];  // dry-run with the optimizer on the host (the device holds the same); timed on its tier
    if (candidate.settings.nvme) timed.offload_optimizer = offload::OffloadDevice::nvme;
    candidate.time = predict_step_time(timed, cluster);
    const PlanSettings& s = candidate.settings;
    // The average stage's parameters (a pipeline's fullest rank holds at least as many).
    candidate.model_states_floor = device_model_states(plans[i].model.parameter_count() / s.pp, plans[i].precision, s.offload_optimizer, s.zero_stage,
                                                       s.dp, s.offload_parameters).total();
    const double tokens = static_cast<double>(request.global_batch * plans[i].sequence);
    candidate.tokens_per_second = tokens / candidate.time.total();
    candidate.mfu = model_flops_per_step(plans[i]) / (candidate.time.total() * world * cluster.peak_flops);
  }
  std::vector<std::size_t> order(candidates.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return candidates[a].tokens_per_second > candidates[b].tokens_per_second; });
  // In that order through the loop the out-of-memory advice uses: a plan is too big without a dry run
  // where its node's host memory (GPUs: the formula alone) or ZeRO's model-state formula is over, or where
  // a plan measured too big holds no more (the same grid, ZeRO stage and offload, a micro-batch no larger,
  // recompute no weaker).
  std::vector<std::size_t> judged;  // the candidates the trainer does not refuse, fastest first
  for (const std::size_t i : order) {
    if (candidates[i].status != PlanCandidate::Status::refused) judged.push_back(i);
  }
  CheapestFirstSearch loop;
  loop.candidates = judged.size();
  loop.wanted = request.wanted;
  loop.budget = request.budget;
  loop.measure = [&](std::size_t k) {
    measure(candidates[judged[k]], request, plans[judged[k]]);
    return candidates[judged[k]].status == PlanCandidate::Status::fits;
  };
  loop.too_big_unmeasured = [&](std::size_t k) -> std::optional<std::string> {
    PlanCandidate& candidate = candidates[judged[k]];
    if (cluster.kind != DeviceKind::cpu) {  // GPUs' host memory holds the formula's bytes alone
      if (const std::optional<std::string> over = host_memory_over(candidate, request, plans[judged[k]])) return *over + " (no dry run spent)";
    }
    if (candidate.model_states_floor > static_cast<std::int64_t>(cluster.device_memory)) {
      return "its model states alone need " + format_bytes(static_cast<std::size_t>(candidate.model_states_floor)) +
             " a rank by ZeRO's formula, over the device's " + format_bytes(cluster.device_memory) + " (no dry run spent)";
    }
    return std::nullopt;
  };
  loop.holds_no_less = [&](std::size_t a, std::size_t b) { return holds_no_less(candidates[judged[a]].settings, candidates[judged[b]].settings); };
  const CheapestFirstResult result = search_cheapest_first(loop);
  search.dry_runs = result.measured;
  for (std::size_t k = 0; k < judged.size(); ++k) {
    PlanCandidate& candidate = candidates[judged[k]];
    const CheapestFirstOutcome& outcome = result.outcomes[k];
    switch (outcome.verdict) {
      case CheapestFirstOutcome::Verdict::fits:
      case CheapestFirstOutcome::Verdict::too_big: break;  // measured
      case CheapestFirstOutcome::Verdict::too_big_unmeasured:
        candidate.status = PlanCandidate::Status::too_big;
        candidate.why_not = outcome.why;
        break;
      case CheapestFirstOutcome::Verdict::too_big_as: {
        const PlanCandidate& below = candidates[judged[outcome.as]];
        candidate.why_not = "too big as " + below.settings.text() + " is (" + below.why_not + "): a larger micro-batch or less recompute holds more";
        break;
      }
      case CheapestFirstOutcome::Verdict::extends_a_fit:
      case CheapestFirstOutcome::Verdict::not_reached:
        candidate.why_not = result.budget_spent ? "the search's " + std::to_string(request.budget) + " dry runs were spent"
                                                : "predicted slower than the " + std::to_string(result.fitting) + " plans that fit";
        break;
    }
  }
  std::vector<std::size_t> ranked = order;
  std::stable_sort(ranked.begin(), ranked.end(), [&](std::size_t a, std::size_t b) {
    return status_order(candidates[a].status) < status_order(candidates[b].status);
  });
  for (const std::size_t i : ranked) search.candidates.push_back(std::move(candidates[i]));
  search.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return search;
}

}  // namespace ferry
