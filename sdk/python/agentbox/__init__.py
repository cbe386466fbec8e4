"""agentbox: the Python SDK of the agentbox sandbox runtime.

Sync and asyncio APIs of the same shape::

    from agentbox import Sandbox

    with Sandbox.create() as sbx:             # AGENTBOX_URL, AGENTBOX_API_KEY
        print(sbx.commands.run("uname -a").stdout)
        print(sbx.run_code("1 + 1").text)     # "2"

    from agentbox import AsyncSandbox

    async with AsyncSandbox.create() as sbx:
        await sbx.files.write("hello.txt", "hi")

Episode environments for RL and agent loops are in :mod:`agentbox.envs`.
"""

from ._async import (AsyncCode, AsyncCommands, AsyncFiles, AsyncPty, AsyncSandbox, AsyncTemplates, AsyncVolumes,
                     AsyncWatchHandle)
from ._base import ConnectionConfig
from ._pty import AsyncPtySession, PtySession
from ._sync import Code, Commands, Files, Pty, Sandbox, Templates, Volumes, WatchHandle
from .errors import (
    AgentboxError,
    CommandExitError,
    ConflictError,
    DeadlineExceededError,
    InsufficientSpaceError,
    InternalError,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    QuotaExceededError,
    StartTimeoutError,
    StepTimeoutError,
    TooLargeError,
    TransportError,
    UnauthenticatedError,
    UnavailableError,
)
from .models import (
    CodeContext,
    CommandEvent,
    CommandResult,
    EntryInfo,
    Execution,
    FilesystemEvent,
    ExecutionError,
    LogEntry,
    Logs,
    NetworkPolicy,
    OutputMessage,
    PreviewToken,
    Resources,
    Result,
    SandboxInfo,
    SandboxStats,
    ServerInfo,
    Template,
    Volume,
    VolumeMount,
)

__version__ = "0.1.0"

__all__ = [
    "Sandbox", "AsyncSandbox", "Commands", "AsyncCommands", "Code", "AsyncCode", "Files", "AsyncFiles",
    "Pty", "AsyncPty", "PtySession", "AsyncPtySession", "Templates", "AsyncTemplates", "Volumes", "AsyncVolumes", "ConnectionConfig",
    "WatchHandle", "AsyncWatchHandle", "FilesystemEvent",
    "AgentboxError", "CommandExitError", "ConflictError", "DeadlineExceededError", "InsufficientSpaceError",
    "InternalError", "InvalidArgumentError", "NotFoundError", "PermissionDeniedError", "QuotaExceededError",
    "StartTimeoutError", "StepTimeoutError", "TooLargeError", "TransportError", "UnauthenticatedError",
    "UnavailableError",
    "CodeContext", "CommandEvent", "CommandResult", "EntryInfo", "Execution", "ExecutionError", "LogEntry",
    "Logs", "NetworkPolicy", "OutputMessage", "PreviewToken", "Resources", "Result", "SandboxInfo",
    "SandboxStats", "ServerInfo", "Template", "Volume", "VolumeMount",
]
