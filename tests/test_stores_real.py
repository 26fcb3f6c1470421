"""The default pair where a new user has it, end to end: the target pulled by Ollama and the
draft in the Hugging Face cache (or both in Ollama's store), found, loaded in place, and the
text exactly what naming both files gives; nothing in the stores written."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from edgespec.system import paths
from tests.conftest import RealPair, closed_port, edgespec
from tests.fake_stores import env_of, hf_cache, ollama_store, snapshot

pytestmark = pytest.mark.real

PROMPT = "Write a Python function that returns the n-th Fibonacci number."
DRAFT_IN_HF = "Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"


def stores_env(where: Path) -> dict[str, str]:
    """The stores under `where`, an edgespec home of its own that starts with this machine's
    measurements (the llama.cpp build's check, the calibration: a fresh home would measure
    them again, which is not what is tested here), and no hub."""
    for cached in ("checks", "calibration"):
        if (paths.home() / cached).is_dir():
            shutil.copytree(paths.home() / cached, where / "edgespec" / cached)
    (where / "home").mkdir(exist_ok=True)
    env = env_of(where)
    env.update(HF_ENDPOINT=f"http://127.0.0.1:{closed_port()}", PYTHONUNBUFFERED="1")
    env.pop("EDGESPEC_DEBUG", None)
    return env


def untouched(where: Path, real_pair: RealPair) -> dict[str, object]:
    """What the stores (and the files they link to) look like."""
    files = {p: (os.stat(p).st_size, os.stat(p).st_mtime_ns) for p in real_pair.__dict__.values()}
    return {"stores": {p: snapshot(where / p) for p in ("ollama", "hf", "home")}, "files": files}


def test_an_ollama_target_speculates_with_the_draft_found_in_the_hf_cache(
    real_pair: RealPair, tmp_path: Path
) -> None:
    ollama_store(tmp_path / "ollama", {"qwen2.5-coder:1.5b": real_pair.target})
    hf_cache(tmp_path / "hf" / "hub", {DRAFT_IN_HF: real_pair.draft})
    env = stores_env(tmp_path)
    before = untouched(tmp_path, real_pair)
    greedy = ["-n", "48", "--drafter", "model", "--stats", PROMPT]
    found = edgespec("run", "--target", "ollama:qwen2.5-coder:1.5b", *greedy, env=env)
    assert found.returncode == 0, found.stderr
    named = ["--target", str(real_pair.target), "--draft", str(real_pair.draft)]
    both = edgespec("run", *named, *greedy, env=env)
    assert both.returncode == 0, both.stderr
    assert found.stdout == both.stdout and found.stdout.strip()
    note = f"draft hf:{DRAFT_IN_HF} (Qwen2.5-Coder 0.5B Q4_K_M, 0.49 GB, the Hugging Face cache)"
    assert found.stderr.count(f"{note} found for ollama:qwen2.5-coder:1.5b") == 1
    assert "rounds by drafter: model" in found.stderr.splitlines()[-1]  # it speculated
    # auto chooses its drafts by the clock, so its batches (and llama.cpp's near-ties) differ
    # from run to run: it is held to finding the same draft, said once.
    auto = edgespec("run", "--target", "ollama:qwen2.5-coder:1.5b", "-n", "8", PROMPT, env=env)
    assert auto.returncode == 0 and auto.stdout.strip(), auto.stderr
    assert auto.stderr.count(f"{note} found for ollama:qwen2.5-coder:1.5b") == 1
    assert untouched(tmp_path, real_pair) == before


def test_with_the_pair_in_ollama_only_plan_names_the_draft_it_found(
    real_pair: RealPair, tmp_path: Path
) -> None:
    ollama_store(
        tmp_path / "ollama",
        {"qwen2.5-coder:1.5b": real_pair.target, "qwen2.5-coder:0.5b": real_pair.draft},
    )
    env = stores_env(tmp_path)
    before = untouched(tmp_path, real_pair)
    res = edgespec("plan", "--target", "ollama:qwen2.5-coder:1.5b", "--json", env=env)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert Path(doc["models"]["draft"] or "").resolve() == real_pair.draft.resolve() or (
        not doc["draft_model"]["loaded"]  # auto may leave a found draft out, saying why
    )
    reason = doc["draft_model"]["reason"]
    assert reason.startswith("draft ollama:qwen2.5-coder:0.5b (Qwen2.5-Coder 0.5B Q4_K_M")
    assert "found for ollama:qwen2.5-coder:1.5b" in reason
    assert "Downloading" not in res.stderr and "downloading" not in res.stderr
    assert untouched(tmp_path, real_pair) == before
