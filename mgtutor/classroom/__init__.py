"""The teacher's tools: command-line programs that run the series rather than teach it.

- `runner`: `make run`, every notebook executed with papermill; `run_page`, its ``index.html``;
  `memory`, the peak memory of a notebook's kernel.
- `preflight`: `make check`, the classroom checklist; `preflight_smoke`, its 2-device step.
- `datakit`: the classroom data kit, downloaded and checked against published sha256 sums.
- `lessons`: the series as `make run` sees it, overrides checked before anything runs.
- `limits`: `lesson_plan`, what each lesson needs of its parameters, read by notebooks and runner.
- `run_tables`: the README's and the teacher's guide's generated blocks, from a run's summary.
- `learner_figures`: the guide's "what learners should see", every lesson's figures from a run's records.
"""
