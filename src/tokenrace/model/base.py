"""What every saved-file model shares: unknown keys are kept, and the one schema version."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

JsonObject = dict[str, Any]


class _Model(BaseModel):
    # Unknown keys are kept (a newer tokenrace may add fields; an older reader must not lose them).
    model_config = ConfigDict(extra="allow", populate_by_name=True)
