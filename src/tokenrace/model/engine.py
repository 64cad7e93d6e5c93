"""The engine tokenrace started itself (the embedded llama.cpp server), as manifest.json's `engine`
(and the run settings' `engine`) and profile.json's `engine` describe it."""

from __future__ import annotations

from tokenrace.model.base import _Model


class ModelFile(_Model):
    """The GGUF file the engine serves."""

    path: str | None = None
    file_size_bytes: int | None = None
    sha256: str | None = None
    quantization: str | None = None


class Readiness(_Model):
    """How the engine became ready: the model name it serves and the seconds each stage took."""

    model: str | None = None
    health_s: float | None = None
    ready_s: float | None = None


class EngineRecord(_Model):
    """What launched the server, when tokenrace did (serve/launch.py): manifest.json's `engine`."""

    engine: str | None = None
    version: str | None = None
    binary: str | None = None
    model_file: ModelFile | None = None
    threads: str | None = None  # llama-server's -t, as passed on its command line
    parallel_slots: int | None = None
    ctx_size: int | None = None
    embeddings: bool | None = None
    launch_command: list[str] | None = None
    readiness: Readiness | None = None


class ProfileEngine(_Model):
    """profile.json's `engine`: the part of the engine's record a profile keeps."""

    engine: str | None = None
    version: str | None = None
    model_file: ModelFile | None = None
    threads: str | None = None
    parallel_slots: int | None = None

    @classmethod
    def of(cls, record: EngineRecord) -> ProfileEngine:
        return cls(
            engine=record.engine,
            version=record.version,
            model_file=record.model_file,
            threads=record.threads,
            parallel_slots=record.parallel_slots,
        )
