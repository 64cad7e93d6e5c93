"""Engines: the embedded llama.cpp server, launchers for vLLM/SGLang/llama.cpp, readiness, stop."""
