"""What runs inside an environment, with its own interpreter: the smoke test and the benchmark.

Standard library only (TensorFlow is imported inside the checks), Python 3.8+, and only relative
imports between its modules, so the same files work as `provision.payload` on the host and as the
top-level package of the zipapp that provision.payload_app builds and runs (`python -I payload.pyz
smoke|bench ...`). The host imports `report` (the schema) and `judgements` to read reports,
`status` (the words of a check) and `bench_schema` (the benchmark's report and option choices);
the other modules run only inside environments. This package never imports anything outside
itself.
"""
