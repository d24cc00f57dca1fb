"""``tiny-math``: a verifiers environment (``vf_env_id: tiny-math``) for gym-runtime's adapter example.

``load_environment(system_prompt=...)`` returns a single-turn environment over five arithmetic
questions; the rubric gives 1.0 when the last number of the reply equals the answer, else 0.0.
"""

from __future__ import annotations

import re

import verifiers as vf

QUESTIONS = [("What is 6 * 7?", "42"), ("What is 120 / 8?", "15"), ("What is 19 + 23?", "42"),
             ("What is 1000 - 1?", "999"), ("What is 7 * 8?", "56")]
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def correct_answer(completion: list[dict], answer: str, **_: object) -> float:
    """1.0 when the last number in the last assistant message equals ``answer``."""
    text = next((m.get("content") or "" for m in reversed(completion) if m.get("role") == "assistant"), "")
    numbers = _NUMBER.findall(text)
    try:
        return 1.0 if numbers and abs(float(numbers[-1]) - float(answer)) < 1e-6 else 0.0
    except ValueError:
        return 0.0


def load_environment(system_prompt: str = "Answer with a number.") -> vf.Environment:
    """The environment; ``system_prompt`` is its only argument (``vf_env_args``)."""
    dataset = [{"prompt": [{"role": "user", "content": q}], "answer": a, "example_id": i, "task": "tiny-math"}
               for i, (q, a) in enumerate(QUESTIONS)]
    return vf.SingleTurnEnv(dataset=dataset, rubric=vf.Rubric(funcs=[correct_answer]), system_prompt=system_prompt)
