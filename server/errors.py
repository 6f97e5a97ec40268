"""The `server` package's exception tree. Every message says what went wrong and how to fix it.

    ServerError                      base of everything below
    ├── VLLMStartError               vLLM exited or never became healthy (carries command + log tail)
    ├── VLLMDiedError                the watchdog saw a running vLLM exit
    ├── GatewayStartError            the gateway thread could not bind or start
    │   └── InsecureBindError        a non-loopback address without API keys (and without --insecure)
    ├── AdminTokenMissingError       an admin command found no token to send
    ├── AdminAuthError               401 from the admin API (missing or wrong token)
    ├── AdapterInvalidError          400: an adapter directory failed validation (names the problem)
    ├── VersionNotFoundError         404: no such version
    ├── InvalidNameError             400: a requested version name has characters not allowed
    ├── VersionExistsError           409: a version with that name already exists
    ├── NothingToRollBackError       409: no previous serving version
    ├── CanaryError                  400/409: a canary that cannot start, or a decision on a canary that changed
    └── UpstreamError                vLLM refused or failed an operation (carries its message)

Server-side errors carry `http_status` (what the gateway answers) and `code` (the OpenAI-style
error code); the admin client raises the same classes from the gateway's answers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence


class ServerError(Exception):
    """Base class of every error raised by the `server` package."""

    http_status: int = 500
    code: str = "server_error"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class VLLMStartError(ServerError):
    """vLLM exited before it was healthy, or did not become healthy in time."""

    code = "vllm_start_failed"

    def __init__(
        self, reason: str, *, command: Sequence[str], log_path: Path, log_tail: str,
        returncode: Optional[int] = None,
    ) -> None:
        self.reason = reason
        #: The exit code when the process exited before it was healthy (negative: the signal that killed it).
        self.returncode = returncode
        self.command = list(command)
        self.log_path = log_path
        self.log_tail = log_tail
        super().__init__(
            f"vLLM did not start: {reason}.\n"
            f"command: {' '.join(self.command)}\n"
            f"log: {log_path}\n"
            f"--- last lines of the log ---\n{log_tail}\n"
            "--- end of log ---\n"
            "Fix the cause shown in the log (model directory, --max-model-len, memory, port) and start again."
        )


class VLLMDiedError(ServerError):
    """The watchdog noticed that a vLLM process that had been healthy exited."""

    code = "vllm_died"

    def __init__(self, returncode: Optional[int], log_path: Path, log_tail: str) -> None:
        self.returncode = returncode
        self.log_path = log_path
        self.log_tail = log_tail
        super().__init__(
            f"vLLM exited with code {returncode}; see {log_path}. Last lines:\n{log_tail}\n"
            "Restart the stack with `looplift server start`."
        )


class GatewayStartError(ServerError):
    """The gateway's uvicorn server failed to start."""

    code = "gateway_start_failed"


class InsecureBindError(GatewayStartError):
    """The gateway would serve (and learn from) anyone on the network without an API key."""

    code = "insecure_bind"


class AdminTokenMissingError(ServerError):
    """No admin token was given and none could be found."""

    code = "admin_token_missing"


class AdminAuthError(ServerError):
    """The admin API refused the token (or none was sent)."""

    http_status = 401
    code = "invalid_admin_token"


class AdapterInvalidError(ServerError):
    """An adapter directory is missing, incomplete or incompatible with the running vLLM."""

    http_status = 400
    code = "invalid_adapter"

    def __init__(self, path: str, problem: str, kind: str = "adapter") -> None:
        self.path = path
        self.problem = problem
        self.kind = kind
        what = ("a Hugging Face save_pretrained output: config.json and its weights" if kind == "checkpoint"
                else "a peft LoRA save_pretrained output")
        super().__init__(
            f"{kind} {path!r} refused: {problem}. Nothing was changed; fix the {kind} directory ({what}) and "
            "load it again."
        )


class VersionNotFoundError(ServerError):
    """No version of that name is registered."""

    http_status = 404
    code = "version_not_found"

    def __init__(self, version: str, known: Sequence[str] = ()) -> None:
        self.version = version
        hint = f" Known versions: {', '.join(known)}." if known else ""
        super().__init__(f"version {version!r} does not exist.{hint} List them with `looplift server versions`.")


class InvalidNameError(ServerError):
    """A version name has characters that are not allowed."""

    http_status = 400
    code = "invalid_version_name"

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(
            f"version name {name!r} is not allowed: use letters, digits, '.', '_' or '-' (at most 64 "
            "characters, starting with a letter or digit), or omit the name to get the next one."
        )


class VersionExistsError(ServerError):
    """A version (or the alias) already uses that name."""

    http_status = 409
    code = "version_exists"

    def __init__(self, version: str) -> None:
        self.version = version
        super().__init__(
            f"the name {version!r} is already taken by a version or the alias; "
            "pick another --name or omit it to get the next free version name."
        )


class NothingToRollBackError(ServerError):
    """Rollback was asked for but no earlier version was ever serving."""

    http_status = 409
    code = "nothing_to_roll_back"


class CanaryError(ServerError):
    """A canary request that does not fit the registry's state (version not loaded, already serving, another
    canary running, a decision about a canary or serving version that is no longer the current one)."""

    http_status = 409
    code = "canary_conflict"

    def __init__(self, message: str, *, http_status: int = 409) -> None:
        super().__init__(message)
        self.http_status = http_status


class BaseConflictError(ServerError):
    """An operation that does not fit the full-weight version (base model) vLLM serves now: an adapter registered
    on another base, a canary of a full version, or full versions on a gateway that cannot start vLLM sets."""

    http_status = 409
    code = "base_conflict"


class UpstreamError(ServerError):
    """vLLM refused or failed an adapter operation, or could not be reached."""

    http_status = 502
    code = "upstream_error"

    def __init__(self, message: str, *, status: Optional[int] = None) -> None:
        self.status = status
        super().__init__(message)
