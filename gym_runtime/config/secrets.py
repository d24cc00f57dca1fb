"""Which config values are secrets, where each comes from, and which secrets each server receives.

The rule (docs/architecture.md §4, docs/environment-packages.md "Secrets"):

* a value is a **secret** when a key on its path has a secret name
  (:func:`gym_runtime.config.redact.is_secret_key`: ``*api_key*``, ``*token*``, ``*secret*``,
  ``*password*``, ...), or a name the package lists under the top-level ``secret_keys``; or when its
  unresolved value interpolates a secret: ``${policy_api_key}``, ``"Bearer ${.token}"``,
  ``${oc.select:a.password,x}``, ``${oc.env:OPENAI_API_KEY}`` (an environment variable with a secret
  name), through any chain of interpolations;
* each secret has **sources**: the dotted path of every secret-named value it comes from (itself
  included) and ``env:VAR`` for each secret-named variable;
* a server instance **receives** every source that a value inside its own config block comes from,
  and every source of a top-level block it names by string (``sandbox_provider: sandbox``,
  :mod:`gym_runtime.config.blocks`). Its view of the config (:meth:`SecretMap.view`) keeps the secrets whose sources it receives and
  masks every other secret (``****``): other instances' keys and the top-level keys it does not use.

References are read from the *unresolved* config with OmegaConf's own interpolation grammar
(``omegaconf.grammar_parser`` and ``GrammarVisitor``), so nested interpolations, relative keys and
resolver arguments are seen as OmegaConf sees them. A value whose interpolation cannot be parsed is
its own source (fail closed: only its instance receives it). The views are masked copies of the
*resolved* config, so a server that resolves its config again finds every key in place and no
interpolation left to break (NeMo Gym 0.4.0 ``nemo_gym/server_utils.py``,
``load_config_from_global_config``).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from gym_runtime.config.redact import MASK, holds_a_secret, is_secret_key
from gym_runtime.config.sources import Sources
from gym_runtime.config.url_secrets import is_base_url_key, mask_url, url_credentials
from gym_runtime.errors import Violation

SECRET_KEYS = "secret_keys"  # top-level config key: extra key names a package marks secret
_NAME = re.compile(r"^[A-Za-z0-9_-]+$")
_WHOLE = re.compile(r"^\$\{[^${}:]+\}$")  # exactly one node interpolation: the value *is* that node
_PASS_THROUGH = ("oc.select", "oc.deprecated", "oc.dict.values")  # resolvers whose first argument is a key

Path = tuple[str | int, ...]


def dotted(path: Path) -> str:
    """``("a", "b", 0, "c")`` -> ``a.b[0].c`` (the spelling of :func:`~gym_runtime.config.redact.redact`)."""
    out = ""
    for k in path:
        out += f"[{k}]" if isinstance(k, int) else (f".{k}" if out else str(k))
    return out


@dataclass(frozen=True)
class SecretMap:
    """The secrets of one resolved config.

    ``leaves``: resolved leaf path -> the sources it carries (only secrets are listed);
    ``received``: instance name -> the sources its own config references (the blocks it names by
    string included); ``extra_names``: the package's ``secret_keys`` (lower case); ``named``:
    instance -> the top-level blocks it names by string; ``url_only``: the leaves whose every
    source is a URL carrying a credential (masked as :func:`~gym_runtime.config.url_secrets.mask_url`
    does, not whole).
    """

    leaves: Mapping[Path, frozenset[str]] = field(default_factory=dict)
    received: Mapping[str, frozenset[str]] = field(default_factory=dict)
    extra_names: tuple[str, ...] = ()
    named: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    url_only: frozenset[Path] = frozenset()

    def view(self, data: dict[str, Any], instance: str | None = None, masked: list[str] | None = None) -> dict:
        """A deep copy of ``data`` (the resolved config, or a view of it with addresses added) with
        every secret that ``instance`` does not receive replaced by ``****``; ``instance=None``
        masks every secret (dumps, the head server). ``masked`` receives the dotted path of each
        masked value. Values that hold no key (:func:`~gym_runtime.config.redact.holds_a_secret`: empty,
        ``None``, booleans, the keyless ``EMPTY``) are kept, as in every dump."""
        got = self.received.get(instance, frozenset()) if instance is not None else frozenset()
        out = copy.deepcopy(data)
        for path, sources in self.leaves.items():
            if sources <= got:
                continue
            parent, last = _parent(out, path)
            if parent is None or not holds_a_secret(parent[last]):
                continue
            url = path in self.url_only and isinstance(parent[last], str)
            parent[last] = mask_url(parent[last]) if url else MASK
            if masked is not None:
                masked.append(dotted(path))
        return out

    def keys_for(self, instance: str, data: dict[str, Any]) -> list[str]:
        """Dotted paths of the secret values ``instance`` receives (names only), sorted."""
        got = self.received.get(instance, frozenset())
        return sorted(
            dotted(p)
            for p, s in self.leaves.items()
            if s <= got and (parent := _parent(data, p)[0]) is not None and holds_a_secret(parent[p[-1]])
        )


def _parent(data: Any, path: Path) -> tuple[Any, Any]:
    node = data
    for k in path[:-1]:
        try:
            node = node[k]
        except (KeyError, IndexError, TypeError):
            return None, None
    try:
        node[path[-1]]
    except (KeyError, IndexError, TypeError):
        return None, None
    return node, path[-1]


def secret_key_names(raw: dict[str, Any], sources: Sources) -> tuple[tuple[str, ...], list[Violation]]:
    """The package's extra secret names from the top-level ``secret_keys`` (a list of literal key
    names: letters, digits, ``_``, ``-``), lower-cased, and one ``GR-CONFIG-SECRET-KEYS``
    violation per bad entry (naming the file and key path)."""
    if SECRET_KEYS not in raw:
        return (), []
    value, file = raw[SECRET_KEYS], sources.of(SECRET_KEYS)
    hint = (
        "write `secret_keys: [judge_credential, x_auth]`: key names (letters, digits, _ and -) that are "
        "secrets wherever they appear, in addition to the built-in rule"
    )
    if not isinstance(value, list):
        return (), [
            Violation(
                "GR-CONFIG-SECRET-KEYS",
                f"secret_keys must be a list of key names, got {type(value).__name__} {value!r}",
                file=file,
                key=SECRET_KEYS,
                hint=hint,
            )
        ]
    names, out = [], []
    for i, item in enumerate(value):
        if isinstance(item, str) and _NAME.match(item):
            names.append(item.lower())
        else:
            why = "an interpolation" if isinstance(item, str) and "${" in item else repr(item)
            out.append(
                Violation(
                    "GR-CONFIG-SECRET-KEYS",
                    f"secret_keys entries must be literal key names, got {why}",
                    file=sources.of(f"{SECRET_KEYS}[{i}]") or file,
                    key=f"{SECRET_KEYS}[{i}]",
                    hint=hint,
                )
            )
    return tuple(dict.fromkeys(names)), out


def secret_map(
    raw: dict[str, Any],
    data: dict[str, Any],
    instances: list[str],
    extra_names: tuple[str, ...] = (),
    named: Mapping[str, tuple[str, ...]] | None = None,
) -> SecretMap:
    """Analyse one config: ``raw`` is the merged, *unresolved* plain container (``${...}`` as
    written), ``data`` the same config resolved, ``instances`` the server instance names, ``named``
    the top-level blocks each instance names by string (:func:`gym_runtime.config.blocks.named_blocks`):
    their secrets reach that instance too."""
    extra = {n.lower() for n in extra_names}

    def is_secret(name: str) -> bool:
        return is_secret_key(name) or name.lower() in extra

    a = _Analysis(raw, data, is_secret)
    leaves = {p: s for p in a.paths if (s := a.sources(p))}
    named = dict(named or {})
    received = {
        name: frozenset().union(*(s for p, s in leaves.items() if p[0] == name or p[0] in named.get(name, ())))
        for name in instances
    }
    url_only = frozenset(p for p, s in leaves.items() if s <= a.url_sources)
    return SecretMap(leaves, received, tuple(sorted(extra)), named, url_only)


def url_credential_warnings(smap: SecretMap, data: dict[str, Any], sources: Sources) -> list[Violation]:
    """One ``GR-CONFIG-URL-CREDENTIAL`` warning per ``*base_url`` value that carries a credential
    inside its URL where it is written (not where another value interpolates it), naming the file
    (or flag), the key path and what the URL carries; the hint says where the key belongs instead."""
    out = []
    for path in sorted(smap.url_only, key=dotted):
        key = dotted(path)
        if smap.leaves[path] != {key}:
            continue  # it comes from another value, which is warned about itself
        what = " and ".join(url_credentials(_get(data, path)))
        policy = path[0] == "policy_base_url"
        hint = (
            "give the URL without it and pass the key with --policy-api-key-env VAR (the variable's name; "
            "vllm_model sends it as its API key)"
            if policy
            else "give the URL without it and put the key in a secret-named key of the server's config "
            "(e.g. api_key: ${oc.env:JUDGE_API_KEY}); for the policy endpoint pass --policy-api-key-env VAR"
        )
        out.append(
            Violation(
                "GR-CONFIG-URL-CREDENTIAL",
                f"the URL carries a credential ({what}): it is masked "
                "wherever it is shown and given only to the server instances whose config uses it",
                file=sources.of(key) or sources.of(str(path[0])),
                key=key,
                hint=hint,
            )
        )
    return out


@dataclass(frozen=True)
class _Ref:
    kind: str  # "node" (a config path), "env" (a variable), "opaque" (an unparsable value: its own source)
    target: Any


class _Analysis:
    """Sources of each resolved leaf, memoised (OmegaConf already rejected cycles; a cycle here
    contributes nothing)."""

    def __init__(self, raw: dict[str, Any], data: dict[str, Any], is_secret: Callable[[str], bool]) -> None:
        self.raw, self.data, self.is_secret = raw, data, is_secret
        self.paths: list[Path] = list(_leaf_paths(data, ()))
        self._memo: dict[Path, frozenset[str]] = {}
        self._busy: set[Path] = set()
        self.url_sources: set[str] = set()  # leaves that are secrets for the credential in their URL

    def sources(self, p: Path) -> frozenset[str]:
        if p in self._memo:
            return self._memo[p]
        if p in self._busy:
            return frozenset()
        self._busy.add(p)
        out = set(self._origin(p))
        if any(isinstance(k, str) and self.is_secret(k) for k in p):
            out.add(dotted(p))
        elif is_base_url_key(p) and url_credentials(_get(self.data, p)):
            out.add(dotted(p))
            self.url_sources.add(dotted(p))
        self._busy.discard(p)
        self._memo[p] = frozenset(out)
        return self._memo[p]

    def _origin(self, p: Path) -> set[str]:
        """Sources that reach leaf ``p`` through interpolations: walk the unresolved config along
        ``p``; the first interpolation met (at ``p`` or at a container above it) decides."""
        node: Any = self.raw
        for i in range(len(p) + 1):
            if isinstance(node, str) and "${" in node:
                refs = _references(node, p[:i], self.data)
                if i < len(p) and _WHOLE.match(node) and len(refs) == 1 and refs[0].kind == "node":
                    return set(self.sources(refs[0].target + p[i:]))  # a copied container: follow the key
                out: set[str] = set()
                for r in refs:
                    out |= self._ref_sources(r)
                return out
            if i == len(p):
                return set()
            try:
                node = node[p[i]]
            except (KeyError, IndexError, TypeError):
                return set()
        return set()

    def _ref_sources(self, ref: _Ref) -> set[str]:
        if ref.kind == "env":
            return {f"env:{ref.target}"} if self.is_secret(str(ref.target)) else set()
        if ref.kind == "opaque":
            return {ref.target}
        n = len(ref.target)
        out: set[str] = set()
        for q in self.paths:
            if q[:n] == ref.target:
                out |= self.sources(q)
        return out


def _leaf_paths(node: Any, path: Path) -> Iterator[Path]:
    if isinstance(node, dict) and node:
        for k, v in node.items():
            yield from _leaf_paths(v, (*path, k))
    elif isinstance(node, list) and node:
        for i, v in enumerate(node):
            yield from _leaf_paths(v, (*path, i))
    elif path:
        yield path


def _references(text: str, where: Path, data: dict[str, Any]) -> list[_Ref]:
    """Every config path and environment variable the interpolations in ``text`` (the unresolved
    value at ``where``) read, as OmegaConf's grammar visitor sees them (nested ones included)."""
    from omegaconf.grammar_parser import parse
    from omegaconf.grammar_visitor import GrammarVisitor

    refs: list[_Ref] = []

    def on_node(key: Any, memo: Any = None) -> Any:  # the placeholder value; only the reference is kept
        raw = getattr(key, "raw", key)
        dots = getattr(key, "relative_dots", None)
        parts = getattr(key, "parts", None)
        if dots is None:
            dots = len(raw) - len(raw.lstrip("."))
        refs.append(_Ref("node", _absolute(dots, parts if parts is not None else _split(raw[dots:]), where, data)))
        return "x"

    def on_resolver(name: str, args: tuple[Any, ...], args_str: tuple[str, ...]) -> str:
        if name == "oc.env" and args:
            refs.append(_Ref("env", str(args[0])))
        elif name in _PASS_THROUGH and args:
            key = str(args[0])
            dots = len(key) - len(key.lstrip("."))
            refs.append(_Ref("node", _absolute(dots, _split(key[dots:]), where, data)))
        return "x"

    try:
        GrammarVisitor(
            node_interpolation_callback=on_node, resolver_interpolation_callback=on_resolver, memo=None
        ).visit(parse(text))
    except Exception:  # noqa: BLE001 - anything OmegaConf's grammar cannot read is kept to its owner
        return [_Ref("opaque", dotted(where) if where else "?")]
    return refs


def _split(key: str) -> tuple[str, ...]:
    return tuple(re.findall(r"[^.\[\]]+", key))


def _absolute(dots: int, parts: Any, where: Path, data: dict[str, Any]) -> Path:
    """A key as written (``a.b``, ``.sibling``, ``..up.x``) -> a path in ``data`` (list indices as
    ints). A relative key counts from the container of the value at ``where`` (OmegaConf's rule)."""
    base = where[: max(len(where) - dots, 0)] if dots else ()
    out: list[str | int] = list(base)
    node: Any = _get(data, base)
    for part in parts:
        key: str | int = int(part) if isinstance(node, list) and str(part).isdigit() else part
        out.append(key)
        node = _get(node, (key,))
    return tuple(out)


def _get(node: Any, path: Path) -> Any:
    for k in path:
        try:
            node = node[k]
        except (KeyError, IndexError, TypeError):
            return None
    return node
