"""looplift `server`: an OpenAI-compatible gateway in front of vLLM.

Model aliases map to versioned LoRA adapters that can be hot-swapped without dropping a request, rolled
back with one call, or tried on a share of the traffic first (canary), over one vLLM or several replicas;
the package also starts and supervises vLLM, and exposes `/health` and Prometheus `/metrics`. The CLI
group lives in `server.cli.app` (mounted as `looplift server`).
"""

from ._admin import AdminClient
from ._auth import check_bind, key_id
from ._gateway import create_gateway
from ._models import CanaryInfo, CanaryView, HistoryEvent, ReplicaInfo, SwapResult, VersionInfo, VersionsView
from ._replicas import LocalReplica, start_local_replicas
from ._serve import GatewayHandle, start_gateway_in_thread
from ._settings import GatewaySettings
from ._tools import chat_template, detect_tokenizer_mode, detect_tool_parser, mistral_tokenizer_file, resolve_tool_parser
from ._validate import validate_adapter
from ._vllm import VLLMConfig, VLLMServer, start_vllm
from .errors import (
    AdapterInvalidError,
    AdminAuthError,
    AdminTokenMissingError,
    CanaryError,
    GatewayStartError,
    InsecureBindError,
    InvalidNameError,
    NothingToRollBackError,
    ServerError,
    UpstreamError,
    VersionExistsError,
    VersionNotFoundError,
    VLLMDiedError,
    VLLMStartError,
)

__all__ = [
    "AdapterInvalidError",
    "AdminAuthError",
    "AdminClient",
    "AdminTokenMissingError",
    "CanaryError",
    "CanaryInfo",
    "CanaryView",
    "GatewayHandle",
    "GatewaySettings",
    "GatewayStartError",
    "HistoryEvent",
    "InsecureBindError",
    "InvalidNameError",
    "LocalReplica",
    "NothingToRollBackError",
    "ReplicaInfo",
    "ServerError",
    "SwapResult",
    "UpstreamError",
    "VLLMConfig",
    "VLLMDiedError",
    "VLLMServer",
    "VLLMStartError",
    "VersionExistsError",
    "VersionInfo",
    "VersionNotFoundError",
    "VersionsView",
    "chat_template",
    "check_bind",
    "create_gateway",
    "detect_tokenizer_mode",
    "detect_tool_parser",
    "key_id",
    "mistral_tokenizer_file",
    "resolve_tool_parser",
    "start_gateway_in_thread",
    "start_local_replicas",
    "start_vllm",
    "validate_adapter",
]
