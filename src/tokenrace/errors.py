"""Domain errors. The core raises these; the CLI edge turns them into one line and an exit code."""


class TokenraceError(Exception):
    """An error the user can act on. `str(err)` is the one-line message."""

    exit_code = 2


class UsageError(TokenraceError):
    """Bad input: a flag, a file, a name."""

    exit_code = 2


class PreflightError(TokenraceError):
    """The endpoint cannot be benchmarked as configured (auth, model, URL)."""

    exit_code = 3


class EngineError(TokenraceError):
    """An inference engine failed to start or become ready."""

    exit_code = 4
