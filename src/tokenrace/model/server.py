"""manifest.json's `server`: what the server says it is (doctor's probe of /v1/models, /version and
the response headers), and `models_answer`, its /v1/models answer kept as it came."""

from __future__ import annotations

from pydantic import JsonValue

from tokenrace.model.base import _Model


class ServedModel(_Model):
    """One entry of the server's model list, cut to what makes two results comparable."""

    id: str | None = None
    owned_by: str | None = None
    max_model_len: int | None = None
    meta: dict[str, JsonValue] | None = None  # llama.cpp's model metadata, as the server gave it


class ProbedEndpoints(_Model):
    """The HTTP status each probed endpoint answered with (None: no answer)."""

    models: int | None = None
    version: int | None = None


class ServerProbe(_Model):
    """Which engine serves the endpoint, and its version; unknown fields are None."""

    engine: str | None = None
    engine_version: str | None = None
    models: list[ServedModel] | None = None
    max_model_len: int | None = None
    headers: dict[str, str] | None = None
    endpoints: ProbedEndpoints | None = None
