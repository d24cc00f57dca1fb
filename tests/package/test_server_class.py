"""What a server tree's entrypoint class declares, read statically (NeMo Gym 0.7.0
``nemo_gym/server_utils.py``: ``ray_enabled`` on the class whose ``run_webserver()`` the entrypoint
calls), and what each release line makes of it (:meth:`GymRelease.server_uses_ray`)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from gym_runtime.gym_release import release_for
from gym_runtime.gym_release.sdk_index import SdkIndex
from gym_runtime.package.server_class import config_class, ray_declaration

MAIN = '\n\nif __name__ == "__main__":\n    {cls}.run_webserver()\n'


def tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(textwrap.dedent(text))
    return root


def test_the_class_body_decides(tmp_path: Path) -> None:
    d = tree(
        tmp_path / "resources_servers" / "acme",
        {
            "app.py": """
        from nemo_gym.base_resources_server import SimpleResourcesServer

        class Acme(SimpleResourcesServer):
            ray_enabled = False

        if __name__ == "__main__":
            Acme.run_webserver()
        """
        },
    )
    r = ray_declaration(d, "app.py", tmp_path)
    assert (r.server_class, r.declared, r.value) == ("Acme", True, False)
    assert r.where == "resources_servers/acme/app.py:5 Acme.ray_enabled = False"


def test_a_classvar_annotation_counts_and_a_computed_value_does_not(tmp_path: Path) -> None:
    d = tree(
        tmp_path / "s",
        {
            "app.py": "from typing import ClassVar\nclass A:\n    ray_enabled: ClassVar[bool] = True\n"
            + MAIN.format(cls="A"),
            "other.py": "import os\nclass B:\n    ray_enabled = bool(os.environ.get('X'))\n" + MAIN.format(cls="B"),
        },
    )
    assert ray_declaration(d, "app.py").value is True
    r = ray_declaration(d, "other.py")
    assert (r.declared, r.value) == (False, None) and "declare no ray_enabled" in r.where


def test_bases_in_the_tree_and_in_the_package_are_followed(tmp_path: Path) -> None:
    """Left to right, depth first: a mixin without a declaration, then a base in another module of
    the tree, then a base in another tree the package ships (imported through the package root)."""
    root = tmp_path / "pkg"
    tree(
        root,
        {
            "responses_api_agents/harbor/app.py": "class HarborAgent:\n    ray_enabled = True\n",
            "resources_servers/acme/base.py": "from responses_api_agents.harbor.app import HarborAgent\n"
            "class Middle(HarborAgent):\n    pass\n",
            "resources_servers/acme/app.py": "from base import Middle\nclass Mixin:\n    pass\n"
            "class Acme(Mixin, Middle):\n    pass\n" + MAIN.format(cls="Acme"),
        },
    )
    r = ray_declaration(root / "resources_servers" / "acme", "app.py", root)
    assert (r.declared, r.value) == (True, True)
    assert r.where == "responses_api_agents/harbor/app.py:2 HarborAgent.ray_enabled = True"


def test_sdk_bases_count_with_what_the_index_records(tmp_path: Path) -> None:
    d = tree(
        tmp_path / "s",
        {
            "app.py": "import nemo_gym.server_utils as su\nfrom nemo_gym.x import Quiet, Loud\n"
            "class A(Quiet, Loud):\n    pass\n" + MAIN.format(cls="A")
        },
    )
    index = SdkIndex(
        "9.9.9",
        {"nemo_gym.x": frozenset({"Quiet", "Loud"})},
        ray_enabled={"nemo_gym.x.Quiet": None, "nemo_gym.x.Loud": False},
    )
    r = ray_declaration(d, "app.py", None, index)
    assert (r.declared, r.value) == (True, False) and "nemo_gym.x.Loud" in r.where
    assert ray_declaration(d, "app.py", None, None).declared is False  # no index: SDK bases declare nothing


def test_no_run_webserver_means_no_class(tmp_path: Path) -> None:
    d = tree(tmp_path / "s", {"app.py": "print('a plain script')\n"})
    r = ray_declaration(d, "app.py")
    assert r.server_class is None and not r.declared and "calls no run_webserver()" in r.where
    assert ray_declaration(d, "missing.py").where == "missing.py cannot be read"


def test_hostile_trees_end(tmp_path: Path) -> None:
    """A base cycle and an unparseable module end the walk: nothing is declared."""
    d = tree(
        tmp_path / "s",
        {
            "app.py": "from a import A\nclass S(A):\n    pass\n" + MAIN.format(cls="S"),
            "a.py": "from b import B\nclass A(B):\n    pass\n",
            "b.py": "from a import A\nclass B(A):\n    pass\n",
            "c.py": "class (:\nS.run_webserver()\n",
        },
    )
    assert ray_declaration(d, "app.py").declared is False
    assert ray_declaration(d, "c.py").where == "c.py cannot be read"


@pytest.mark.parametrize(
    ("version", "sdk", "declared", "reaches", "uses", "gym"),
    [
        ("0.4.0", True, False, False, True, True),  # before 0.7 every SDK server's run_webserver starts Ray
        ("0.4.0", True, None, False, True, True),
        ("0.4.0", False, None, False, False, False),
        ("0.4.0", False, True, False, True, True),  # a declaration of Ray use is honoured on any line
        ("0.7.0", True, False, True, False, False),
        ("0.7.0", True, None, True, True, True),  # undeclared and its tree imports Ray: Ray, as NeMo Gym 0.7.0
        ("0.7.0", True, None, False, False, True),  # undeclared, no Ray in its tree: none (Gym would give one)
        ("0.7.0", True, True, False, True, True),
        ("0.7.0", False, None, True, False, False),
    ],
)
def test_each_line_decides_ray_use(
    version: str, sdk: bool, declared: bool | None, reaches: bool, uses: bool, gym: bool
) -> None:
    release = release_for(version, "test")
    assert release.server_uses_ray(sdk, declared, reaches) is uses
    assert release.gym_starts_ray(sdk, declared) is gym


CONFIG_TREE = """
    from typing import Optional
    from pydantic import field_validator
    from nemo_gym.base_responses_api_model import BaseResponsesAPIModelConfig, SimpleResponsesAPIModel
    from common import SharedConfig

    class JudgeConfig(SharedConfig):
        openai_api_key: str
        openai_model: "str"
        extra_body: Optional[str] = None
        base_url: str | None = None
        timeout: float = 30.0

    class Judge(SimpleResponsesAPIModel):
        config: JudgeConfig

    if __name__ == "__main__":
        Judge.run_webserver()
    """


def test_the_config_class_gives_its_plain_str_fields_and_its_tree_bases(tmp_path: Path) -> None:
    """``config: JudgeConfig`` on the server class; ``str`` fields of it and of a base in another
    module of the tree (``region``), not ``Optional[str]``, ``str | None`` or other types, and not the
    SDK base's (``host``, ``entrypoint``: the runtime's). A subclass's annotation wins (``base_url``)."""
    d = tree(
        tmp_path / "responses_api_models" / "judge",
        {
            "app.py": CONFIG_TREE,
            "common.py": "from nemo_gym.base_responses_api_model import BaseResponsesAPIModelConfig\n"
            "class SharedConfig(BaseResponsesAPIModelConfig):\n    region: str\n    base_url: str\n",
        },
    )
    found = config_class(d, "app.py", tmp_path)
    assert found is not None and found.name == "JudgeConfig"
    assert found.strings == {
        "openai_api_key": "responses_api_models/judge/app.py:8 JudgeConfig.openai_api_key: str",
        "openai_model": "responses_api_models/judge/app.py:9 JudgeConfig.openai_model: str",
        "region": "responses_api_models/judge/common.py:3 SharedConfig.region: str",
    }


@pytest.mark.parametrize(
    "validator",
    [
        '@field_validator("openai_api_key", mode="before")',
        "@validator('openai_api_key', pre=True)",
        '@pydantic.model_validator(mode="wrap")',
    ],
)
def test_a_validator_that_runs_first_may_fill_a_null_so_no_field_counts(tmp_path: Path, validator: str) -> None:
    body = CONFIG_TREE.replace(
        "        timeout: float = 30.0\n",
        "        timeout: float = 30.0\n\n"
        f"        {validator}\n        def fill(cls, v):\n            return v or ''\n",
    )
    d = tree(tmp_path / "s", {"app.py": body, "common.py": "class SharedConfig:\n    region: str\n"})
    found = config_class(d, "app.py")
    assert found is not None and found.strings == {}


def test_no_config_class_when_none_is_annotated_or_it_is_the_sdks(tmp_path: Path) -> None:
    d = tree(
        tmp_path / "s",
        {
            "plain.py": "class A:\n    pass\n" + MAIN.format(cls="A"),
            "sdk.py": "from nemo_gym.base_resources_server import BaseResourcesServerConfig\n"
            "class A:\n    config: BaseResourcesServerConfig\n" + MAIN.format(cls="A"),
            "script.py": "print('no server class')\n",
        },
    )
    assert [config_class(d, f) for f in ("plain.py", "sdk.py", "script.py", "missing.py")] == [None] * 4


def test_a_base_from_a_gym_tree_the_package_lacks_is_named_and_keeps_ray(tmp_path: Path) -> None:
    """A class whose base comes from a Gym server tree that is not in the package (the wheel's
    ``harbor_agent`` declares ``ray_enabled = True``) cannot be read whole: it keeps NeMo Gym's Ray."""
    from gym_runtime.ray.use import _unread_base

    d = tmp_path / "responses_api_agents" / "bridge"
    d.mkdir(parents=True)
    (d / "app.py").write_text(
        "from responses_api_agents.harbor_agent.app import HarborAgent\n\n\n"
        "class Bridge(HarborAgent):\n    pass\n\n\nif __name__ == '__main__':\n"
        "    Bridge.run_webserver()\n"
    )
    decl = ray_declaration(d, "app.py", tmp_path)
    assert (decl.declared, decl.missing) == (False, ("responses_api_agents.harbor_agent.app.HarborAgent",))
    assert "HarborAgent is in no tree of this package" in _unread_base(decl.missing, release_for("0.7.0", "test")).where
    assert _unread_base(("pydantic.BaseModel",), release_for("0.7.0", "test")) is None  # a library's base


def test_a_base_from_a_tree_the_gym_wheel_ships_counts_with_its_own_declaration(tmp_path: Path) -> None:
    """NeMo Gym 0.7.0's ``gpqa_diamond`` subclasses ``resources_servers.mcqa.app.MCQAResourcesServer``,
    a tree the blend's package does not ship but every Gym venv's ``site-packages`` holds, whose class
    says ``ray_enabled = False``: no Ray, read from the committed index. A wheel class the index records
    no literal for stays missing, and so keeps Ray."""
    from gym_runtime.gym_release.sdk_index import committed_index
    from gym_runtime.ray.use import _unread_base

    d = tree(
        tmp_path / "resources_servers" / "gpqa_like",
        {
            "app.py": "from resources_servers.mcqa.app import MCQAResourcesServer\n"
            "from resources_servers.mcqa.app import MCQAVerifyRequest\n\n\n"
            "class G(MCQAResourcesServer):\n    pass\n\n\nclass H(MCQAVerifyRequest):\n    pass\n"
            + MAIN.format(cls="G"),
            "h.py": "from app import H\n" + MAIN.format(cls="H"),
        },
    )
    index = committed_index("0.7.0")
    decl = ray_declaration(d, "app.py", tmp_path, index)
    assert (decl.declared, decl.value, decl.missing) == (True, False, ())
    assert decl.where == "resources_servers.mcqa.app.MCQAResourcesServer.ray_enabled (the Gym wheel's own tree)"
    undeclared = ray_declaration(d, "h.py", tmp_path, index)
    assert (undeclared.declared, undeclared.missing) == (False, ("resources_servers.mcqa.app.MCQAVerifyRequest",))
    assert _unread_base(undeclared.missing, release_for("0.7.0", "test")) is not None
    unindexed = ray_declaration(d, "app.py", tmp_path, SdkIndex("9.9.9", {}))  # an index without the trees
    assert unindexed.missing == ("resources_servers.mcqa.app.MCQAResourcesServer",)
