"""Case C44 (cases README, group G): token ids asked of an endpoint that ignores
``return_tokens_as_token_ids`` (SGLang 0.5): logprob tokens are decoded text (``"The"``, ``" 42"``), or
missing. Gym 0.4.0's parsing fails on the first and turns a digit string into a wrong id. Inputs
built here: the bundled example (its policy model has ``return_token_id_information: true``) and a
fake endpoint answering each variant.

Expected: at start-up (always, since token information is on) one probe completion whose every
token must be ``token_id:<int>``, checked against the endpoint's ``/tokenize``, else
``GR-START-TOKEN-IDS`` "... ignores return_tokens_as_token_ids ..."; per rollout, strict parsing:
a digit-string token never becomes an id (``GR-ROLLOUT-TOKEN-IDS``).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.helpers.environments import running_up, shared_venvs, stop_cleanly
from tests.helpers.fake_policy import start_fake
from tests.helpers.gym_servers import SERVERS
from tests.helpers.load import run_batch
from tests.helpers.trust import ENV, MODEL, QUICKSTART, dry, example_rows

ROWS = example_rows("arithmetic_agent")[:1]


@pytest.mark.pypi
@pytest.mark.parametrize(
    ("behaviour", "said"),
    [
        ("text_tokens", "ignores return_tokens_as_token_ids: a logprob token is 'The', not 'token_id:<int>'"),
        ("digit_tokens", "ignores return_tokens_as_token_ids: a logprob token is '42', not 'token_id:<int>'"),
        ("no_logprobs", "returned no per-token logprobs"),
        ("tokenize_disagrees", "/tokenize of policy endpoint"),
    ],
)
def test_c44_the_start_up_probe_refuses_an_endpoint_without_token_ids(
    tmp_path: Path, behaviour: str, said: str
) -> None:
    with start_fake(tmp_path, behaviour) as fake:
        run, results = dry(tmp_path, ROWS, fake_url=fake.url)
    assert run.code == 3 and results == [], run.stderr
    error = run.json()["error"]
    assert error["code"] == "GR-START-TOKEN-IDS" and said in error["message"], error
    assert "return_token_id_information: false" in error["hint"]


@pytest.mark.pypi
def test_c44_a_digit_string_token_never_becomes_an_id_in_a_rollout(tmp_path: Path) -> None:
    """``up --model-endpoint-timeout 0`` skips the start-up checks; the row still fails by name."""
    with (
        start_fake(tmp_path, "digit_tokens") as fake,
        running_up(
            QUICKSTART,
            tmp_path,
            "--policy-base-url",
            fake.url + "/v1",
            "--policy-model-name",
            MODEL,
            "--model-endpoint-timeout",
            "0",
            env={**ENV, **shared_venvs()},
        ) as (proc, info),
    ):
        [row] = run_batch(info["head_server"], ROWS).results
        code, err = stop_cleanly(proc)
    assert row["error"]["code"] == "GR-ROLLOUT-TOKEN-IDS", row
    assert "logprobs.content[0].token is '42', not 'token_id:<int>'" in row["error"]["message"]
    assert code == 0, err


def test_c44_strict_parsing_of_logprob_tokens() -> None:
    sys.path.insert(0, str(SERVERS))
    from _kit.policy_answers import TokenIdsError, token_ids

    assert token_ids([{"token": "token_id:5", "logprob": -0.1}, {"token": "token_id:0", "logprob": 0}]) == (
        [5, 0],
        [-0.1, 0.0],
    )
    for bad in ("42", " 7", "The", "token_id:", "token_id:4\n", "token_id:٣", "token_id:-1", None, 42):
        with pytest.raises(TokenIdsError):
            token_ids([{"token": bad, "logprob": -0.1}])
    with pytest.raises(TokenIdsError, match="no per-token logprobs"):
        token_ids(None)
