"""CLI: ``python -m gym_runtime.stub_model --host 127.0.0.1 --port P [--seed S] [--model NAME]``.

Other flags: ``--p-correct`` (probability of a correct answer, default 0.5), ``--max-model-len``
(context length in tokens, default 32768), ``--reasoning`` (return ``reasoning``, as vLLM with a reasoning parser),
``--api-key`` (require this bearer key; default: the ``STUB_MODEL_API_KEY`` variable, else none),
``--mode NAME=VALUE`` (repeatable: a misbehaviour for every request, see
:mod:`gym_runtime.stub_model.quirks`, e.g. ``--mode call=verify``).
"""

from __future__ import annotations

import argparse
import os

import uvicorn

from gym_runtime.stub_model.app import create_app


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse the stub's command line (see the module docstring)."""
    parser = argparse.ArgumentParser(prog="python -m gym_runtime.stub_model", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--model", default="stub-model")
    parser.add_argument("--p-correct", type=float, default=0.5)
    parser.add_argument("--max-model-len", type=int, default=32768)
    parser.add_argument("--reasoning", action="store_true")
    parser.add_argument("--api-key", default=os.environ.get("STUB_MODEL_API_KEY"))
    parser.add_argument("--mode", action="append", default=[], metavar="NAME=VALUE")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    """Serve the stub until interrupted."""
    args = parse_args(argv)
    app = create_app(
        seed=args.seed,
        model=args.model,
        p_correct=args.p_correct,
        max_model_len=args.max_model_len,
        reasoning=args.reasoning,
        api_key=args.api_key,
        modes=tuple(args.mode),
    )
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning", timeout_graceful_shutdown=1)


if __name__ == "__main__":
    main()
