"""Derived models (`[models.NAME.derive]`): made once from a verified source, kept beside a
record, made again when the file or the recipe changes; what a failed or odd quantization
leaves. llama.cpp's quantizer itself runs in tests/test_heavy_pair.py (real tier)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from edgespec.errors import FetchError, VerifyError
from edgespec.models import derive, files, find_local
from edgespec.models.registry import ModelSpec, parse_registry

SOURCE_BYTES = b"GGUF source weights"
MADE = b"GGUF made from the source"


class Quantizer:
    """Stands in for llama.cpp's: writes `made` and remembers what it was asked."""

    def __init__(self, made: bytes = MADE) -> None:
        self.made = made
        self.calls: list[tuple[str, str, bool]] = []

    def __call__(self, source: Path, out: Path, kind: str, pure: bool) -> None:
        assert source.read_bytes() == SOURCE_BYTES
        self.calls.append((source.name, kind, pure))
        out.write_bytes(self.made)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def derived_spec(**fields: object) -> ModelSpec:
    models = {
        "src": {
            "repo": "org/m-GGUF",
            "files": "m-q4_k_m.gguf",
            "license": "MIT",
            "sha256": sha(SOURCE_BYTES),
        },
        "q": {
            "files": "m-q4_0.gguf",
            "license": "MIT",
            "sha256": sha(MADE),
            "size": len(MADE),
            "derive": {"from": "src", "type": "Q4_0", "pure": True},
            **fields,
        },
    }
    pairs = {"p": {"target": "src", "draft": "q", "default": True}}
    return parse_registry({"models": models, "pairs": pairs}, "test.toml").models["q"]


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("EDGESPEC_HOME", str(tmp_path))
    return tmp_path


def with_source(spec: ModelSpec) -> None:
    assert spec.derive is not None
    source = files.store_path(spec.derive.source)
    source.parent.mkdir(parents=True, exist_ok=True)
    source.write_bytes(SOURCE_BYTES)


def test_made_once_from_the_verified_source_then_found(home: Path) -> None:
    spec = derived_spec()
    with_source(spec)
    quantize, notes = Quantizer(), files.Notes()
    made = derive.fetch(spec, quantize=quantize, progress=notes)
    assert made.path == home / "derived" / "m-q4_0.gguf" and made.source == "derived"
    assert made.path.read_bytes() == MADE
    assert quantize.calls == [("m-q4_k_m.gguf", "Q4_0", True)]
    assert json.loads(made.path.with_suffix(".json").read_text()) == {
        "source": "m-q4_k_m.gguf",
        "source_sha256": sha(SOURCE_BYTES),
        "type": "Q4_0",
        "pure": True,
        "sha256": sha(MADE),
    }
    assert len(notes.lines) == 1 and notes.lines[0].startswith("making m-q4_0.gguf")
    # Found again offline, with no quantizing, by `fetch` and by `edgespec models`' lookup.
    assert derive.fetch(spec, offline=True, quantize=quantize).path == made.path
    assert find_local(spec) == made and len(quantize.calls) == 1
    assert sorted(p.name for p in made.path.parent.iterdir()) == ["m-q4_0.gguf", "m-q4_0.json"]


def test_a_changed_file_or_recipe_is_made_again(home: Path) -> None:
    spec = derived_spec()
    with_source(spec)
    quantize = Quantizer()
    path = derive.fetch(spec, quantize=quantize).path
    path.write_bytes(b"GGUF edited by hand")
    notes = files.Notes()
    assert derive.fetch(spec, quantize=quantize, progress=notes).path.read_bytes() == MADE
    assert notes.lines[0] == "m-q4_0.gguf does not match its record; it will be made again"
    not_pure = derived_spec(derive={"from": "src", "type": "Q4_0"})
    assert find_local(not_pure) is None  # the record says pure: another recipe
    derive.fetch(not_pure, quantize=quantize)
    assert [call[2] for call in quantize.calls] == [True, True, False]


def test_other_bytes_than_the_projects_are_kept_with_a_note(home: Path) -> None:
    spec = derived_spec()
    with_source(spec)
    notes = files.Notes()
    made = derive.fetch(spec, quantize=Quantizer(b"GGUF made from the sourcE"), progress=notes)
    assert made.path.read_bytes() == b"GGUF made from the sourcE"
    assert "differs from the one this project's machines made" in notes.lines[-1]
    assert find_local(spec) == made  # its own record, not the registry's digest, says unchanged


def test_a_size_other_than_the_registrys_keeps_nothing(home: Path) -> None:
    spec = derived_spec(size=len(MADE) + 1)
    with_source(spec)
    with pytest.raises(VerifyError, match=f"made {len(MADE)} bytes where the registry says"):
        derive.fetch(spec, quantize=Quantizer())
    assert list((home / "derived").iterdir()) == []


def test_a_failed_quantization_leaves_nothing(home: Path) -> None:
    spec = derived_spec()
    with_source(spec)

    def refuses(source: Path, out: Path, kind: str, pure: bool) -> None:
        out.write_bytes(b"half")
        raise FetchError("llama.cpp could not quantize m-q4_k_m.gguf to Q4_0")

    with pytest.raises(FetchError, match="could not quantize"):
        derive.fetch(spec, quantize=refuses)
    assert list((home / "derived").iterdir()) == []


def test_offline_without_the_source_says_to_pull(home: Path) -> None:
    quantize = Quantizer()
    with pytest.raises(FetchError, match="to make q: src is not on disk and --offline was given"):
        derive.fetch(derived_spec(), offline=True, quantize=quantize)
    assert quantize.calls == []


def test_a_source_that_fails_its_sha256_is_not_quantized(home: Path) -> None:
    spec = derived_spec()
    assert spec.derive is not None
    source = files.store_path(spec.derive.source)
    source.parent.mkdir(parents=True)
    source.write_bytes(b"GGUF tampered")
    quantize = Quantizer()
    with pytest.raises(FetchError):
        derive.fetch(spec, offline=True, quantize=quantize)
    assert quantize.calls == []


def test_too_little_disk_space_is_said_before_quantizing(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = derived_spec(size=3_560_416_320)
    with_source(spec)
    monkeypatch.setattr(derive.shutil, "disk_usage", lambda path: SimpleNamespace(free=10**9))
    quantize = Quantizer()
    with pytest.raises(
        FetchError, match=r"1\.0 GB free in .*, 3\.6 GB needed; free space or set EDGESPEC_HOME"
    ):
        derive.fetch(spec, quantize=quantize)
    assert quantize.calls == []
