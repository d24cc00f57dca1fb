"""A null where a package tree's config class declares ``str`` is refused before anything is built
(``GR-CONFIG-NULL``), naming the declaration and the unset variable, even through a copy of another
key, as NeMo Gym 0.7.0's ``frontierscience_judge`` config gives its judge ``openai_api_key:
${judge_api_key}`` and ``judge_api_key: ${oc.env:NVIDIA_API_KEY,null}``; a nullable field, a set
variable and a null the class converts first pass."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from gym_runtime.errors import ConfigError

APP = """
    from typing import Optional
    from nemo_gym.base_responses_api_model import BaseResponsesAPIModelConfig, SimpleResponsesAPIModel

    class JudgeConfig(BaseResponsesAPIModelConfig):
        openai_api_key: str
        organization: Optional[str] = None

    class Judge(SimpleResponsesAPIModel):
        config: JudgeConfig

    if __name__ == "__main__":
        Judge.run_webserver()
    """
VAR = "GR_TEST_JUDGE_KEY"
CONFIG = textwrap.dedent(f"""\
    judge_api_key: ${{oc.env:{VAR},null}}
    judge_model:
      responses_api_models:
        judge:
          entrypoint: app.py
          openai_api_key: ${{judge_api_key}}
          organization: null
    """)
KEY = "judge_model.responses_api_models.judge.openai_api_key"


def _package(pkg_with, app: str = APP, config: str = CONFIG) -> Path:
    root = pkg_with({"configs/judge.yaml": config}, servers=[("responses_api_models", "judge")])
    (root / "responses_api_models" / "judge" / "app.py").write_text(textwrap.dedent(app))
    return root


def test_a_null_from_an_unset_variable_copied_into_a_str_field_is_refused(pkg_with, build, monkeypatch) -> None:
    monkeypatch.delenv(VAR, raising=False)
    with pytest.raises(ConfigError) as e:
        build(_package(pkg_with))
    (v,) = [v for v in e.value.violations if v.code == "GR-CONFIG-NULL"]
    assert v.key == KEY and v.file == "configs/judge.yaml", v
    assert (
        f"is null ({VAR} is not set), but responses_api_models/judge/app.py:6 JudgeConfig.openai_api_key: str"
        in v.message
    )
    assert v.hint == f"export {VAR}"


def test_a_set_variable_a_nullable_field_or_a_converting_class_pass(pkg_with, build, monkeypatch) -> None:
    monkeypatch.setenv(VAR, "sk-judge")
    merged = build(_package(pkg_with))
    block = merged.data["judge_model"]["responses_api_models"]["judge"]
    assert block["openai_api_key"] == "sk-judge" and block["organization"] is None
    monkeypatch.delenv(VAR)
    converting = APP.replace(
        "        organization: Optional[str] = None\n",
        "        organization: Optional[str] = None\n\n"
        "        @field_validator('openai_api_key', mode='before')\n"
        "        def blank(cls, v):\n            return v or ''\n",
    )
    assert (
        build(_package(pkg_with, converting)).data["judge_model"]["responses_api_models"]["judge"]["openai_api_key"]
        is None
    )


def test_a_literal_null_names_the_key_to_give(pkg_with, build) -> None:
    root = _package(pkg_with, config=CONFIG.replace("${judge_api_key}", "null"))
    with pytest.raises(ConfigError) as e:
        build(root)
    (v,) = [v for v in e.value.violations if v.code == "GR-CONFIG-NULL"]
    assert v.key == KEY and "is null, but" in v.message and v.hint == "give openai_api_key a value"


def test_a_null_selected_for_an_absent_key_names_that_key(pkg_with, build) -> None:
    """NeMo Gym 0.7.0's ``gdp_pdf`` judge: ``openai_api_key: ${oc.select:judge_api_key,null}``."""
    config = CONFIG.replace("${judge_api_key}", "${oc.select:judge_key,null}")
    with pytest.raises(ConfigError) as e:
        build(_package(pkg_with, config=config))
    (v,) = [v for v in e.value.violations if v.code == "GR-CONFIG-NULL"]
    assert "is null (judge_key is not in the config)" in v.message and v.hint.startswith("give judge_key a value")


def test_a_copy_of_a_null_placeholder_names_the_placeholder(pkg_with, build) -> None:
    """NeMo Gym 0.7.0's ``longmemeval``: ``judge_base_url: null`` above ``openai_base_url: ${judge_base_url}``."""
    config = CONFIG.replace(f"${{oc.env:{VAR},null}}", "null")
    with pytest.raises(ConfigError) as e:
        build(_package(pkg_with, config=config))
    (v,) = [v for v in e.value.violations if v.code == "GR-CONFIG-NULL"]
    assert "is null (copied from judge_api_key, which is null)" in v.message
    assert v.hint.startswith("give judge_api_key a value")
