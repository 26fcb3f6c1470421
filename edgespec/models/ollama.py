"""Models pulled by Ollama, read in place (never written): its manifests name each model's
layers, and the layer of media type `application/vnd.ollama.image.model` is a GGUF blob.

The layout is Ollama's own (github.com/ollama/ollama): `envconfig.Models()` is $OLLAMA_MODELS
or ~/.ollama/models (docs/faq.md adds /usr/share/ollama/.ollama/models for the Linux service;
on Windows the home folder is %USERPROFILE%); `server/manifest.go` keeps a name's manifest at
`manifests/HOST/NAMESPACE/MODEL/TAG` (`types/model/name.go`: `Name.Filepath`, defaults
registry.ollama.ai, library and latest); `GetBlobsPath` turns the digest `sha256:HEX` into
`blobs/sha256-HEX`, and accepts no other form.
"""

from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from edgespec.errors import FetchError

MODEL_LAYER = "application/vnd.ollama.image.model"
DEFAULT_HOST, DEFAULT_NAMESPACE, DEFAULT_TAG = "registry.ollama.ai", "library", "latest"
# Ollama's isValidPart: a letter, digit or `_` first, then `-`, `_` and `.` too (never `..`
# alone, so no part climbs out of the store); a host may hold a port.
_PART = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,79}")
_HOST = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:-]{0,349}")
_NAMESPACE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_-]{0,79}")
_DIGEST = re.compile(r"sha256[:-]([0-9a-fA-F]{64})")


@dataclass(frozen=True)
class OllamaName:
    host: str
    namespace: str
    model: str
    tag: str

    @property
    def short(self) -> str:
        """As `ollama list` shows it: the default host and namespace left out."""
        prefix = ""
        if self.host.lower() != DEFAULT_HOST:
            prefix = f"{self.host}/{self.namespace}/"
        elif self.namespace.lower() != DEFAULT_NAMESPACE:
            prefix = f"{self.namespace}/"
        return f"{prefix}{self.model}:{self.tag}"


def parse_name(text: str) -> OllamaName:
    """`[HOST/][NAMESPACE/]MODEL[:TAG]`, as Ollama's ParseName reads it."""
    rest, tag = text, DEFAULT_TAG
    if rest.rfind(":") > rest.rfind("/"):
        rest, tag = rest.rsplit(":", 1)
    parts = rest.split("/")
    if len(parts) > 3:
        raise FetchError(f"not an Ollama model name: {text!r} (HOST/NAMESPACE/MODEL:TAG at most)")
    host, namespace, model = [DEFAULT_HOST, DEFAULT_NAMESPACE][: 3 - len(parts)] + parts
    checks = [(_HOST, host), (_NAMESPACE, namespace), (_PART, model), (_PART, tag)]
    if not all(pattern.fullmatch(part) for pattern, part in checks):
        raise FetchError(f"not an Ollama model name: {text!r}")
    return OllamaName(host, namespace, model, tag)


def store_candidates() -> list[Path]:
    """Where Ollama keeps its models: $OLLAMA_MODELS alone when it is set, else the places an
    install puts them (the user's, then the Linux service's)."""
    chosen = os.environ.get("OLLAMA_MODELS", "").strip().strip("\"'")
    if chosen:
        return [Path(chosen).expanduser()]
    places = [Path.home() / ".ollama" / "models"]
    if sys.platform.startswith("linux"):
        places.append(Path("/usr/share/ollama/.ollama/models"))
    return places


def store() -> Path | None:
    """The first of `store_candidates` that holds manifests, or None."""
    return next((p for p in store_candidates() if (p / "manifests").is_dir()), None)


def model_path(text: str) -> Path:
    """The GGUF blob of a pulled model; FetchError (one line, naming the fix) otherwise."""
    name = parse_name(text)
    root = store()
    if root is None:
        places = " or ".join(str(p) for p in store_candidates())
        raise FetchError(
            f"no Ollama model store at {places}: set OLLAMA_MODELS to the folder that holds "
            "Ollama's manifests/ and blobs/"
        )
    manifest = root / "manifests" / name.host / name.namespace / name.model / name.tag
    if not manifest.is_file():
        raise FetchError(
            f"Ollama has not pulled {name.short} (no {manifest}): run `ollama pull {name.short}`"
        )
    return _blob(root, manifest, name.short)


def _blob(root: Path, manifest: Path, short: str) -> Path:
    again = f"run `ollama pull {short}` again"
    try:
        doc = json.loads(manifest.read_text(encoding="utf-8"))
        layers = [x for x in doc["layers"] if x.get("mediaType") == MODEL_LAYER]
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise FetchError(f"Ollama's manifest {manifest} cannot be read ({exc}): {again}") from exc
    if not layers:
        raise FetchError(f"Ollama's {short} has no model layer ({MODEL_LAYER}): no GGUF to load")
    digest = _DIGEST.fullmatch(str(layers[0].get("digest", "")))
    if digest is None:
        raise FetchError(f"Ollama's manifest {manifest} names no sha256 digest: {again}")
    blob = root / "blobs" / f"sha256-{digest.group(1)}"
    if not blob.is_file():
        raise FetchError(
            f"Ollama's manifest for {short} points to {blob}, which is missing: {again}"
        )
    size = layers[0].get("size")
    if isinstance(size, int) and blob.stat().st_size != size:
        raise FetchError(
            f"Ollama's blob {blob} holds {blob.stat().st_size} bytes, its manifest says {size}: "
            f"{again}"
        )
    return blob


def pulled() -> list[tuple[str, Path]]:
    """Every pulled model whose GGUF blob is there: (its short name, the blob)."""
    root = store()
    if root is None:
        return []
    found = []
    for manifest in sorted((root / "manifests").glob("*/*/*/*")):
        if not manifest.is_file():
            continue
        host, namespace, model, tag = manifest.relative_to(root / "manifests").parts
        short = OllamaName(host, namespace, model, tag).short
        try:
            found.append((short, _blob(root, manifest, short)))
        except FetchError:
            continue  # a broken pull is `model_path`'s to report, when it is asked for
    return found
