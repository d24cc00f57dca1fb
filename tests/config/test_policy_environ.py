"""The job's policy values read from ``GYM_RUNTIME_POLICY_*`` (``PolicyValues.from_environ``)."""

from __future__ import annotations

from gym_runtime.config.merge import PolicyValues


def test_a_comma_separated_base_url_is_the_list_of_replicas_and_empty_values_are_not_given() -> None:
    got = PolicyValues.from_environ(
        {
            "GYM_RUNTIME_POLICY_BASE_URL": "http://a:8000/v1, http://b:8000/v1,",
            "GYM_RUNTIME_POLICY_API_KEY": "",
            "GYM_RUNTIME_POLICY_MODEL_NAME": "m",
        }
    )
    assert got == PolicyValues(["http://a:8000/v1", "http://b:8000/v1"], None, "m", origin="environment")


def test_nothing_set_gives_no_values() -> None:
    assert PolicyValues.from_environ({}) == PolicyValues(origin="environment")
