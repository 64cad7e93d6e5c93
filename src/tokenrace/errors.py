"""Domain errors. The core raises these; the CLI edge turns them into one line and an exit code.

The core never speaks of command-line flags: an error about one input is an `InvalidInput` that
names the input (`param`, the settings field such as "rate" or "prompts"), and `cli/` words it as
the flag the user typed.
"""


class TokenraceError(Exception):
    """An error the user can act on. `str(err)` is the one-line message."""

    exit_code = 2


class UsageError(TokenraceError):
    """Bad input: a flag, a file, a name."""

    exit_code = 2


class InvalidInput(UsageError):
    """One input's value is wrong. `param` names the input, `problem` says what is wrong with it."""

    def __init__(self, param: str, problem: str) -> None:
        super().__init__(f"{param}: {problem}")
        self.param = param
        self.problem = problem


class PreflightError(TokenraceError):
    """The endpoint cannot be benchmarked as configured (auth, model, URL)."""

    exit_code = 3


class EngineError(TokenraceError):
    """An inference engine failed to start or become ready."""

    exit_code = 4
