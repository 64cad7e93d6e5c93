from __future__ import annotations

import os

import pytest

from tokenrace.serve.embedded import find_llama_server


def require_embedded() -> None:
    """CI installs the embedded engine (scripts/setup.sh), so there a missing binary is a failure."""
    if find_llama_server() is not None:
        return
    if os.environ.get("CI"):
        pytest.fail("llama-server is not installed; run scripts/setup.sh")
    pytest.skip("llama-server is not installed (scripts/setup.sh builds it)")
