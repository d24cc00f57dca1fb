"""CLI: ``python -m gym_runtime.stub_model (--host 127.0.0.1 --port P | --fd N) [--seed S] [--model NAME]``.

``--fd``: serve on the listening socket inherited as descriptor ``N`` (the daemon binds the port
when it chooses it and holds it, so nothing else can take it before the stub serves).

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
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--port", type=int)
    where.add_argument("--fd", type=int, help="serve on this inherited listening socket")
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
    where = {"fd": args.fd} if args.fd is not None else {"host": args.host, "port": args.port}
    uvicorn.run(app, **where, log_level="warning", timeout_graceful_shutdown=1)


if __name__ == "__main__":
    main()
