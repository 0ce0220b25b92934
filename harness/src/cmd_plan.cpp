// `hzpbench plan`: a scheduler's plan for a configuration and world size, without MPI and without
// allocating parameters (the layout is counted from the model shape), so the 9B and 36B presets can be
// planned on any machine: model-state bytes per rank by component, and the collectives of one step by
// op, group, level and bytes (schedulers/plan.hpp).
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "commands.hpp"
#include "hzp/core/error.hpp"
#include "hzp/core/json_text.hpp"
#include "hzp/harness/model_options.hpp"
#include "hzp/harness/scheduler_options.hpp"
#include "hzp/schedulers/plan.hpp"
#include "hzp/workloads/model_factory.hpp"

namespace hzp::harness {

Command add_plan_command(CLI::App& app) {
  struct Args {
    ConfigArgs config;
    std::vector<std::string> schedulers;
    int rank = 0;
    bool json = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* sub = app.add_subcommand(
      "plan", "Print a scheduler's model-state bytes per rank and collectives per step, without MPI");
  add_config_options(*sub, args->config);
  sub->add_option("--scheduler", args->schedulers,
                  "Scheduler(s) to plan (repeatable); default: every registered scheduler")
      ->type_name("NAME");
  sub->add_option("--rank", args->rank, "Whose bytes per link level to print (ring hops differ by rank)")
      ->default_val(0);
  sub->add_flag("--json", args->json,
                "One JSON object on stdout instead of the tables: model, precision, ranks_per_node, plans (each as "
                "the table's fields) and not_plannable (scheduler, error) — for scripts");
  sub->footer(
      "Example: hzpbench plan --set model.preset=9b --set topology.world_size=256 "
      "--set topology.ranks_per_node=8 --scheduler hsdp --set scheduler.group_size=8\n");

  return {sub, [args] {
            const ResolvedConfig cfg = args->config.resolve();
            const std::unique_ptr<workloads::ModelSpec> model = workloads::model_spec_from(cfg);
            const workloads::ParamLayout layout = model->layout();
            const schedulers::PlanInputs in = plan_inputs_from(cfg, *model, layout, args->rank);
            std::vector<std::string> names = args->schedulers;
            if (names.empty()) names = schedulers::scheduler_names();
            if (!args->json)
              std::cout << "# model " << model->describe() << ", precision " << workloads::to_string(in.train.precision)
                        << ", topology.ranks_per_node = " << in.ranks_per_node << "\n";
            std::vector<std::string> plans, refused;
            for (const std::string& n : names) {
              try {
                const schedulers::SchedulerPlan p = schedulers::plan_scheduler(n, in);
                if (args->json)
                  plans.push_back(p.to_json());
                else
                  std::cout << p.to_text() << "\n";
              } catch (const ConfigError& e) {
                // One scheduler that does not fit this world (say hsdp's group) should not hide the others.
                if (names.size() == 1) throw;
                if (args->json)
                  refused.push_back("{\"scheduler\": " + json_quote(n) + ", \"error\": " + json_quote(e.message()) + "}");
                else
                  std::cout << "scheduler " << n << ": not plannable here: " << e.message() << "\n\n";
              }
            }
            if (args->json) {
              std::cout << "{\"model\": " << json_quote(model->describe()) << ", \"precision\": "
                        << json_quote(workloads::to_string(in.train.precision)) << ", \"ranks_per_node\": "
                        << in.ranks_per_node << ", \"plans\": [";
              for (std::size_t i = 0; i < plans.size(); ++i) std::cout << (i ? ", " : "") << plans[i];
              std::cout << "], \"not_plannable\": [";
              for (std::size_t i = 0; i < refused.size(); ++i) std::cout << (i ? ", " : "") << refused[i];
              std::cout << "]}\n";
            }
            return 0;
          }};
}

}  // namespace hzp::harness
