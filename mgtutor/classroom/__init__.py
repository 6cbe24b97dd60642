"""The teacher's tools: command-line programs that run the series rather than teach it.

- `runner`: `make run`, every notebook executed with papermill; `run_page`, its ``index.html``;
  `run_chart`, that page's picture and short facts; `memory`, the peak memory of a notebook's kernel.
- `preflight`: `make check`, the classroom checklist; `preflight_smoke`, its 2-device step and the
  reference step; `estimate`, this laptop's `make run` time from that step;
  `preflight_arithmetic`, what lesson 16 will train with here (its own timing, in a child).
- `datakit`: the classroom data kit, downloaded and checked against published sha256 sums.
- `lessons`: the series as `make run` sees it, overrides checked before anything runs; `presets`, the
  named sets of overrides (`make run PRESET=low-memory`).
- `limits`: `lesson_plan`, what each lesson needs of its parameters, read by notebooks and runner;
  `limit_checks`, the checks the lessons' rules share.
- `run_tables`: the generated blocks of docs/results.md and the teacher's guide, from a run's summary;
  `plans`, the guide's 3-hour and 90-minute plans, timed by that run;
  `results_page`, docs/results.md's tables, one column per kind of CPU.
- `learner_figures`: the guide's "what learners should see", every lesson's figures from a run's records.
- `breaks_page`: the guide's "when a learner's job breaks", lesson 15's drills and bugs from a run's records.
"""
