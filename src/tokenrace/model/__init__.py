"""The run's typed models: the lowest layer of the pipeline, importable from every package.

records.jsonl lines (`records`), summary.json (`summary`, with `stats` and soak `drift`), manifest.json
(`manifest`), sweep.json and profile.json (`run`), claim.json (`claim`; its expectations and checks
are also a sweep's objectives and checks), the history index row (`history`), and the monitor's
timeseries.jsonl lines and resource summary (`monitor`). The file names and the one schema version
of the run files are in `files`.

Every file carries `schema_version`. Files written before it existed are read as version 0: the
model fills what they lack with None, never with 0. The JSON Schemas in docs/schema/ are generated
from these models (`python -m tokenrace.model.schema`), and a test fails when they are stale.

Nested objects whose layout belongs to another module (the planner's efficiency) are kept as JSON
objects here and typed where they are made; what other tools read first (latency statistics,
throughput, counts, sources, cost, cache) is typed in full. This package imports nothing of
tokenrace but `redact`.
"""
