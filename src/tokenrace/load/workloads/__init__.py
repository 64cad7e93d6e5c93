"""Workloads: what to send. Pure modules, deterministic given a seed, each returning typed values.

text (filler of a given token length), prefixes (shared system prompts, cache busting), sessions
(multi-turn conversations and their files), traces (timestamped trace files and their prompts).
When to send is load/shapes.py, beside the arrival schedules.
"""
