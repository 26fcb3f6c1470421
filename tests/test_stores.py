"""Targets named where users keep models (`ollama:`, `hf:`, `lmstudio:`, a path, a registry
name), resolved in place; each mistake one line naming its fix; the stores never written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from edgespec.errors import FetchError
from edgespec.models import ollama, stores
from edgespec.models.registry import load_registry
from edgespec.models.resolve import ModelRef, model_ref
from tests.conftest import edgespec_here
from tests.fake_stores import env_of, hf_cache, isolate, lmstudio_folder, ollama_store, snapshot
from tests.gguf_files import write_vocab_gguf

TOKENS = [f"t{i}".encode() for i in range(300)]


@pytest.fixture
def where(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return isolate(tmp_path, monkeypatch)


def gguf(path: Path, arch: str = "llama") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_vocab_gguf(path, TOKENS, arch=arch)


# --- Ollama --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "parts"),
    [
        ("qwen2.5-coder", ("registry.ollama.ai", "library", "qwen2.5-coder", "latest")),
        ("qwen2.5-coder:1.5b", ("registry.ollama.ai", "library", "qwen2.5-coder", "1.5b")),
        ("me/mine:q4", ("registry.ollama.ai", "me", "mine", "q4")),
        ("host.io:8080/me/mine:v1", ("host.io:8080", "me", "mine", "v1")),
    ],
)
def test_ollama_names_are_read_as_ollama_reads_them(text: str, parts: tuple[str, ...]) -> None:
    name = ollama.parse_name(text)
    assert (name.host, name.namespace, name.model, name.tag) == parts


@pytest.mark.parametrize("text", ["../x", "a/b/c/d", "x:..", "-x", "me.you/x", ""])
def test_a_name_ollama_would_refuse_is_refused(text: str) -> None:
    with pytest.raises(FetchError, match="not an Ollama model name"):
        ollama.parse_name(text)


def test_an_ollama_model_is_its_gguf_blob_read_in_place(where: Path) -> None:
    model = gguf(where / "files" / "m.gguf")
    ollama_store(where / "ollama", {"qwen2.5-coder:1.5b": model, "me/other": model})
    path = model_ref("ollama:qwen2.5-coder:1.5b", load_registry()).locate(quantize=_no_quantize)
    assert path.parent == where / "ollama" / "blobs" and path.resolve() == model
    assert ollama.model_path("me/other:latest").resolve() == model
    assert [name for name, _ in ollama.pulled()] == ["qwen2.5-coder:1.5b", "me/other:latest"]


def test_a_model_ollama_has_not_pulled_names_the_pull(where: Path) -> None:
    ollama_store(where / "ollama", {"other:1b": gguf(where / "m.gguf")})
    with pytest.raises(FetchError) as exc:
        ollama.model_path("qwen2.5-coder:7b")
    assert "run `ollama pull qwen2.5-coder:7b`" in str(exc.value)


def test_a_missing_ollama_store_names_ollama_models(
    where: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(FetchError, match=r"no Ollama model store at .*ollama.*set OLLAMA_MODELS"):
        ollama.model_path("qwen2.5-coder:1.5b")
    monkeypatch.delenv("OLLAMA_MODELS")
    assert ollama.store_candidates()[0] == where / "home" / ".ollama" / "models"


def test_a_manifest_whose_blob_is_missing_names_the_pull_again(where: Path) -> None:
    model = gguf(where / "m.gguf")
    ollama_store(where / "ollama", {"qwen2.5-coder:1.5b": model})
    for blob in (where / "ollama" / "blobs").iterdir():
        blob.unlink()
    with pytest.raises(FetchError) as exc:
        ollama.model_path("qwen2.5-coder:1.5b")
    assert "which is missing" in str(exc.value)
    assert "run `ollama pull qwen2.5-coder:1.5b` again" in str(exc.value)
    assert len(str(exc.value).splitlines()) == 1


def test_a_manifest_digest_never_leaves_the_blobs_folder(where: Path) -> None:
    ollama_store(where / "ollama", {"x:1": gguf(where / "m.gguf")})
    manifest = where / "ollama" / "manifests" / "registry.ollama.ai" / "library" / "x" / "1"
    doc = json.loads(manifest.read_text())
    doc["layers"][0]["digest"] = "sha256:../../../../etc/passwd"
    manifest.write_text(json.dumps(doc))
    with pytest.raises(FetchError, match="names no sha256 digest"):
        ollama.model_path("x:1")


# --- Hugging Face cache ---------------------------------------------------------------------


def test_hf_repo_and_file_come_from_the_cache_offline(where: Path) -> None:
    model = gguf(where / "files" / "d.gguf")
    hf_cache(where / "hf" / "hub", {"Org/Small-GGUF/small-q4_k_m.gguf": model})
    ref = model_ref("hf:Org/Small-GGUF/small-q4_k_m.gguf", load_registry())
    path = ref.locate(quantize=_no_quantize, offline=True)
    assert path.name == "small-q4_k_m.gguf" and path.resolve() == model
    assert model_ref("hf:Org/Small-GGUF", load_registry()).path == path


def test_hf_repo_with_several_files_asks_for_one(where: Path) -> None:
    hf_cache(
        where / "hf" / "hub",
        {
            "Org/Small-GGUF/a-q4_0.gguf": gguf(where / "a.gguf"),
            "Org/Small-GGUF/a-q8_0.gguf": gguf(where / "b.gguf"),
        },
    )
    with pytest.raises(FetchError, match=r"several GGUF files .*hf:Org/Small-GGUF/a-q4_0.gguf"):
        model_ref("hf:Org/Small-GGUF", load_registry())


def test_hf_repo_not_in_the_cache_is_one_line(where: Path) -> None:
    with pytest.raises(FetchError, match=r"hf:Org/None-GGUF has no GGUF file in the Hugging"):
        model_ref("hf:Org/None-GGUF", load_registry())
    ref = model_ref("hf:Org/None-GGUF/x-00001-of-00002.gguf", load_registry())
    assert ref.spec is not None and len(ref.spec.files) == 2  # a split file: both parts
    with pytest.raises(FetchError, match="not on disk and --offline was given"):
        ref.locate(quantize=_no_quantize, offline=True)


# --- LM Studio ------------------------------------------------------------------------------


def test_lmstudio_models_by_publisher_and_model(where: Path) -> None:
    models = where / "home" / ".lmstudio" / "models"
    lmstudio_folder(
        models,
        {
            "pub/small-GGUF/small-Q4_K_M.gguf": gguf(where / "a.gguf"),
            "pub/big-GGUF/big-Q4_K_M.gguf": gguf(where / "b.gguf"),
            "pub/big-GGUF/mmproj-big-f16.gguf": gguf(where / "c.gguf"),
        },
    )
    registry = load_registry()
    assert (
        model_ref("lmstudio:pub/small-GGUF", registry).path
        == models / "pub/small-GGUF/small-Q4_K_M.gguf"
    )
    assert model_ref("lmstudio:big-GGUF", registry).path == models / "pub/big-GGUF/big-Q4_K_M.gguf"
    assert model_ref("lmstudio:pub/big-GGUF/big-Q4_K_M.gguf", registry).path is not None
    with pytest.raises(FetchError, match="LM Studio has no model lmstudio:pub/gone"):
        model_ref("lmstudio:pub/gone", registry)


def test_lmstudio_folder_from_its_pointer_and_settings(where: Path) -> None:
    elsewhere = where / "lms-home"
    (where / "home" / ".lmstudio-home-pointer").write_text(f"{elsewhere}\n")
    assert stores.lmstudio_models() == elsewhere / "models"
    elsewhere.mkdir()
    (elsewhere / "settings.json").write_text(json.dumps({"downloadsFolder": str(where / "dl")}))
    assert stores.lmstudio_models() == where / "dl"


def test_a_missing_lmstudio_folder_is_one_line(where: Path) -> None:
    with pytest.raises(FetchError, match=r"no LM Studio models folder at .*My Models"):
        model_ref("lmstudio:pub/model", load_registry())


# --- paths, registry names, split files -----------------------------------------------------


def test_a_split_model_given_by_a_later_part_names_the_first(where: Path) -> None:
    second = gguf(where / "big-00002-of-00003.gguf")
    with pytest.raises(FetchError) as exc:
        model_ref(str(second), load_registry()).locate(quantize=_no_quantize)
    assert "part 2 of a split model: give its first part" in str(exc.value)
    assert str(where / "big-00001-of-00003.gguf") in str(exc.value)
    first = gguf(where / "big-00001-of-00003.gguf")
    assert model_ref(str(first), load_registry()).locate(quantize=_no_quantize) == first


def test_a_store_name_is_what_serve_calls_the_model() -> None:
    assert stores.store_name("ollama:qwen2.5-coder:1.5b") == "ollama:qwen2.5-coder:1.5b"
    assert stores.store_name("/models/x.gguf") is None and stores.store_name(None) is None


def test_paths_and_registry_names_resolve_as_before(where: Path) -> None:
    model = gguf(where / "m.gguf")
    registry = load_registry()
    assert model_ref(str(model), registry) == ModelRef("m.gguf", path=model)
    assert model_ref("qwen3-8b-q4_k_m", registry).spec is registry.models["qwen3-8b-q4_k_m"]


def test_every_model_found_is_named_as_targets_take_it(where: Path) -> None:
    a, b, c = (gguf(where / "files" / f"{n}.gguf") for n in "abc")
    ollama_store(where / "ollama", {"one:1b": a})
    hf_cache(where / "hf" / "hub", {"Org/Two-GGUF/two.gguf": b})
    lmstudio_folder(where / "home" / ".lmstudio" / "models", {"pub/three/three.gguf": c})
    found = stores.found_models()
    assert [(f.store, f.spec) for f in found] == [
        ("ollama", "ollama:one:1b"),
        ("hf-cache", "hf:Org/Two-GGUF/two.gguf"),
        ("lmstudio", "lmstudio:pub/three/three.gguf"),
    ]
    registry = load_registry()
    for f in found:
        assert (
            model_ref(f.spec, registry).locate(quantize=_no_quantize).resolve() == f.path.resolve()
        )


def test_models_lists_what_the_stores_hold_and_writes_nothing_there(where: Path) -> None:
    target = gguf(where / "files" / "t.gguf", arch="qwen2")
    ollama_store(where / "ollama", {"one:1b": target})
    hf_cache(where / "hf" / "hub", {"Org/Two-GGUF/two.gguf": gguf(where / "files" / "d.gguf")})
    before = {p: snapshot(where / p) for p in ("ollama", "hf", "home", "files")}
    res = edgespec_here("models", "--json", env=env_of(where))
    assert res.returncode == 0, res.stderr
    found = {f["spec"]: f for f in json.loads(res.stdout)["found"]}
    one = found["ollama:one:1b"]
    assert one["store"] == "ollama" and one["architecture"] == "qwen2"
    assert one["bytes"] == target.stat().st_size and one["quantization"] == "?"
    assert found["hf:Org/Two-GGUF/two.gguf"]["architecture"] == "llama"
    assert {p: snapshot(where / p) for p in ("ollama", "hf", "home", "files")} == before
    table = edgespec_here("models", env=env_of(where))
    assert "ollama:one:1b\tollama\tqwen2\t" in table.stdout


def _no_quantize(*args: object) -> None:
    raise AssertionError("nothing is made from a file found in a store")
