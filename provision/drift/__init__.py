"""Drift: what changed under an environment since its facts were recorded (provision.facts), and
what each change does to it.

- `check`: `provision check`: every registered environment judged (by
  provision.verify.changes, which a passing verify consults too before it records a new
  baseline), optionally re-verified;
- `prom`: the result for node_exporter's textfile collector.
"""
