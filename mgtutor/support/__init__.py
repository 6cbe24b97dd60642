"""The plumbing every room shares; learners meet it only through `mgtutor`'s exports.

- `checks`: argument checks, so every "must be a whole number" error reads the same; `checklist`: the
  ok/WARN/FAIL lines `make check` and `doctor` print, each FAIL with its fix.
- `options`: a function's options written once, as a dataclass's fields, and its signature derived from them.
- `tflog`: TensorFlow's log lines kept out of outputs (``MGTUTOR_SHOW_TF_LOGS=1`` shows them);
  `tfdata`: tf.data iterators that end without waiting on the autotuner: `without_autotuner` for the
  package's streams, `iterators_end_promptly` for every iterator (`setup_devices` turns it on).
- `files`: `atomic_write`, a file or folder replaced whole or not at all; `ModelFileError`.
- `processes`: `run_script`, a script in a child process, its result collected with `report_result`.
- `records`: `record`, values a notebook keeps in its outputs for the tests and the run report.
- `workspace`: `working_folder`, one ignored working folder per notebook.
- `system`: facts about this machine and its processes; `session`: whether the code runs in Jupyter.
"""
