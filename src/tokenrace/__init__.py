"""tokenrace: measure, plan and route LLM inference backends."""

__version__ = "0.1.0"
