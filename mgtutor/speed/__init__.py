"""The scaling study: throughput measured per device count, each in its own process, and its reading.
Public names come from `mgtutor`."""
