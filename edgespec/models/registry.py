"""The model registry: named draft/target pairs read from models.toml and validated."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Collection, Mapping
from dataclasses import dataclass, fields
from importlib import resources
from pathlib import Path
from typing import Any

from edgespec.errors import RegistryError
from edgespec.system import settings

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

# fullmatch everywhere: `$` would also accept a trailing newline.
_SHA256 = re.compile(r"[0-9a-f]{64}")
_REPO = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")
_PACKAGE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*==[A-Za-z0-9.+!_-]+")
# A file inside the repository: relative, no `..`, no control characters.
_FILE = re.compile(r"(?!/)(?!.*(?:^|/)\.\.(?:/|$))[^\x00-\x1f\\]+\.gguf")


@dataclass(frozen=True)
class Mirror:
    """The file split into raw shards carried by packages on the Python package index."""

    packages: tuple[str, ...]
    member: str = "*.bin"


# What llama.cpp's quantizer may make of a registry model here (`[models.NAME.derive]`).
DERIVE_TYPES = ("F16", "BF16", "Q8_0", "Q4_0")


@dataclass(frozen=True)
class Derivation:
    """The model is made on this machine from `source` (a verified registry file) by llama.cpp's
    own quantizer, as `llama-quantize --allow-requantize [--pure] SOURCE OUT TYPE` would."""

    source: ModelSpec
    type: str
    pure: bool = False


@dataclass(frozen=True)
class ModelSpec:
    name: str
    repo: str
    files: tuple[str, ...]
    license: str
    revision: str | None = None
    size: int | None = None
    sha256: str | None = None
    verified: bool = False
    note: str = ""
    mirror: Mirror | None = None
    derive: Derivation | None = None

    @property
    def filename(self) -> str:
        """The file llama.cpp is given: the first of a split model."""
        return self.files[0]


@dataclass(frozen=True)
class PairSpec:
    name: str
    target: ModelSpec
    draft: ModelSpec
    description: str = ""
    default: bool = False


@dataclass(frozen=True)
class Registry:
    models: Mapping[str, ModelSpec]
    pairs: Mapping[str, PairSpec]
    source: str

    @property
    def default_pair(self) -> PairSpec:
        for pair in self.pairs.values():
            if pair.default:
                return pair
        raise RegistryError(
            f"{self.source} defines no pairs; name the models with --target/--draft"
        )

    def pair(self, name: str | None) -> PairSpec:
        if name is None:
            return self.default_pair
        if name not in self.pairs:
            known = ", ".join(self.pairs)
            raise RegistryError(f"unknown pair {name!r}; known pairs: {known}")
        return self.pairs[name]

    def model(self, name: str) -> ModelSpec:
        if name not in self.models:
            raise RegistryError(
                f"unknown model {name!r}: give a registry model name (see `edgespec models`) "
                "or a path to a .gguf file"
            )
        return self.models[name]


def _field(
    where: str, table: Mapping[str, Any], key: str, kind: type | tuple[type, ...], required: bool
) -> Any:
    if key not in table:
        if required:
            raise RegistryError(f"{where}: missing field {key!r}")
        return None
    value = table[key]
    # bool is an int in Python; a size of `true` is still wrong.
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise RegistryError(f"{where}: field {key!r} must be {names}, got {value!r}")
    return value


def _table(where: str, table: Any, fields: Collection[str]) -> dict[str, Any]:
    """`table` where it is a TOML table of `fields` only; RegistryError otherwise."""
    if not isinstance(table, dict):
        raise RegistryError(f"{where}: must be a table")
    unknown = sorted(set(table) - set(fields))
    if unknown:
        raise RegistryError(f"{where}: unknown field {unknown[0]!r}")
    return table


# A model's table holds ModelSpec's fields by the same names, but its own name.
_MODEL_FIELDS = {f.name for f in fields(ModelSpec)} - {"name"}


def _parse_model(
    name: str, table: Any, source: str, models: Mapping[str, ModelSpec], names: Collection[str]
) -> ModelSpec:
    """`models`: those parsed so far, every fetched one among them; `names`: all of them."""
    where = f"{source}: models.{name}"
    table = _table(where, table, _MODEL_FIELDS)
    derive = None
    if "derive" in table:
        derive = _parse_derive(f"{where}.derive", table["derive"], models, names)
        for field in ("mirror", "revision"):
            if field in table:
                raise RegistryError(f"{where}: a derived model has no {field!r}")
        if "size" not in table:  # what the disk must hold, and what the quantizer must make
            raise RegistryError(f"{where}: a derived model needs its 'size'")
        # Named after where its weights come from, unless said otherwise.
        table = {"repo": derive.source.repo, **table}
    repo = _field(where, table, "repo", str, True)
    if not _REPO.fullmatch(repo) or ".." in repo.split("/"):
        raise RegistryError(f"{where}: field 'repo' must look like 'owner/name', got {repo!r}")
    raw_files = _field(where, table, "files", (str, list), True)
    files = (raw_files,) if isinstance(raw_files, str) else tuple(raw_files)
    if not files or not all(isinstance(f, str) and f.endswith(".gguf") for f in files):
        raise RegistryError(f"{where}: field 'files' must name one or more .gguf files")
    for f in files:
        if not _FILE.fullmatch(f):
            raise RegistryError(
                f"{where}: file {f!r} must be a relative path inside the repository"
            )
    size = _field(where, table, "size", int, False)
    sha256 = _field(where, table, "sha256", str, False)
    if (size is not None or sha256 is not None) and len(files) > 1:
        raise RegistryError(f"{where}: 'size' and 'sha256' are only allowed for single-file models")
    if size is not None and size <= 0:
        raise RegistryError(f"{where}: field 'size' must be positive, got {size}")
    if sha256 is not None and not _SHA256.fullmatch(sha256):
        raise RegistryError(f"{where}: field 'sha256' must be 64 lowercase hex digits")
    mirror = None
    if "mirror" in table:
        mirror = _parse_mirror(f"{where}.mirror", table["mirror"])
        if len(files) > 1:
            raise RegistryError(
                f"{where}.mirror: mirrors are only supported for single-file models"
            )
    return ModelSpec(
        name=name,
        repo=repo,
        files=files,
        license=_field(where, table, "license", str, True),
        revision=_field(where, table, "revision", str, False),
        size=size,
        sha256=sha256,
        verified=bool(_field(where, table, "verified", bool, False)),
        note=_field(where, table, "note", str, False) or "",
        mirror=mirror,
        derive=derive,
    )


def _parse_derive(
    where: str, table: Any, models: Mapping[str, ModelSpec], names: Collection[str]
) -> Derivation:
    table = _table(where, table, {"from", "type", "pure"})
    ref = _field(where, table, "from", str, True)
    # By now `models` holds every fetched model and the derived ones parsed before this one.
    source = models.get(ref)
    if source is None and ref not in names:
        raise RegistryError(f"{where}: field 'from' names unknown model {ref!r}")
    if source is None or source.derive is not None or source.sha256 is None:
        raise RegistryError(
            f"{where}: field 'from' must name a fetched (not derived) single-file model "
            f"with a sha256, got {ref!r}"
        )
    kind = _field(where, table, "type", str, True)
    if kind not in DERIVE_TYPES:
        raise RegistryError(
            f"{where}: field 'type' must be one of {', '.join(DERIVE_TYPES)}, got {kind!r}"
        )
    return Derivation(source, kind, bool(_field(where, table, "pure", bool, False)))


def _parse_mirror(where: str, table: Any) -> Mirror:
    table = _table(where, table, {"packages", "member"})
    packages = _field(where, table, "packages", list, True)
    if not packages:
        raise RegistryError(f"{where}: field 'packages' is empty")
    for pkg in packages:
        if not isinstance(pkg, str) or not _PACKAGE.fullmatch(pkg):
            raise RegistryError(f"{where}: package {pkg!r} must be pinned as 'name==version'")
    member = _field(where, table, "member", str, False) or "*.bin"
    return Mirror(packages=tuple(packages), member=member)


def parse_registry(data: Mapping[str, Any], source: str) -> Registry:
    """Validate parsed TOML; every error names the entry and the field."""
    unknown = sorted(set(data) - {"models", "pairs"})
    if unknown:
        raise RegistryError(f"{source}: unknown top-level table {unknown[0]!r}")
    raw_models = data.get("models", {})
    raw_pairs = data.get("pairs", {})
    if not isinstance(raw_models, dict) or not isinstance(raw_pairs, dict):
        raise RegistryError(f"{source}: 'models' and 'pairs' must be tables")
    models: dict[str, ModelSpec] = {}

    # Fetched models first: a derived one names its source, wherever that stands in the file.
    def derived(item: tuple[str, Any]) -> bool:
        return isinstance(item[1], dict) and "derive" in item[1]

    made_here: dict[str, str] = {}  # derived file: its model
    for name, table in sorted(raw_models.items(), key=derived):
        models[name] = spec = _parse_model(name, table, source, models, raw_models.keys())
        if spec.derive is not None:
            other = made_here.setdefault(spec.filename, name)
            if other != name:  # one store path, one record: each would remake the other
                raise RegistryError(f"{source}: models.{name}: file {spec.filename!r} is {other}'s")
    models = {name: models[name] for name in raw_models}
    pairs: dict[str, PairSpec] = {}
    for name, table in raw_pairs.items():
        where = f"{source}: pairs.{name}"
        table = _table(where, table, {"target", "draft", "description", "default"})
        roles = {}
        for role in ("target", "draft"):
            ref = _field(where, table, role, str, True)
            if ref not in models:
                raise RegistryError(f"{where}: field {role!r} names unknown model {ref!r}")
            roles[role] = models[ref]
        pairs[name] = PairSpec(
            name=name,
            target=roles["target"],
            draft=roles["draft"],
            description=_field(where, table, "description", str, False) or "",
            default=bool(_field(where, table, "default", bool, False)),
        )
    defaults = [p.name for p in pairs.values() if p.default]
    if pairs and len(defaults) != 1:
        raise RegistryError(
            f"{source}: exactly one pair must have default = true, found {defaults}"
        )
    return Registry(models=models, pairs=pairs, source=source)


def load_registry(path: str | os.PathLike[str] | None = None) -> Registry:
    """Read the registry from `path`, $EDGESPEC_REGISTRY, or the copy shipped with edgespec."""
    chosen = path or settings.text(settings.REGISTRY)
    if chosen:
        file = Path(chosen)
        try:
            text = file.read_text(encoding="utf-8")
        except OSError as exc:
            raise RegistryError(f"cannot read registry {file}: {exc.strerror}") from exc
        source = str(file)
    else:
        text = resources.files("edgespec").joinpath("models.toml").read_text(encoding="utf-8")
        source = "models.toml"
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise RegistryError(f"{source}: not valid TOML: {exc}") from exc
    return parse_registry(data, source)
