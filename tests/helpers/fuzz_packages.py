"""Generated environment packages for property tests (hypothesis): manifests and configs.

Random YAML-ish structures, bad types, odd keys, deep nesting, non-UTF-8 bytes, huge integers,
anchors and aliases, interpolations (``${oc.env:...}``, ``${..x}``, unresolvable references).
:func:`package` draws a case, :func:`write_package` writes it, :func:`run_cli` runs a command on
it in-process. Used by ``tests/cli/test_cli_fuzz.py``, ``tests/reliability/test_fuzz.py`` and
``bench/fuzz.py``.
"""

from __future__ import annotations

import io
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import yaml
from hypothesis import strategies as st

from gym_runtime.cli.main import main
from tests.helpers.packages import write_server, write_wheel

SERVER_TYPES = ["responses_api_models", "responses_api_agents", "resources_servers", "environment_servers"]
IMPLS = ["m", "a", "r", "x.y", "vllm_model"]
NAMES = ["policy_model", "res", "agent", "math.v2", "", "a b", "with-dash", "ünï"]
GOOD = ["policy_model", "res", "agent", "judge", "with-dash"]
inst_name = st.one_of(*[st.sampled_from(GOOD)] * 9, st.sampled_from(NAMES))

odd_text = st.one_of(
    st.sampled_from(
        [
            "???",
            "${policy_base_url}",
            "${oc.env:GR_FUZZ_UNSET,???}",
            "${oc.env:HOME}",
            "${",
            "${a.b.c}",
            "${oc.decode:'???'}",
            "${nope:x}",
            "${..x}",
            "${oc.select:x,1}",
            "${agent}",
            "${res.resources_servers.r.port}",
            "~",
            "null",
            "*",
            "&",
            "!!binary",
            "\x00",
            "\ud800",
            "a\nb",
            "math",
            "app.py",
            "../app.py",
            "/abs",
        ]
    ),
    st.text(max_size=12),
)
scalar = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=10**30, max_value=10**60),
    st.floats(allow_nan=True),
    odd_text,
)
key = st.one_of(
    st.sampled_from(
        ["type", "name", "port", "domain", "entrypoint", "api_key", "token", "host", "resources_server", "model_server"]
        + NAMES
        + SERVER_TYPES
        + IMPLS
    ),
    st.text(max_size=6),
    st.integers(-3, 3),
)
tree = st.recursive(
    scalar, lambda c: st.one_of(st.lists(c, max_size=4), st.dictionaries(key, c, max_size=4)), max_leaves=20
)


@st.composite
def instance(draw) -> dict:
    inner = {"entrypoint": draw(st.sampled_from(["app.py", "app.py", "missing.py", None, 3]))}
    for k in draw(
        st.lists(
            st.sampled_from(
                [
                    "domain",
                    "port",
                    "resources_server",
                    "model_server",
                    "extra",
                    "api_key",
                    "return_token_id_information",
                ]
            ),
            max_size=4,
        )
    ):
        if k in ("resources_server", "model_server"):
            inner[k] = {"type": draw(st.sampled_from(SERVER_TYPES)), "name": draw(inst_name)}
        elif k == "domain":
            inner[k] = draw(st.sampled_from(["math", "coding", "other", "math", "", "maths", None]))
        elif k == "port":
            inner[k] = draw(st.one_of(st.integers(0, 70000), st.sampled_from([9100, 9100, "x", True])))
        else:
            inner[k] = draw(tree)
    impls = {draw(st.sampled_from(IMPLS)): inner}
    if draw(st.integers(0, 19)) == 0:
        impls[draw(st.sampled_from(IMPLS))] = draw(tree)
    return {draw(st.sampled_from(SERVER_TYPES[:3] * 5 + SERVER_TYPES)): impls}


def yaml_text(data: object) -> str:
    try:
        return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)
    except (yaml.YAMLError, UnicodeEncodeError):
        return "x: 1\n"


raw_fragments = st.lists(
    st.sampled_from(
        [
            "a: &x [1, 2]\n",
            "b: *x\n",
            "c: *undefined\n",
            "d: !!binary aGk=\n",
            "e: !!python/object:os.system {}\n",
            "f: !!set {1, 2}\n",
            "g: 2020-01-01\n",
            "h: " + "9" * 5000 + "\n",
            "- list\n",
            "  bad: indent\n",
            "\t: tab\n",
            "? [complex]\n: key\n",
            "i: {{{\n",
            "j: '${oc.env:GR_FUZZ_UNSET,???}'\n",
            "format: native-v1\n",
            "format: wheels-v1\n",
            "config_paths: [configs/a.yaml]\n",
            "metadata: {name: n}\n",
            "k: &r [*r]\n",
            "nest: " + "[" * 80 + "]" * 80 + "\n",
            "l: !!int '0x1F'\n",
            "%YAML 1.1\n---\n",
            "---\n...\n",
            "m: |\n  text\n",
        ]
    ),
    max_size=6,
).map("".join)

file_body = st.one_of(
    tree.map(yaml_text),
    st.dictionaries(st.sampled_from(NAMES), instance(), max_size=4).map(yaml_text),
    raw_fragments,
    st.binary(max_size=40),
    st.sampled_from([b"\xff\xfe\x00", b"a: \xc3\x28\n", b""]),
)

manifest_data = st.fixed_dictionaries(
    {
        "format": st.one_of(st.sampled_from(["native-v1", "wheels-v1", "adapter-wheels-v1"]), scalar),
        "config_paths": st.one_of(
            st.lists(
                st.sampled_from(
                    [
                        "configs/a.yaml",
                        "configs/b.yaml",
                        "resources_servers/r/configs/a.yaml",
                        "../a.yaml",
                        "configs/a.yaml",
                        "configs/link.yaml",
                        "/etc/hostname",
                        "configs",
                        "configs//a.yaml",
                        "configs/\x00",
                    ]
                ),
                max_size=4,
            ),
            tree,
        ),
        "metadata": st.one_of(st.fixed_dictionaries({"name": st.one_of(st.text(max_size=300), scalar)}), tree),
    },
    optional={
        "adapter": st.one_of(st.fixed_dictionaries({"agent": st.sampled_from(["verifiers_agent", "x"])}), tree),
        "extra": tree,
    },
)

config_body = st.one_of(
    st.dictionaries(inst_name, instance(), min_size=1, max_size=4).map(yaml_text),
    st.dictionaries(inst_name, instance(), min_size=1, max_size=3).map(
        lambda d: yaml_text(d) + "policy_base_url: ${oc.env:GR_FUZZ_UNSET,???}\n"
    ),
    file_body,
)
CONFIG_FILES = ["configs/a.yaml", "configs/b.yaml", "resources_servers/r/configs/a.yaml"]


@st.composite
def package(draw, valid_manifest: bool | None = None) -> dict:
    """Half the packages carry a valid manifest (so configs get merged), the rest anything;
    ``valid_manifest`` forces one or the other."""
    configs = draw(st.dictionaries(st.sampled_from(CONFIG_FILES), config_body, max_size=3))
    wheels = draw(
        st.lists(
            st.sampled_from(
                [
                    "Foo_Bar-1.0-py3-none-any.whl",
                    "foo.bar-2.0-py3-none-any.whl",
                    "bad.whl",
                    "x.tar.gz",
                    "c-1.0-cp312-cp312-manylinux2014_x86_64.whl",
                ]
            ),
            max_size=2,
        )
    )
    if valid_manifest if valid_manifest is not None else draw(st.booleans()):
        fmt = draw(st.sampled_from(["native-v1", "wheels-v1"]))
        paths = [p for p in configs if fmt == "wheels-v1" or p.startswith("resources_servers/")]
        if not paths:
            paths = ["resources_servers/r/configs/a.yaml"]
            configs[paths[0]] = draw(config_body)
        manifest = yaml_text({"format": fmt, "config_paths": paths, "metadata": {"name": "fuzz"}})
        wheels = ["pip-24.0-py3-none-any.whl"] + (wheels if draw(st.integers(0, 3)) == 0 else [])
    else:
        manifest = draw(st.one_of(manifest_data.map(yaml_text), file_body))
    servers = draw(st.lists(st.tuples(st.sampled_from(SERVER_TYPES[:3]), st.sampled_from(IMPLS)), max_size=4))
    if draw(st.booleans()):
        servers += [(t, i) for t in SERVER_TYPES[:3] for i in ("m", "a", "r")]
    overrides = draw(
        st.lists(
            st.sampled_from(
                [
                    "a=1",
                    "res.resources_servers.r.domain=math",
                    "x=${",
                    "++b.c=[1,",
                    "policy_model=3",
                    "=",
                    "k",
                    "a..b=1",
                    "c=!!binary aGk=",
                    "policy_model.responses_api_models.m.port=9100",
                ]
            ),
            max_size=2,
        )
    )
    flags = draw(
        st.lists(
            st.sampled_from(
                [
                    ["--policy-base-url", "http://127.0.0.1:1/v1"],
                    ["--policy-model-name", "m"],
                    ["--platform", "linux/arm64"],
                    ["--policy-api-key-env", "GR_FUZZ_UNSET"],
                ]
            ),
            max_size=2,
        )
    )
    return {
        "manifest": manifest,
        "configs": configs,
        "wheels": wheels,
        "servers": servers,
        "overrides": overrides,
        "flags": flags,
        "json": draw(st.booleans()),
    }


def write_package(root: Path, case: dict) -> None:
    """Write a :func:`package` case as a directory at ``root`` (which must not exist)."""
    root.mkdir()
    m = case["manifest"]
    (root / "nemo-environment.yaml").write_bytes(m if isinstance(m, bytes) else m.encode("utf-8", "surrogatepass"))
    for rel, body in case["configs"].items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(body if isinstance(body, bytes) else body.encode("utf-8", "surrogatepass"))
    (root / "configs").mkdir(exist_ok=True)
    (root / "configs/link.yaml").symlink_to("a.yaml")
    for w in case["wheels"]:
        if w.endswith(".whl") and w.count("-") >= 2:
            write_wheel(root / "wheels", w)
        else:
            (root / "wheels").mkdir(exist_ok=True)
            (root / "wheels" / w).write_text("x")
    for stype, impl in case["servers"]:
        write_server(root, stype, impl)


def run_cli(argv: list[str]) -> tuple[int, str]:
    """``gym-runtime ARGV`` in-process: (exit code, stdout + stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as e:  # argparse: must not happen for these argv
            code = e.code if isinstance(e.code, int) else 2
    return code, out.getvalue() + err.getvalue()
