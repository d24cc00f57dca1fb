"""Where training-token capture writes (gym_runtime/config/token_capture.py): the job's config
layer (NeMo RL's actor through the drop-in, NMP's host config) names the capture directory and the
ledger's lineage root, kept as given and writable by the model servers; a package's are replaced
by the operator's directory and a root under it, with a warning each."""

from __future__ import annotations

from pathlib import Path

import pytest

from gym_runtime.config import build_config
from gym_runtime.config.token_capture import writable_dir
from gym_runtime.package import load_package
from tests.config.conftest import POLICY

MODEL = {"policy_model": {"responses_api_models": {"vllm_model": {"entrypoint": "app.py"}}}}
LEDGER = "nemo_gym.token_id_capture.lineage:FileLineageStore"


def _capture(directory: str | None, root: str) -> dict:
    block = {"enabled": True, "all_agents": True, "rebuild_response": False, "external_staging": True}
    block |= {"lineage_store": LEDGER, "lineage_store_kwargs": {"root": root}}
    return {"token_id_capture": block | ({"dir": directory} if directory else {})}


def _build(root: Path, builtins: Path, job: dict | None = None):
    layer = (job, "initial_global_config_dict") if job is not None else None
    return build_config(load_package(root), [], POLICY, builtin_root=builtins, job_config=layer)


def test_the_jobs_directory_and_lineage_root_are_kept_and_writable_by_model_servers(
    pkg_with, builtins: Path, tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.delenv("GYM_RUNTIME_TOKEN_CAPTURE_DIR", raising=False)
    capture = tmp_path / "trainer" / "capture"
    lineage = tmp_path / "trainer" / "ledger"
    root = pkg_with({"configs/model.yaml": MODEL}, servers=[("responses_api_models", "vllm_model")])
    merged = _build(root, builtins, _capture(str(capture), str(lineage)))
    block = merged.data["token_id_capture"]
    assert block["dir"] == str(capture) and block["lineage_store_kwargs"]["root"] == str(lineage)
    assert not [w for w in merged.warnings if w.code == "GR-CONFIG-TOKEN-CAPTURE-DIR"]
    assert writable_dir(merged.data, "responses_api_models") == [capture, lineage]
    assert capture.is_dir() and lineage.is_dir()
    assert writable_dir(merged.data, "responses_api_agents") == []


def test_a_lineage_root_under_the_directory_is_not_listed_twice(pkg_with, builtins: Path, tmp_path: Path) -> None:
    capture = tmp_path / "capture"
    root = pkg_with({"configs/model.yaml": MODEL}, servers=[("responses_api_models", "vllm_model")])
    merged = _build(root, builtins, _capture(str(capture), str(capture / "lineage")))
    assert writable_dir(merged.data, "responses_api_models") == [capture]


@pytest.mark.parametrize("job_dir", [False, True])
def test_a_packages_directory_and_lineage_root_are_replaced(
    pkg_with, builtins: Path, tmp_path: Path, monkeypatch, job_dir: bool
) -> None:
    """The package names both; the directory is the operator's (or the job's), the root goes under it."""
    operator = tmp_path / "operator-capture"
    trainer = tmp_path / "trainer-capture"
    monkeypatch.setenv("GYM_RUNTIME_TOKEN_CAPTURE_DIR", str(operator))
    config = MODEL | _capture("/home/author/capture", "/home/author/ledger")
    root = pkg_with({"configs/model.yaml": config}, servers=[("responses_api_models", "vllm_model")])
    job = {"token_id_capture": {"dir": str(trainer)}} if job_dir else None
    merged = _build(root, builtins, job)
    chosen = trainer if job_dir else operator
    block = merged.data["token_id_capture"]
    assert block["dir"] == str(chosen)
    assert block["lineage_store_kwargs"]["root"] == str(chosen / "lineage")
    replaced = {w.key: w for w in merged.warnings if w.code == "GR-CONFIG-TOKEN-CAPTURE-DIR"}
    assert "token_id_capture.lineage_store_kwargs.root" in replaced
    assert replaced["token_id_capture.lineage_store_kwargs.root"].file.endswith("configs/model.yaml")
    assert ("token_id_capture.dir" in replaced) is not job_dir
    assert writable_dir(merged.data, "responses_api_models") == [chosen]


def test_the_model_server_sees_the_name_of_the_control_token_variable(pkg_with, builtins: Path, tmp_path: Path) -> None:
    """NeMo RL main names the variable (``control_auth_token_env``); Gym's model server reads the token
    from the variable its config names, so the name must reach it unmasked (it was ``****``, and the
    server refused to start: "requires a control bearer in environment variable ****")."""
    root = pkg_with({"configs/model.yaml": MODEL}, servers=[("responses_api_models", "vllm_model")])
    job = _capture(str(tmp_path / "capture"), str(tmp_path / "capture" / "lineage"))
    job["token_id_capture"]["control_auth_token_env"] = "NEMO_GYM_TOKEN_CAPTURE_CONTROL_TOKEN"
    merged = _build(root, builtins, job)
    view = merged.secrets.view(merged.data, "policy_model")
    assert view["token_id_capture"]["control_auth_token_env"] == "NEMO_GYM_TOKEN_CAPTURE_CONTROL_TOKEN"
