"""Drift: what changed under an environment since its facts were recorded (provision.facts), and
what each change does to it.

- `compare`: what changed since the record, and what each change does to the environment;
- `check`: `provision check`: every registered environment judged, optionally re-verified;
- `prom`: the result for node_exporter's textfile collector.
"""
