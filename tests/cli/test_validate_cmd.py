"""``gym-runtime validate``: exact success output, each rule broken in turn, exit codes, no traceback."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from gym_runtime.cli.main import main
from tests.helpers.packages import make_package, write_server, write_wheel

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


@pytest.mark.parametrize("fmt", ["native-v1", "wheels-v1", "adapter-wheels-v1"])
@pytest.mark.parametrize("as_json", [False, True])
def test_valid_package_prints_exactly(tmp_path: Path, capsys, fmt: str, as_json: bool) -> None:
    root = make_package(tmp_path / "p", fmt)
    code, out, err = run(capsys, "validate", str(root), *(["--json"] if as_json else []))
    release = {
        "version": "0.7.0",
        "line": "0.7",
        "source": "the runtime's default: the current NeMo Gym release",
        "requires_python": ">=3.13.14",
        "openai": "==2.44.0",
        "ray": ">=2.58.0",
    }
    line = (
        "gym release: NeMo Gym 0.7.0 (line 0.7, Requires-Python >=3.13.14; from the runtime's default: the "
        "current NeMo Gym release)\n"
    )
    assert code == 0 and err == ("" if as_json else line)
    want = {"valid": True, "format": fmt, "name": "acme-math-env", "gym_release": release}
    assert out == json.dumps(want) + "\n"


def test_bundled_examples_validate(tmp_path: Path, capsys) -> None:
    """Every package under examples/ validates. A wheels format example whose wheels/ is produced by
    vendoring (not committed) fails with exactly GR-PKG-WHEELS-MISSING as it is, and validates once a
    wheel is present (a copy with one tiny wheel stands in for the vendored closure)."""
    pkgs = sorted(p.parent for p in EXAMPLES.glob("*/nemo-environment.yaml"))
    assert pkgs, "examples/ holds no environment package"
    for pkg in pkgs:
        fmt = yaml.safe_load((pkg / "nemo-environment.yaml").read_text())["format"]
        if fmt != "native-v1" and not (pkg / "wheels").exists():
            code, out, err = run(capsys, "validate", "--json", str(pkg))
            codes = [e["code"] for e in json.loads(out)["error"]["violations"]]
            assert code == 1 and codes == ["GR-PKG-WHEELS-MISSING"], err
            pkg = Path(shutil.copytree(pkg, tmp_path / pkg.name, symlinks=True))
            write_wheel(pkg / "wheels", "pip-24.0-py3-none-any.whl")
        code, out, err = run(capsys, "validate", str(pkg))
        assert code == 0, (pkg, err)
        assert json.loads(out)["valid"] is True and json.loads(out)["format"] == fmt


def _yaml_edit(path: Path, fn: Callable[[dict], None]) -> None:
    data = yaml.safe_load(path.read_text())
    fn(data)
    path.write_text(yaml.safe_dump(data, sort_keys=False))


def _manifest(fn):
    return lambda root: _yaml_edit(root / "nemo-environment.yaml", fn)


def _config(rel: str, fn):
    return lambda root: _yaml_edit(root / rel, fn)


AGENT = "acme_math_agent.responses_api_agents.acme_agent"
RES = "acme_math.resources_servers.acme_math"

# (name, format, breaker, expected code, text the message must name)
BREAKS = [
    ("format-missing", "native-v1", _manifest(lambda d: d.pop("format")), "GR-PKG-FORMAT", "format"),
    ("format-unknown", "native-v1", _manifest(lambda d: d.update(format="v9")), "GR-PKG-FORMAT", "v9"),
    ("unknown-key", "native-v1", _manifest(lambda d: d.update(egress="all")), "GR-PKG-MANIFEST-UNKNOWN-KEY", "egress"),
    ("name-missing", "native-v1", _manifest(lambda d: d["metadata"].pop("name")), "GR-PKG-METADATA", "metadata.name"),
    (
        "name-too-long",
        "wheels-v1",
        _manifest(lambda d: d["metadata"].update(name="n" * 256)),
        "GR-PKG-METADATA",
        "metadata.name",
    ),
    (
        "adapter-elsewhere",
        "wheels-v1",
        _manifest(lambda d: d.update(adapter={"agent": "verifiers_agent"})),
        "GR-PKG-ADAPTER",
        "adapter",
    ),
    ("adapter-missing", "adapter-wheels-v1", _manifest(lambda d: d.pop("adapter")), "GR-PKG-ADAPTER", "adapter"),
    (
        "adapter-unknown-agent",
        "adapter-wheels-v1",
        _manifest(lambda d: d["adapter"].update(agent="x_agent")),
        "GR-PKG-ADAPTER",
        "x_agent",
    ),
    (
        "dotdot",
        "wheels-v1",
        _manifest(lambda d: d["config_paths"].append("../x.yaml")),
        "GR-PKG-CONFIG-PATH",
        "../x.yaml",
    ),
    (
        "duplicate",
        "wheels-v1",
        _manifest(lambda d: d["config_paths"].append(d["config_paths"][0])),
        "GR-PKG-CONFIG-DUPLICATE",
        "configs/policy_model.yaml",
    ),
    (
        "native-prefix",
        "native-v1",
        _manifest(lambda d: d["config_paths"].append("configs/a.yaml")),
        "GR-PKG-CONFIG-PREFIX",
        "configs/a.yaml",
    ),
    (
        "adapter-prefix",
        "adapter-wheels-v1",
        _manifest(lambda d: d["config_paths"].append("x/a.yaml")),
        "GR-PKG-CONFIG-PREFIX",
        "x/a.yaml",
    ),
    (
        "config-missing",
        "wheels-v1",
        _manifest(lambda d: d["config_paths"].append("configs/none.yaml")),
        "GR-PKG-CONFIG-MISSING",
        "configs/none.yaml",
    ),
    (
        "config-symlink",
        "wheels-v1",
        lambda r: (
            os.symlink("acme_math.yaml", r / "configs/l.yaml"),
            _yaml_edit(r / "nemo-environment.yaml", lambda d: d["config_paths"].append("configs/l.yaml")),
        ),
        "GR-PKG-CONFIG-SYMLINK",
        "configs/l.yaml",
    ),
    (
        "config-escape",
        "wheels-v1",
        lambda r: (
            os.symlink("/etc", r / "configs/etc"),
            _yaml_edit(r / "nemo-environment.yaml", lambda d: d["config_paths"].append("configs/etc/hostname")),
        ),
        "GR-PKG-CONFIG-ESCAPE",
        "configs/etc/hostname",
    ),
    ("jsonl", "native-v1", lambda r: (r / "train.jsonl").write_text("{}\n"), "GR-PKG-JSONL", "train.jsonl"),
    ("wheels-missing", "wheels-v1", lambda r: shutil.rmtree(r / "wheels"), "GR-PKG-WHEELS-MISSING", "wheels"),
    (
        "wheels-empty",
        "wheels-v1",
        lambda r: [p.unlink() for p in (r / "wheels").iterdir()],
        "GR-PKG-WHEELS-EMPTY",
        "wheels",
    ),
    (
        "wheels-nested",
        "wheels-v1",
        lambda r: write_wheel(r / "wheels/sub", "a-1.0-py3-none-any.whl"),
        "GR-PKG-WHEELS-NESTED",
        "wheels/sub",
    ),
    (
        "wheels-non-wheel",
        "adapter-wheels-v1",
        lambda r: (r / "wheels/a-1.0.tar.gz").write_text("x"),
        "GR-PKG-WHEELS-NON-WHEEL",
        "wheels/a-1.0.tar.gz",
    ),
    (
        "wheels-symlink",
        "wheels-v1",
        lambda r: os.symlink("pip-24.0-py3-none-any.whl", r / "wheels/pop-1.0-py3-none-any.whl"),
        "GR-PKG-WHEELS-SYMLINK",
        "pop-1.0",
    ),
    (
        "wheels-duplicate",
        "wheels-v1",
        lambda r: write_wheel(r / "wheels", "Acme_Math_Lib-0.2.0-py3-none-any.whl"),
        "GR-PKG-WHEELS-DUPLICATE",
        "acme-math-lib",
    ),
    (
        "server-both",
        "native-v1",
        lambda r: (r / "resources_servers/acme_math/pyproject.toml").write_text(""),
        "GR-PKG-SERVER-BOTH",
        "resources_servers/acme_math/",
    ),
    (
        "server-neither",
        "native-v1",
        lambda r: (r / "resources_servers/acme_math/requirements.txt").unlink(),
        "GR-PKG-SERVER-NO-INSTALL",
        "resources_servers/acme_math/",
    ),
    (
        "two-implementations",
        "wheels-v1",
        _config(
            "configs/acme_math.yaml",
            lambda d: d["acme_math"]["resources_servers"].update(other={"entrypoint": "app.py"}),
        ),
        "GR-CONFIG-TWO-IMPLEMENTATIONS",
        "other",
    ),
    (
        "instance-dot",
        "wheels-v1",
        _config("configs/acme_math.yaml", lambda d: d.update({"a.b": d.pop("acme_math_agent")})),
        "GR-CONFIG-INSTANCE-NAME",
        "a.b",
    ),
    (
        "domain-missing",
        "native-v1",
        _config(
            "resources_servers/acme_math/configs/acme_math.yaml",
            lambda d: d["acme_math"]["resources_servers"]["acme_math"].pop("domain"),
        ),
        "GR-CONFIG-DOMAIN",
        RES + ".domain",
    ),
    (
        "domain-bad",
        "wheels-v1",
        _config(
            "configs/acme_math.yaml", lambda d: d["acme_math"]["resources_servers"]["acme_math"].update(domain="maths")
        ),
        "GR-CONFIG-DOMAIN",
        "maths",
    ),
    (
        "implementation-missing",
        "wheels-v1",
        lambda r: shutil.rmtree(r / "responses_api_agents/acme_agent"),
        "GR-CONFIG-IMPLEMENTATION",
        "responses_api_agents/acme_agent/",
    ),
    (
        "port-duplicate",
        "wheels-v1",
        _config(
            "configs/acme_math.yaml",
            lambda d: (
                d["acme_math"]["resources_servers"]["acme_math"].update(port=9100),
                d["acme_math_agent"]["responses_api_agents"]["acme_agent"].update(port=9100),
            ),
        ),
        "GR-CONFIG-PORT-DUPLICATE",
        "'acme_math_agent'",
    ),
    (
        "ref-missing",
        "wheels-v1",
        _config(
            "configs/acme_math.yaml",
            lambda d: d["acme_math_agent"]["responses_api_agents"]["acme_agent"]["resources_server"].update(
                name="acme_mat"
            ),
        ),
        "GR-CONFIG-REF",
        AGENT + ".resources_server",
    ),
    (
        "missing-value",
        "wheels-v1",
        _config(
            "configs/acme_math.yaml",
            lambda d: d["acme_math_agent"]["responses_api_agents"]["acme_agent"].update(judge="???"),
        ),
        "GR-CONFIG-MISSING",
        AGENT + ".judge",
    ),
    (
        "interpolation",
        "wheels-v1",
        _config(
            "configs/acme_math.yaml",
            lambda d: d["acme_math_agent"]["responses_api_agents"]["acme_agent"].update(judge="${judge_url}"),
        ),
        "GR-CONFIG-INTERPOLATION",
        "judge_url",
    ),
    (
        "config-yaml",
        "wheels-v1",
        lambda r: (r / "configs/acme_math.yaml").write_text("a: [\n"),
        "GR-CONFIG-YAML",
        "line 2",
    ),
]


@pytest.mark.parametrize("name,fmt,breaker,code,names", BREAKS, ids=[b[0] for b in BREAKS])
def test_each_rule_broken_in_turn(tmp_path: Path, capsys, name, fmt, breaker, code, names) -> None:
    root = make_package(tmp_path / "p", fmt)
    breaker(root)
    rc, out, err = run(capsys, "validate", str(root), "--json")
    assert rc == 1
    doc = json.loads(out)
    assert doc["valid"] is False
    hits = [e for e in doc["error"]["violations"] if e["code"] == code]
    assert hits, doc["error"]
    assert any(names in " ".join(str(v) for v in e.values()) for e in hits), hits
    assert f"[{code}]" in err


def test_text_output_names_file_and_key(tmp_path: Path, capsys) -> None:
    root = make_package(tmp_path / "p", "native-v1")
    (root / "data.jsonl").write_text("{}\n")
    _yaml_edit(root / "nemo-environment.yaml", lambda d: d["metadata"].pop("name"))
    rc, out, err = run(capsys, "validate", str(root))
    assert rc == 1 and out == ""
    assert "[GR-PKG-JSONL] data.jsonl:" in err
    assert "[GR-PKG-METADATA] nemo-environment.yaml: metadata.name:" in err


def test_json_failure_carries_the_error_object_every_command_prints(tmp_path: Path, capsys) -> None:
    """README "Exit codes": one error shape for every command (`{"error": {...}}`, as `config --json`
    prints it), with validate's own result beside it; the error block still goes to stderr."""
    root = make_package(tmp_path / "p", "native-v1")
    (root / "data.jsonl").write_text("{}\n")
    rc, out, err = run(capsys, "validate", str(root), "--json")
    doc = json.loads(out)
    assert rc == 1 and sorted(doc) == ["error", "format", "gym_release", "name", "valid"]
    assert (doc["valid"], doc["format"], doc["name"]) == (False, "native-v1", "acme-math-env")
    error = doc["error"]
    assert error["code"] == "GR-PKG-INVALID" and error["message"] == f"environment package {root} is invalid"
    assert error["hint"] == "fix each problem, then run `gym-runtime validate` again"
    assert [v["code"] for v in error["violations"]] == ["GR-PKG-JSONL"]
    assert err.startswith(f"error[GR-PKG-INVALID]: environment package {root} is invalid\n  [GR-PKG-JSONL] data.jsonl:")
    rc, out, config_err = run(capsys, "config", str(root), "--json")  # the same error, the same shape
    assert rc == 1 and json.loads(out) == {"error": error} and config_err == err


def test_wheel_tags_with_platform(tmp_path: Path, capsys) -> None:
    root = make_package(tmp_path / "p", "wheels-v1")
    write_wheel(root / "wheels", "fastcodec-1.4.0-cp312-cp312-manylinux2014_x86_64.whl")
    assert run(capsys, "validate", str(root))[0] == 0
    rc, out, err = run(capsys, "validate", str(root), "--platform", "linux/amd64", "--python", "3.13", "--json")
    assert rc == 1
    (e,) = json.loads(out)["error"]["violations"]
    assert (
        e["code"] == "GR-PKG-WHEEL-TAG" and e["file"] == "wheels/fastcodec-1.4.0-cp312-cp312-manylinux2014_x86_64.whl"
    )
    assert run(capsys, "validate", str(root), "--platform", "linux/amd64", "--python", "3.12")[0] == 0
    assert run(capsys, "validate", str(root), "--platform", "linux/arm64", "--python", "3.12")[0] == 1


@pytest.mark.parametrize(
    "argv",
    [
        ["validate"],
        ["validate", "x", "--platform", "linux/s390x"],
        ["validate", "x", "--platform", "linux/amd64", "--python", "three"],
        ["validate", "x", "--bogus"],
        ["nonsense"],
        [],
    ],
)
def test_usage_errors_exit_2(tmp_path: Path, capsys, argv: list[str]) -> None:
    root = make_package(tmp_path / "x", "wheels-v1")
    argv = [str(root) if a == "x" else a for a in argv]
    try:
        rc = main(argv)
    except SystemExit as e:
        rc = e.code
    out, err = capsys.readouterr()
    assert rc == 2 and "Traceback" not in err and "GR-USAGE" in err


def test_package_path_is_a_file_or_missing(tmp_path: Path, capsys) -> None:
    f = tmp_path / "nemo-environment.yaml"
    f.write_text("format: native-v1\n")
    rc, _, err = run(capsys, "validate", str(f))
    assert rc == 1 and "GR-PKG-NOT-A-DIR" in err and str(f) in err
    rc, _, err = run(capsys, "validate", str(tmp_path / "nope"))
    assert rc == 1 and "GR-PKG-NOT-FOUND" in err


def test_builtin_implementation_counts(tmp_path: Path, capsys) -> None:
    """An implementation absent from the package but present in the built-in servers/ is fine."""
    builtin = Path(__file__).resolve().parents[2] / "servers"
    impls = sorted(p.parent for p in builtin.glob("responses_api_agents/*/app.py"))
    if not impls:
        pytest.skip("no built-in agents in servers/ yet")
    root = make_package(tmp_path / "p", "wheels-v1")
    name = impls[0].name
    shutil.rmtree(root / "responses_api_agents/acme_agent")
    (root / "configs/acme_math.yaml").write_text(
        (root / "configs/acme_math.yaml").read_text().replace("acme_agent:", f"{name}:")
    )
    rc, out, err = run(capsys, "validate", str(root))
    assert rc == 0, err


def test_server_dir_written_by_helper_is_valid(tmp_path: Path) -> None:
    assert (write_server(tmp_path, "resources_servers", "x") / "app.py").is_file()


@pytest.mark.parametrize("command", ["validate", "build", "vendor"])
def test_missing_package_names_only_pkg_as_required(capsys, command: str) -> None:
    with pytest.raises(SystemExit) as e:
        main([command])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "Traceback" not in err
    line = next(ln for ln in err.splitlines() if ln.startswith("error[GR-USAGE]"))
    assert line.startswith("error[GR-USAGE]: the following arguments are required: PKG")
    assert "KEY=VALUE" not in line  # overrides are optional
