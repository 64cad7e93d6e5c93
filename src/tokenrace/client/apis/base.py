"""What every API's module provides: where to send, how to authenticate, the body, and how to read
the answer (a stream or one body)."""

from __future__ import annotations

from typing import Any, ClassVar, Protocol, runtime_checkable

from tokenrace.client.request import RequestSpec
from tokenrace.client.stream import StreamReader
from tokenrace.model.records import RequestRecord


@runtime_checkable
class StructuredReader(Protocol):
    """A stream reader that also keeps the answer's text apart and counts the tool calls."""

    def structured(self) -> tuple[str, int]: ...


class Api:
    """One API's wire format. Stateless: one instance serves every request of a run."""

    name: ClassVar[str]
    path: ClassVar[str]  # under the base URL (`{base_url}/{path}`)
    generates: ClassVar[bool] = True  # answers with generated text (else: vectors, scores)
    streams: ClassVar[bool] = True  # can stream its answer

    def url(self, base_url: str) -> str:
        return f"{base_url}/{self.path}"

    def auth_headers(self, api_key: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {api_key}"}

    def fixed_headers(self) -> dict[str, str]:
        """Headers every request of this API carries (before the run's own --header values)."""
        return {}

    def body(self, spec: RequestSpec) -> dict[str, Any]:
        raise NotImplementedError

    def stream_reader(self, rec: RequestRecord) -> StreamReader:
        raise NotImplementedError(f"the {self.name} API does not stream")

    def structured_reader(self, rec: RequestRecord) -> StreamReader:
        """The stream reader when tools or a response schema were asked for."""
        raise NotImplementedError(f"the {self.name} API takes no tools and no response format")

    def structured_body(self, obj: Any) -> tuple[str, int]:
        """(the answer's text, the tool calls) of a whole body, for tools and schemas."""
        raise NotImplementedError(f"the {self.name} API takes no tools and no response format")

    def read_body(self, rec: RequestRecord, obj: Any) -> None:
        """Fill `rec` from the answer's parsed JSON body (`rec.fail` when it is not what the API sends)."""
        raise NotImplementedError

    def not_found_hint(self, url: str) -> str | None:
        """One line for an HTTP 404 on this API's URL: what the server may lack, and what to try."""
        return f"the server may not serve the {self.name} API at {url}: check the base URL and the API chosen"


def body_object(rec: RequestRecord, obj: Any) -> dict[str, Any] | None:
    """The body as a JSON object, or None after failing the record."""
    if isinstance(obj, dict):
        return obj
    rec.fail("malformed_body", f"the body is not a JSON object: {str(obj)[:120]!r}")
    return None


def count(value: Any) -> int | None:
    """A token count as the server gave it: a non-negative int, else None (unknown)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None
