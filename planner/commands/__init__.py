"""The `planner` subcommands: planner/cli.py parses the command line and imports a command's module only when
that command runs, so the CLI starts fast (`calibrate` and `size` live in their own packages).

- validate.py: `planner validate`: each scenario or sizing file loaded, and whether it can run
- catalog.py: `planner catalog`: the GPU and model catalogs, or one entry
- memory.py: `planner memory`: the memory model's breakdown and whether the deployment fits
- simulate.py: `planner simulate`: the simulator's prediction, with optional 90% intervals
- run.py: `planner run`: the scenario on the live engine
- compare.py: `planner compare`: two runs' summaries side by side
- scenario_checks.py: the scenario a command names, loaded with --set, and why it cannot run
- output.py: what simulate and run show and write: the progress bar, --out, the summary
"""
