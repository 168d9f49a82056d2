"""Facts: what an environment runs on, read from files and the driver (no TensorFlow), recorded
when it is built or passes verify; provision.drift compares them later.

- `prefix`: the prefix's own facts read from files (packages from dist-info and conda-meta, the
  files their installers recorded, CUDA libraries, hooks, the interpreter), nothing imported;
- `collect`: the typed facts of one environment and of the host (driver, GPUs), and how to read
  them;
- `store`: the record of those facts per environment under PROVISION_HOME, sealed by a digest.
"""
