"""Which headers pass through the gateway, each way (docs/gateway.md, "Headers").

Request headers, client to backend: every end-to-end header goes on by default (`X-Session-ID`, the
client's `X-Request-ID`, vendor headers such as `OpenAI-*` and `anthropic-*`, `traceparent`), except
- hop-by-hop headers (RFC 9110 §7.6.1: `Connection` and each header it names, `Proxy-Connection`,
  `Keep-Alive`, `TE`, `Transfer-Encoding`, `Upgrade`; and RFC 2616's `Trailer`,
  `Proxy-Authenticate`, `Proxy-Authorization`);
- framing: `Content-Length` (the gateway frames what it sends itself);
- the client's credentials (`Authorization`, `Cookie`, `X-Api-Key`, `Api-Key`): the backend's own
  key replaces them; and `Host`, which the backend's host replaces; `Expect`, which the gateway
  answered;
- the headers the gateway sets on every upstream request (`Content-Type`, `Accept`,
  `Accept-Encoding`, `User-Agent`, `X-Request-ID`, which carries the client's value) and those a
  backend's `headers:` set.
A route's `forward_headers: {allow: [...], deny: [...]}` narrows this: with `allow`, only the
headers it names go on; `deny` names headers that never do. An entry is a header name, or a prefix
ending in `*` (`openai-*`). Naming a header that is never forwarded is a configuration error.

Response headers, backend to client, pass back the same way, on success and on error: all but the
hop-by-hop and framing headers, and those the gateway sets itself (`Date`, `X-Request-ID`,
`X-Tokenrace-Backend`; for streams `Cache-Control`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

# RFC 9110 §7.6.1 (and RFC 2616 §13.5.1, which named the last three).
HOP_BY_HOP = frozenset(
    ("connection", "proxy-connection", "keep-alive", "te", "transfer-encoding", "upgrade")
    + ("trailer", "proxy-authenticate", "proxy-authorization")
)
FRAMING = frozenset(("content-length", "transfer-encoding"))
CREDENTIALS = frozenset(("authorization", "cookie", "x-api-key", "api-key"))
# Set by the gateway on every upstream request (runtime.Backend's head and the attempt's own lines).
GATEWAY_SET = frozenset(("host", "expect", "content-type", "accept", "accept-encoding", "user-agent", "x-request-id"))
NEVER = HOP_BY_HOP | FRAMING | CREDENTIALS | GATEWAY_SET
# Response headers the gateway writes itself.
RESPONSE_OWN = frozenset(("date", "x-request-id", "x-tokenrace-backend"))
_MEMO_LIMIT = 4096  # distinct header names remembered per filter (clients could send any number)
_TCHAR = frozenset("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyz")


def never_reason(name: str) -> str | None:
    """Why a header named in `forward_headers` can never be forwarded (None: it can)."""
    low = name.lower()
    if low in HOP_BY_HOP:
        return "is a hop-by-hop header (RFC 9110 7.6.1): it is never forwarded"
    if low in FRAMING:
        return "is a framing header: the gateway frames each message itself"
    if low in CREDENTIALS:
        return "carries the client's credentials: the backend's own key replaces it"
    if low in GATEWAY_SET:
        return "is set by the gateway on every upstream request"
    return None


def pattern_problem(entry: str) -> str | None:
    """What is wrong with a `forward_headers` entry (None: nothing)."""
    name = entry[:-1] if entry.endswith("*") else entry
    if not name and entry != "*":
        return "must be a header name, or a prefix ending in *"
    if any(c not in _TCHAR for c in name.lower()):
        return f"{entry!r} is not a header name (letters, digits and !#$%&'*+-.^_`|~ only)"
    if entry.endswith("*"):
        return None
    reason = never_reason(entry)
    return f"{entry} {reason}" if reason is not None else None


class _Patterns:
    """Header names and `prefix*` patterns, matched case-insensitively."""

    __slots__ = ("names", "prefixes")

    def __init__(self, entries: Iterable[str]) -> None:
        low = [e.lower() for e in entries]
        self.names = frozenset(e for e in low if not e.endswith("*"))
        self.prefixes = tuple(e[:-1] for e in low if e.endswith("*"))

    def match(self, name: str) -> bool:
        return name in self.names or (bool(self.prefixes) and name.startswith(self.prefixes))


class RequestFilter:
    """Which of a client's request headers a route forwards, and their bytes for the upstream head."""

    __slots__ = ("allow", "deny", "_memo")

    def __init__(self, allow: Iterable[str] | None = None, deny: Iterable[str] = ()) -> None:
        self.allow = _Patterns(allow) if allow is not None else None
        self.deny = _Patterns(deny)
        self._memo: dict[str, bool] = {}

    def forwards(self, name: str) -> bool:
        """Whether a header (lower-case name) goes to the backend, Connection's options aside."""
        known = self._memo.get(name)
        if known is None:
            known = name not in NEVER and not self.deny.match(name) and (self.allow is None or self.allow.match(name))
            if len(self._memo) < _MEMO_LIMIT:
                self._memo[name] = known
        return known

    def lines(self, headers: Mapping[str, str], skip: frozenset[str] = frozenset()) -> bytes:
        """The header lines to add to the upstream request (`headers` has lower-case names).

        Runs for every request: the usual client sends only headers that are never forwarded, and
        then this costs one dict lookup per header."""
        memo = self._memo
        out: list[str] | None = None
        for name, value in headers.items():
            ok = memo.get(name)
            if ok is False or (ok is None and not self.forwards(name)) or name in skip:
                continue
            if out is None:
                out = []
            out.append(f"{name}: {value}\r\n")
        if out is None:
            return b""
        options = _connection_options(headers.get("connection"))
        if options:
            out = [line for line in out if line.partition(":")[0] not in options]
        return "".join(out).encode("latin-1", "replace")


def response_headers(headers: Mapping[str, str], drop: frozenset[str] = frozenset()) -> dict[str, str]:
    """A backend's response headers (lower-case names) to pass to the client, in Title-Case."""
    out: dict[str, str] = {}
    for name, value in headers.items():
        title = _passed.get(name)
        if title is None:
            title = _passed_name(name)
        if title and name not in drop:
            out[title] = value
    if "connection" in headers:
        options = _connection_options(headers["connection"])
        out = {k: v for k, v in out.items() if k.lower() not in options}
    return out


_passed: dict[str, str] = {}  # response header name -> its Title-Case, or "" when it is not passed on


def _passed_name(name: str) -> str:
    """`retry-after` -> `Retry-After`; "" for a header never passed on (the backend's own case was
    lost when its head was read)."""
    passed = name not in HOP_BY_HOP and name not in FRAMING and name not in RESPONSE_OWN
    title = "-".join(part[:1].upper() + part[1:] for part in name.split("-")) if passed else ""
    if len(_passed) < _MEMO_LIMIT:
        _passed[name] = title
    return title


def _connection_options(value: str | None) -> frozenset[str]:
    """The header names a Connection header lists (RFC 9110 §7.6.1)."""
    if not value:
        return frozenset()
    return frozenset(t.strip(" \t").lower() for t in value.split(","))
