"""Each package's public surface is exactly its `__all__` (STYLE 1): every listed name exists and is
documented, nothing public is left out of it, and every exception a package exports derives from that
package's base error, so `except <pkg>Error` catches all of them."""

from __future__ import annotations

import importlib
import inspect
import types

import pytest

EXPECTED = {
    "sdk": {"Budget", "EnvFamily", "EvalSuite", "Policy", "ToolCall", "ToolCallFunction", "task_slice",
            "AllOf", "Gated", "LLMJudge", "Weighted",
            "ClientStats", "CollectorClient", "Environment", "Feedback", "IngestResult", "Message", "Outcome",
            "Sampling", "SamplingRecord", "Step", "StepResult", "TRAJECTORY_SCHEMA_VERSION", "Task", "Trajectory", "TrajectoryBatch",
            "TurnTokens", "Verifier", "arun", "fisher_p", "looplift_home", "mcnemar_p", "run"},
    "sdk.infra": {"COST_LOG_ENV", "COST_TAG_ENV", "ServerThread", "ServerThreadError", "Shutdown", "TiedProcess",
                  "atomic_dir", "atomic_open", "atomic_write", "atomic_write_json", "cli_fail", "die_with_parent",
                  "ensure_secret", "env_without_config", "error_responses", "finish_openapi", "import_object",
                  "json_body", "print_table", "read_secret", "record_cost", "shutdown_on_signals", "spawn_tied",
                  "start_server_thread"},
    "sdk.wire": {"ALTERNATIVES_KEY", "API_KEY_HEADER", "APP_HEADER", "CAPTURE_HEADER", "CAPTURE_OFF", "EXCHANGES_KEY",
                 "KEY_ID_KEY", "REPLICA_HEADER", "RESPONSE_IDS_KEY", "REVISION_KEY", "SESSION_HEADER", "SESSION_KEY",
                 "SOURCE_GATEWAY", "SOURCE_KEY", "TASK_HEADER", "TOKEN_IDS_REDACTED_KEY", "TOOLS_KEY", "USAGE_KEY",
                 "VERSION_HEADER", "GENERATION_CONFIG_HEADER", "ErrorBody", "ErrorDetail", "asgi_header", "bearer_token",
                 "error_body", "error_message", "total_usage"},
    "server": {"AdapterInvalidError", "AdminAuthError", "AdminClient", "AdminTokenMissingError", "CanaryError",
               "CanaryInfo", "CanaryView", "GatewayHandle",
               "GatewaySettings", "GatewayStartError", "HistoryEvent", "InsecureBindError", "InvalidNameError",
               "LocalReplica", "NothingToRollBackError", "ReplicaInfo", "ServerError", "SwapResult", "UpstreamError",
               "VLLMConfig", "VLLMDiedError", "VLLMServer", "VLLMStartError", "VersionExistsError", "VersionInfo",
               "VersionNotFoundError", "VersionsView", "chat_template", "check_bind", "create_gateway", "detect_tokenizer_mode",
               "detect_tool_parser", "key_id", "mistral_tokenizer_file", "resolve_tool_parser", "start_gateway_in_thread",
               "start_local_replicas", "start_vllm", "validate_adapter"},
    "collector": {"Anonymizer", "AnonymizerState", "PurgeResult",
                  "CollectorError", "CollectorSettings", "CollectorStats", "ConfigError", "Entity",
                  "ExportError", "ExportFilters", "ExportManifest", "GroupStats", "LangfuseSettings", "MigrationError", "ServerHandle",
                  "StorageError", "Store", "UnknownResponseError",
                  "UnknownTrajectoryError", "UnsupportedFormatError", "WindowStats", "anonymize_text",
                  "anonymize_trajectory", "create_app", "export", "open_store", "record_event", "serve_in_thread"},
    "trainer": {"CanaryConfig", "CanaryWatch", "WatchConfig", "canary_config",
                "DEFAULT_STEPS", "FAMILIES", "SIZES", "ModelFamily", "NoLoraTargets", "build_family_model", "calc_demo",
                "check_build", "family_tokenizer", "ExtractionModelConfig", "build_extraction_model",
                "extraction_model_dir",
                "lookup_demo", "lora_model", "lora_targets", "model_family", "save_adapter",
                "BaseModelConfig", "CheckerVerifier", "ConfigError", "CycleResult", "DPOConfig", "DPOResult", "DiskSpaceError",
                "DistConfig",
                "Episode", "EvalResult", "GRPOConfig", "GRPOLearner", "GRPOResult", "GateConfig", "GateDecision",
                "Group", "HoldoutSuite", "JobConfig", "JobContext", "JobInterrupted", "JobLock", "JobResult",
                "LoopliftConfig", "OnlineConfig", "OnlineGRPO", "PassRateSampler", "PublishError", "SFTConfig",
                "SFTResult", "ScheduleConfig", "Scheduler", "ScriptedPromptEnv", "SliceRow", "StopToken", "SuiteError",
                "TRAIN_STEPS", "Timeline", "TokenDataError", "TokenRow", "TrainData", "TrainStep", "Trained",
                "TrainerError", "TrainingDataError", "Turn", "UniformSampler", "UpdateRecord", "UpdateStats",
                "base_model_dir", "build_base_model", "episode_rows", "evaluate", "gate", "groups_from_trajectories",
                "job_config", "list_runs", "load_config", "load_grpo_jsonl", "load_suite", "mcnemar_p", "prompt_suite",
                "run_cycle", "run_job", "schedule_config", "suite_from_holdout", "train_dpo", "train_grpo", "train_sft",
                "write_lora_adapter", "write_untrained"},
    "sandboxes": {"BackendChoice", "DockerSandbox", "EnginePlacer", "EngineSpec",
                  "EngineUnavailableError", "ExecResult", "ImageBuildError", "ImageNotFoundError", "LOCAL_LIMITATIONS",
                  "LocalSandbox", "OutputCallback", "PoolStats", "Sandbox", "SandboxBrokenError", "SandboxClosedError",
                  "SandboxConfig", "SandboxError", "SandboxFileError", "SandboxPool", "SandboxStartError",
                  "EnvSnapshot", "build_image", "choose_backend", "defaults", "detect_backend", "make_pool", "make_sandbox",
                  "reap_orphans"},
    "envs": {"ArithmeticEnv", "ArithmeticVerifier", "BACKEND_ENV", "CodeEnv", "HOST_FIX", "HOST_WARNING", "POOL_SIZE_ENV",
             "ShellEnv", "UNSAFE_ENV", "arithmetic_suite",
             "build_coding_tasks", "careless_extraction", "demonstration", "env_families", "extraction_family",
             "family_sources", "held_out_tasks", "training_tasks", "with_pool_stats"},
    "looplift": {"main"},
}
#: The base error each package's exported exceptions derive from.
BASE_ERROR = {"server": "ServerError", "collector": "CollectorError", "trainer": "TrainerError",
              "sandboxes": "SandboxError", "sdk.infra": "ServerThreadError"}


@pytest.mark.parametrize("package", sorted(EXPECTED))
def test_all_is_the_public_surface(package: str) -> None:
    mod = importlib.import_module(package)
    assert set(mod.__all__) == EXPECTED[package]
    assert len(mod.__all__) == len(set(mod.__all__))
    for name in mod.__all__:  # lazy packages (trainer) bind their names on first access
        getattr(mod, name)
    public = {n for n, v in vars(mod).items() if not n.startswith("_") and not isinstance(v, types.ModuleType)}
    public |= {n for n in mod.__all__ if isinstance(getattr(mod, n), types.ModuleType)}  # public sub-modules (sandboxes.defaults)
    public -= {"annotations", "TYPE_CHECKING", "Any"}  # typing helpers of the module itself
    assert public == set(mod.__all__), f"public names missing from {package}.__all__: {public - set(mod.__all__)}"
    for name in mod.__all__:
        obj = getattr(mod, name)
        assert obj is not None
        if inspect.isclass(obj) or inspect.isfunction(obj):
            assert inspect.getdoc(obj), f"{package}.{name} has no docstring"


@pytest.mark.parametrize("package", sorted(BASE_ERROR))
def test_exported_errors_share_the_package_base(package: str) -> None:
    mod = importlib.import_module(package)
    base = getattr(mod, BASE_ERROR[package])
    for name in mod.__all__:
        obj = getattr(mod, name)
        if inspect.isclass(obj) and issubclass(obj, Exception):
            assert issubclass(obj, base), f"{package}.{name} does not derive from {base.__name__}"


@pytest.mark.slow
def test_the_looplift_command_loads_without_torch() -> None:
    """Listing the groups (incl. `trainer`) and running `up --model DIR` must work on a [server]-only install."""
    import subprocess
    import sys

    code = ("import sys, looplift._cli, trainer, server, collector, sandboxes; "
            "print(sorted(m for m in ('torch', 'transformers', 'peft', 'vllm') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[]"


def test_trainer_lazy_exports_match_all() -> None:
    import trainer

    assert sorted(trainer.__all__) == sorted(trainer._EXPORTS)
