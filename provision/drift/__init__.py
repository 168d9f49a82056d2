"""Drift: what an environment runs on, recorded when it was built or verified, read again later.

- `prefix`: the prefix's own facts read from files (packages from dist-info and conda-meta, the
  files their installers recorded, CUDA libraries, hooks, the interpreter), nothing imported;
- `facts`: the typed facts of one environment and of the host (driver, GPUs), and how to read them;
- `store`: the record of those facts per environment under PROVISION_HOME, sealed by a digest;
- `judge`: what changed since the record, and what each change does to the environment;
- `check`: `provision check`: every registered environment judged, optionally re-verified.
"""
