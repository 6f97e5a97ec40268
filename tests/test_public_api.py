"""Each package's public surface is exactly its `__all__`, and every listed name exists."""

from __future__ import annotations

import importlib

import pytest

EXPECTED = {
    "sdk": {"ClientStats", "CollectorClient", "Environment", "Feedback", "IngestResult", "Message", "Outcome",
            "Sampling", "Step", "StepResult", "TRAJECTORY_SCHEMA_VERSION", "Task", "Trajectory", "TrajectoryBatch",
            "TurnTokens", "Verifier", "arun", "looplift_home", "run"},
    "server": {"AdapterInvalidError", "AdminAuthError", "AdminClient", "AdminTokenMissingError", "GatewayHandle",
               "GatewaySettings", "GatewayStartError", "HistoryEvent", "InvalidNameError", "NothingToRollBackError",
               "ServerError", "SwapResult", "UpstreamError", "VLLMConfig", "VLLMDiedError", "VLLMServer",
               "VLLMStartError", "VersionExistsError", "VersionInfo", "VersionNotFoundError", "VersionsView",
               "create_gateway", "start_gateway_in_thread", "start_vllm", "validate_adapter"},
    "collector": {"Anonymizer", "AnonymizerState", "PurgeResult",
                  "CollectorError", "CollectorSettings", "CollectorStats", "ConfigError", "Entity",
                  "ExportError", "ExportFilters", "ExportManifest", "GroupStats", "MigrationError", "ServerHandle",
                  "StorageError", "Store", "UnknownTrajectoryError", "UnsupportedFormatError", "anonymize_text",
                  "anonymize_trajectory", "create_app", "export", "open_store", "serve_in_thread"},
    "trainer": {"BaseModelConfig", "DemoConfig", "EvalResult", "JobConfig", "JobResult", "PublishError", "SFTConfig",
                "SFTResult", "TrainerError", "TrainingDataError", "base_model_dir", "build_base_model", "evaluate",
                "gate", "run_demo", "run_job", "train_sft", "write_lora_adapter", "write_untrained"},
    "sandboxes": {"ArithmeticEnv", "ArithmeticVerifier", "BackendChoice", "CodeEnv", "ShellEnv", "DockerSandbox", "EngineUnavailableError",
                  "ExecResult", "ImageBuildError", "ImageNotFoundError", "LOCAL_LIMITATIONS", "LocalSandbox", "OutputCallback", "Sandbox",
                  "SandboxBrokenError", "SandboxClosedError", "SandboxConfig", "SandboxError", "SandboxFileError",
                  "SandboxPool", "SandboxStartError", "build_image", "choose_backend", "detect_backend",
                  "held_out_tasks", "make_pool", "make_sandbox", "reap_orphans", "training_tasks"},
}


@pytest.mark.parametrize("package", sorted(EXPECTED))
def test_all_is_the_public_surface(package: str) -> None:
    mod = importlib.import_module(package)
    assert set(mod.__all__) == EXPECTED[package]
    assert len(mod.__all__) == len(set(mod.__all__))
    for name in mod.__all__:
        assert getattr(mod, name) is not None
