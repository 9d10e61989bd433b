"""Reading and checking a scenario: YAML file + `--set` overrides -> a validated `sim.config.Scenario`.

- load.py: the entry point (`load_scenario`, `validate_mapping`, `scenario_to_dict`)
- yaml_loader.py: the file -> plain data, read as YAML 1.2, hostile input refused
- rules.py: the one `RULES` table of what each value may be, and the did-you-mean hints
- validation.py: the mapping walked along `sim.config`'s dataclasses, each value checked against `RULES`
- special_fields.py: `model`, `hardware.gpu` and `workload.trace.path`, resolved from names, files or mappings
- cross_checks.py: the rules that involve more than one field (vLLM's for tensor parallel, the token budget)
"""
