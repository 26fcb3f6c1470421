"""GGUF files where users already keep them, read in place (nothing is copied or written):
Ollama's store (`ollama:NAME[:TAG]`, see ollama.py), the Hugging Face cache
(`hf:REPO[/FILE]`), LM Studio's models folder (`lmstudio:PUBLISHER/MODEL[/FILE]`), and
edgespec's own store.

LM Studio keeps models as `PUBLISHER/MODEL/FILE.gguf` under its models folder
(lmstudio.ai/docs/advanced/sideload); its home is the folder named in ~/.lmstudio-home-pointer,
else ~/.cache/lm-studio where that exists, else ~/.lmstudio (lmstudio-ai/lmstudio-js,
packages/lms-common-server/src/findLMStudioHome.ts), and the models folder is the home's
`models`, unless its settings.json names another (`downloadsFolder`).

The Hugging Face cache keeps a repository as `models--OWNER--NAME/snapshots/REVISION/FILE`
(huggingface_hub's "Manage the cache" guide). `hf:` names are looked up with huggingface_hub's
cache API; listing every file walks that layout instead, because importing the cache API is
slow, which a run that only looks for a draft should not pay.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from edgespec.errors import FetchError
from edgespec.models import ollama
from edgespec.models.registry import ModelSpec
from edgespec.system import paths

PREFIXES = ("ollama:", "hf:", "lmstudio:")
SPLIT_PART = re.compile(r"(.*)-(\d{5})-of-(\d{5})\.gguf")
_REPO = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")


@dataclass(frozen=True)
class Found:
    """A GGUF file in one of the stores: `spec` names it as --target/--draft take it."""

    spec: str
    store: str  # "ollama", "hf-cache", "lmstudio", "edgespec" or "beside the target"
    path: Path


def check_first_part(path: Path) -> None:
    """A split model is opened by its first part (llama.cpp finds the others beside it)."""
    split = SPLIT_PART.fullmatch(path.name)
    if split and int(split.group(2)) != 1:
        first = path.with_name(f"{split.group(1)}-00001-of-{split.group(3)}.gguf")
        raise FetchError(
            f"{path.name} is part {int(split.group(2))} of a split model: give its first part, "
            f"{first}"
        )


def is_model_file(path: Path) -> bool:
    """A file worth offering as a model: not a projector of a vision model, not a later part."""
    split = SPLIT_PART.fullmatch(path.name)
    return "mmproj" not in path.name.lower() and not (split and int(split.group(2)) != 1)


def store_name(arg: str | None) -> str | None:
    """`arg` where it names a model in a store (`ollama:qwen2.5-coder:1.5b`), else None: the
    name to show for a file whose own name says nothing (an Ollama blob's digest)."""
    return arg if arg is not None and arg.startswith(PREFIXES) else None


def lookup(arg: str) -> Path | ModelSpec | None:
    """What a store-qualified name names: a file on disk, a file to fetch from the hub
    (`hf:REPO/FILE` not in the cache yet), or None when `arg` names no store."""
    kind, _, rest = arg.partition(":")
    if f"{kind}:" not in PREFIXES:
        return None
    if not rest:
        raise FetchError(f"{arg!r} names no model: {kind}:NAME")
    if kind == "ollama":
        return ollama.model_path(rest)
    if kind == "hf":
        return _hf(rest)
    return _lmstudio(rest)


def hub_cache() -> Path:
    """The Hugging Face cache, as huggingface_hub places it (HF_HUB_CACHE, HF_HOME...)."""
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE)


def _hf(rest: str) -> Path | ModelSpec:
    parts = rest.split("/")
    repo, filename = "/".join(parts[:2]), "/".join(parts[2:])
    if not _REPO.fullmatch(repo) or ".." in parts:
        raise FetchError(f"hf:{rest}: give hf:OWNER/NAME or hf:OWNER/NAME/FILE.gguf")
    if filename:
        split = SPLIT_PART.fullmatch(filename)
        names = [filename]
        if split:
            count = int(split.group(3))
            names = [f"{split.group(1)}-{i:05d}-of-{count:05d}.gguf" for i in range(1, count + 1)]
        # Fetched by edgespec's own fetcher: the cache first (offline), then the hub.
        return ModelSpec(name=f"hf:{rest}", repo=repo, files=tuple(names), license="")
    cached = _hf_cached_files(repo)
    if not cached:
        raise FetchError(
            f"hf:{repo} has no GGUF file in the Hugging Face cache ({hub_cache()}): name one, "
            f"hf:{repo}/FILE.gguf, to download it"
        )
    return _only_one(cached, f"hf:{repo}")


def _hf_cached_files(repo: str) -> list[Found]:
    """The repository's GGUF files in the cache, by huggingface_hub's cache scan."""
    from huggingface_hub import scan_cache_dir
    from huggingface_hub.errors import CacheNotFound

    try:
        info = scan_cache_dir(hub_cache())
    except CacheNotFound:
        return []
    found = []
    for cached in info.repos:
        if cached.repo_id == repo and cached.repo_type == "model":
            for revision in sorted(cached.revisions, key=lambda r: -r.last_modified):
                found += [f.file_path for f in revision.files if f.file_name.endswith(".gguf")]
    return _distinct(
        Found(f"hf:{repo}/{_in_snapshot(p)}", "hf-cache", p) for p in found if is_model_file(p)
    )


def _in_snapshot(path: Path) -> str:
    """A cached file's path in its repository (what follows snapshots/REVISION/)."""
    parts = path.parts
    at = len(parts) - 1 - parts[::-1].index("snapshots")
    return "/".join(parts[at + 2 :])


def _only_one(found: list[Found], what: str) -> Path:
    if len(found) == 1:
        return found[0].path
    found = sorted(found, key=lambda f: f.path)
    names = ", ".join(f.path.name for f in found)
    raise FetchError(f"{what} holds several GGUF files ({names}): name one, e.g. {found[0].spec}")


def lmstudio_home() -> Path:
    home = Path.home()
    pointer = home / ".lmstudio-home-pointer"
    try:
        named = pointer.read_text(encoding="utf-8").strip()
    except OSError:
        named = ""
    if named:
        return Path(named).expanduser()
    cache = home / ".cache" / "lm-studio"
    return cache if cache.is_dir() else home / ".lmstudio"


def lmstudio_models() -> Path:
    home = lmstudio_home()
    try:
        folder = json.loads((home / "settings.json").read_text(encoding="utf-8"))["downloadsFolder"]
    except (OSError, ValueError, KeyError, TypeError):
        folder = None
    return Path(folder).expanduser() if isinstance(folder, str) and folder else home / "models"


def _lmstudio(rest: str) -> Path:
    root = lmstudio_models()
    if not root.is_dir():
        raise FetchError(
            f"no LM Studio models folder at {root}: LM Studio's My Models tab shows where it "
            "keeps them (its settings.json names the folder as downloadsFolder)"
        )
    parts = rest.split("/")
    if ".." in parts or "" in parts or len(parts) > 3:
        raise FetchError(f"lmstudio:{rest}: give lmstudio:PUBLISHER/MODEL[/FILE.gguf]")
    if len(parts) == 3:
        path = root.joinpath(*parts)
        if not path.is_file():
            raise FetchError(f"LM Studio has no {path}: see `edgespec models` for what it has")
        return path
    files = [f for f in _lmstudio_listed(root) if _lmstudio_matches(f, parts)]
    if not files:
        raise FetchError(
            f"LM Studio has no model lmstudio:{rest} in {root}: see `edgespec models` for "
            "what it has"
        )
    return _only_one(files, f"lmstudio:{rest}")


def _lmstudio_matches(found: Found, asked: list[str]) -> bool:
    """PUBLISHER/MODEL matches the file's two folders; MODEL alone, its model folder."""
    where = found.spec.removeprefix("lmstudio:").split("/")
    return len(where) == 3 and where[2 - len(asked) : 2] == asked


def _lmstudio_listed(root: Path) -> Iterator[Found]:
    for path in _ggufs(root):
        yield Found(f"lmstudio:{'/'.join(path.relative_to(root).parts)}", "lmstudio", path)


def _ggufs(root: Path, depth: int = 4) -> Iterator[Path]:
    """GGUF model files under `root`, at most `depth` folders down; unreadable folders are
    skipped."""
    try:
        entries = sorted(root.iterdir())
    except OSError:
        return
    for entry in entries:
        if entry.name.startswith("."):
            continue
        if entry.is_dir() and depth > 0:
            yield from _ggufs(entry, depth - 1)
        elif entry.name.endswith(".gguf") and is_model_file(entry) and entry.is_file():
            yield entry


def _hf_listed() -> Iterator[Found]:
    root = hub_cache()
    for repo in sorted(root.glob("models--*--*")):
        repo_id = repo.name.removeprefix("models--").replace("--", "/")
        for snapshot in sorted((repo / "snapshots").glob("*")):
            for path in _ggufs(snapshot):
                yield Found(f"hf:{repo_id}/{_in_snapshot(path)}", "hf-cache", path)


def _distinct(found: Iterable[Found]) -> list[Found]:
    """Each file once, as first listed (a cache's snapshots link the same blob)."""
    seen: set[Path] = set()
    out = []
    for f in found:
        real = f.path.resolve()
        if real not in seen:
            seen.add(real)
            out.append(f)
    return out


def found_models(beside: Path | None = None) -> list[Found]:
    """Every GGUF model file in the stores (and in `beside`'s folder), each file once."""
    listed: list[Found] = []
    listed += [Found(f"ollama:{name}", "ollama", blob) for name, blob in ollama.pulled()]
    listed += _hf_listed()
    listed += _lmstudio_listed(lmstudio_models())
    listed += [Found(str(p), "edgespec", p) for p in _ggufs(paths.models_dir())]
    if beside is not None:
        listed += [Found(str(p), "beside the target", p) for p in _ggufs(beside.parent, 0)]
    return _distinct(listed)
