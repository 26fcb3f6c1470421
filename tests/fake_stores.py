"""Model stores laid out as Ollama, the Hugging Face cache and LM Studio lay them out, built
under a test's folder from links to existing GGUF files (nothing is copied)."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

# The Hugging Face cache's revision folder name: any 40 hex digits.
REVISION = "0" * 40


def digest_of(path: Path) -> str:
    """A stand-in for the blob's sha256 (Ollama names blobs by it; edgespec never checks it)."""
    return hashlib.sha256(str(path).encode()).hexdigest()


def ollama_store(root: Path, models: dict[str, Path]) -> Path:
    """`models`: Ollama name (`qwen2.5-coder:1.5b`, `library/x:tag`) -> a GGUF file, linked in
    as its blob under a manifest as `ollama pull` writes it."""
    for name, gguf in models.items():
        rest, _, tag = name.partition(":")
        parts = rest.split("/")
        host, namespace, model = ["registry.ollama.ai", "library"][: 3 - len(parts)] + parts
        digest = digest_of(gguf)
        blob = root / "blobs" / f"sha256-{digest}"
        blob.parent.mkdir(parents=True, exist_ok=True)
        if not blob.exists():
            os.symlink(gguf, blob)
        manifest = root / "manifests" / host / namespace / model / (tag or "latest")
        manifest.parent.mkdir(parents=True, exist_ok=True)
        layers = [
            {
                "mediaType": "application/vnd.ollama.image.model",
                "digest": f"sha256:{digest}",
                "size": gguf.stat().st_size,
            },
            {"mediaType": "application/vnd.ollama.image.template", "digest": "sha256:" + "1" * 64},
        ]
        config = {"mediaType": "application/vnd.docker.container.image.v1+json"}
        doc = {"schemaVersion": 2, "config": config, "layers": layers}
        manifest.write_text(json.dumps(doc), encoding="utf-8")
    return root


def hf_cache(hub: Path, files: dict[str, Path]) -> Path:
    """`files`: `OWNER/NAME/FILE` -> a GGUF file, linked in as huggingface_hub caches it (a
    snapshot's file linking to a blob, refs/main naming the snapshot)."""
    for name, gguf in files.items():
        owner, repo_name, filename = name.split("/", 2)
        repo = hub / f"models--{owner}--{repo_name}"
        blob = repo / "blobs" / digest_of(gguf)
        blob.parent.mkdir(parents=True, exist_ok=True)
        if not blob.exists():
            os.symlink(gguf, blob)
        snapshot = repo / "snapshots" / REVISION / filename
        snapshot.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(os.path.relpath(blob, snapshot.parent), snapshot)
        (repo / "refs").mkdir(exist_ok=True)
        (repo / "refs" / "main").write_text(REVISION, encoding="utf-8")
    return hub


def lmstudio_folder(models: Path, files: dict[str, Path]) -> Path:
    """`files`: `PUBLISHER/MODEL/FILE.gguf` -> a GGUF file, linked in as LM Studio keeps it."""
    for name, gguf in files.items():
        path = models / name
        path.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(gguf, path)
    return models


def snapshot(root: Path) -> dict[str, tuple[int, int, bool]]:
    """Every entry under `root` (links not followed): its size, mtime and whether it is a
    link; what a store looks like, to compare before and after a command."""
    seen = {}
    for folder, dirs, names in os.walk(root):
        for name in [*dirs, *names]:
            st = os.lstat(os.path.join(folder, name))
            seen[os.path.relpath(os.path.join(folder, name), root)] = (
                st.st_size,
                st.st_mtime_ns,
                os.path.islink(os.path.join(folder, name)),
            )
    return seen


def isolate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Empty stores under tmp_path for this process: a home of its own (LM Studio's folder is
    found from it), Ollama's (OLLAMA_MODELS), the Hugging Face cache and edgespec's."""
    from huggingface_hub import constants

    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("USERPROFILE", str(home))
    monkeypatch.setenv("OLLAMA_MODELS", str(tmp_path / "ollama"))
    monkeypatch.setenv("EDGESPEC_HOME", str(tmp_path / "edgespec"))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    return tmp_path


def env_of(where: Path, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a command that sees `isolate`'s stores (and no hub)."""
    return {
        **(base if base is not None else os.environ),
        "HOME": str(where / "home"),
        "USERPROFILE": str(where / "home"),
        "OLLAMA_MODELS": str(where / "ollama"),
        "EDGESPEC_HOME": str(where / "edgespec"),
        "HF_HOME": str(where / "hf"),
        "HF_HUB_OFFLINE": "1",
    }
