"""The teacher's tools: the notebook runner behind `make run`, the `make check` checklist, the data kit.
Command-line programs (`python -m mgtutor.classroom.runner` ...); nothing here is taught."""
