"""How faithful the shipped calibrations are: `python -m planner.fidelity` prints docs/fidelity.md
(`--write` rewrites it; tests/test_fidelity.py checks the two agree).

Everything here is computed from the shipped data (planner/calibrations/vidur/*.csv), the shipped profiles
and transfer table (planner/calibrations/*.yaml, written by `python -m planner.calibration.public_profiles`)
and, for the public end-to-end figures, by running the simulator. Nothing is tuned to the figures listed.

- __main__.py: the command: print the page, or `--write` it to docs/fidelity.md
- page.py: the page's header and its sections in order (`render`)
- markdown.py: a percentage cell and a table, the two shapes every section prints
- fit_errors.py: the relative errors of a set of coefficients on Vidur's rows, per layer and per step
- profiles.py: the shipped profiles' fit on their own measurements, per GPU and tp and per model
- form.py: the cost model's form (max(), the 2-norm, a free p-norm, the elementwise term) against the rows
- streaming.py: the weights streamed at decode batch sizes against the profiles' bandwidth_efficiency
- allreduce.py: what Vidur's all-reduce times measure, and the shipped all-reduce fits on them
- transfer.py: leave-one-GPU-out and leave-one-model-out errors, and what each catalog GPU gets
- public_figures.py: published end-to-end figures, listed before any was simulated, against the simulator
"""
