"""Test instruments for tokenrace.

`tokenrace.fakes.fake_server` is a fake OpenAI-compatible server with
programmed timing and faults and an exact send log; see its docstring. The
package imports nothing itself, so `python -m tokenrace.fakes.fake_server`
runs without a double-import warning.

Modules: fake_server (runners and public API), fake_app (aiohttp routes),
fake_config (FakeConfig), fake_cache (the simulated prefix cache), fake_plan (what to send and when), fake_openai (wire
shapes, toy tokenizer), fake_log (the send log), fake_precision (a self-check
of the server's send-time precision).
"""
