"""models.toml parsing and validation: every error names the entry and the field."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from edgespec.errors import RegistryError
from edgespec.models.registry import load_registry, parse_registry

GOOD_MODEL = {"repo": "org/repo-GGUF", "files": "m.gguf", "license": "MIT"}


def registry(models: dict | None = None, pairs: dict | None = None) -> dict:  # type: ignore[type-arg]
    models = {"t": dict(GOOD_MODEL), "d": dict(GOOD_MODEL)} if models is None else models
    pairs = {"p": {"target": "t", "draft": "d", "default": True}} if pairs is None else pairs
    return {"models": models, "pairs": pairs}


def test_shipped_registry_is_valid_and_has_the_default_pair() -> None:
    reg = load_registry()
    pair = reg.default_pair
    assert pair.name == "qwen2.5-coder-1.5b"
    assert pair.target.filename == "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
    assert pair.target.sha256 == "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
    assert pair.draft.size == 491400064 and pair.draft.mirror is not None
    assert len(pair.target.mirror.packages) == 22 and len(pair.draft.mirror.packages) == 6  # type: ignore[union-attr]
    for name in (
        "qwen3-8b",
        "llama3.1-8b",
        "smollm2-1.7b",
        "gemma3-4b",
        "stories15m",
        "qwen2.5-coder-7b",
    ):
        assert name in reg.pairs
    assert len(reg.models["qwen2.5-coder-7b-instruct-q4_k_m"].files) == 2
    assert not reg.models["qwen3-8b-q4_k_m"].verified


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda r: r["models"]["t"].pop("repo"), "models.t: missing field 'repo'"),
        (
            lambda r: r["models"]["t"].update(repo="no-slash"),
            "models.t: field 'repo' must look like",
        ),
        (lambda r: r["models"]["t"].update(files="m.bin"), "models.t: field 'files' must name"),
        (
            lambda r: r["models"]["t"].update(repo="owner/name\n"),
            "models.t: field 'repo' must look like",
        ),
        (lambda r: r["models"]["t"].update(repo="../x"), "models.t: field 'repo' must look like"),
        (lambda r: r["models"]["t"].update(repo="o/.."), "models.t: field 'repo' must look like"),
        (
            lambda r: r["models"]["t"].update(files="/etc/m.gguf"),
            "models.t: file '/etc/m.gguf' must be a relative path",
        ),
        (
            lambda r: r["models"]["t"].update(files=["a/../../m.gguf"]),
            "models.t: file 'a/../../m.gguf' must be a relative path",
        ),
        (
            lambda r: r["models"]["t"].update(files="m.gguf\n"),
            "models.t: field 'files' must name",
        ),
        (
            lambda r: r["models"]["t"].update(sha256="a" * 64 + "\n"),
            "models.t: field 'sha256' must be 64",
        ),
        (
            lambda r: r["models"]["t"].update(mirror={"packages": ["pkg==1\n"]}),
            "must be pinned",
        ),
        (lambda r: r["models"]["t"].update(size="big"), "models.t: field 'size' must be int"),
        (lambda r: r["models"]["t"].update(size=True), "models.t: field 'size' must be int"),
        (lambda r: r["models"]["t"].update(size=-3), "models.t: field 'size' must be positive"),
        (lambda r: r["models"]["t"].update(sha256="abc"), "models.t: field 'sha256' must be 64"),
        (lambda r: r["models"]["t"].update(colour="red"), "models.t: unknown field 'colour'"),
        (
            lambda r: r["models"]["t"].update(files=["a.gguf", "b.gguf"], size=4),
            "models.t: 'size' and 'sha256' are only allowed for single-file",
        ),
        (
            lambda r: r["models"]["t"].update(mirror={"packages": ["pkg"]}),
            "models.t.mirror: package 'pkg' must be pinned",
        ),
        (
            lambda r: r["models"]["t"].update(mirror={"packages": []}),
            "models.t.mirror: field 'packages' is empty",
        ),
        (
            lambda r: r["pairs"]["p"].update(draft="missing"),
            "pairs.p: field 'draft' names unknown model 'missing'",
        ),
        (lambda r: r["pairs"]["p"].pop("target"), "pairs.p: missing field 'target'"),
        (
            lambda r: r["pairs"]["p"].update(default=False),
            "exactly one pair must have default = true",
        ),
        (lambda r: r.update(extra={}), "unknown top-level table 'extra'"),
    ],
)
def test_validation_errors_name_the_entry_and_field(mutate, message: str) -> None:  # type: ignore[no-untyped-def]
    data = registry()
    mutate(data)
    with pytest.raises(RegistryError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_registry(data, "test.toml")


def test_unknown_pair_and_model_list_what_exists() -> None:
    reg = parse_registry(registry(), "test.toml")
    with pytest.raises(RegistryError, match="unknown pair 'x'; known pairs: p"):
        reg.pair("x")
    with pytest.raises(RegistryError, match="unknown model 'y'"):
        reg.model("y")


def test_registry_file_from_environment_and_toml_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bad = tmp_path / "models.toml"
    bad.write_text("[models\n")
    monkeypatch.setenv("EDGESPEC_REGISTRY", str(bad))
    with pytest.raises(RegistryError, match="not valid TOML"):
        load_registry()
    monkeypatch.setenv("EDGESPEC_REGISTRY", str(tmp_path / "absent.toml"))
    with pytest.raises(RegistryError, match="cannot read registry"):
        load_registry()


SOURCE = {**GOOD_MODEL, "sha256": "a" * 64}
DERIVED = {
    "files": "m-q4_0.gguf",
    "size": 100,
    "license": "MIT",
    "derive": {"from": "s", "type": "Q4_0"},
}


def derived_registry(**derived: object) -> dict:  # type: ignore[type-arg]
    # The derived model first: its source is found wherever it stands in the file. A field
    # given as None is left out.
    q = {key: value for key, value in {**DERIVED, **derived}.items() if value is not None}
    return registry(
        {"q": q, "s": dict(SOURCE), "d": dict(GOOD_MODEL)},
        {"p": {"target": "q", "draft": "d", "default": True}},
    )


def test_a_derived_model_names_its_source_and_takes_its_repository() -> None:
    reg = parse_registry(derived_registry(), "test.toml")
    spec = reg.models["q"]
    assert spec.derive is not None and spec.derive.source is reg.models["s"]
    assert (spec.derive.type, spec.derive.pure, spec.repo) == ("Q4_0", False, "org/repo-GGUF")
    assert list(reg.models) == ["q", "s", "d"]  # the file's order, for `edgespec models`
    shipped = load_registry().pairs["qwen2.5-coder-1.5b-f16"]
    assert shipped.draft.derive is not None and shipped.draft.derive.pure
    assert shipped.target.derive is not None and shipped.target.derive.type == "F16"


@pytest.mark.parametrize(
    ("derived", "message"),
    [
        ({"derive": "Q4_0"}, "models.q.derive: must be a table"),
        ({"derive": {"from": "s", "type": "Q4_0", "imatrix": "x"}}, "unknown field 'imatrix'"),
        ({"derive": {"type": "Q4_0"}}, "models.q.derive: missing field 'from'"),
        ({"derive": {"from": "nope", "type": "Q4_0"}}, "field 'from' names unknown model 'nope'"),
        ({"derive": {"from": "d", "type": "Q4_0"}}, "single-file model with a sha256, got 'd'"),
        ({"derive": {"from": "s", "type": "Q4_K_M"}}, "'type' must be one of F16, BF16"),
        ({"derive": {"from": "s", "type": "Q4_0", "pure": "yes"}}, "'pure' must be bool"),
        ({"mirror": {"packages": ["a==1"]}}, "models.q: a derived model has no 'mirror'"),
        ({"size": None}, "models.q: a derived model needs its 'size'"),
        (
            {"files": ["a-00001-of-00002.gguf", "a-00002-of-00002.gguf"]},
            "'size' and 'sha256' are only allowed for single-file models",
        ),
    ],
)
def test_derived_model_errors_name_the_entry_and_field(derived: dict, message: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(RegistryError, match=re.escape(message)):
        parse_registry(derived_registry(**derived), "test.toml")


def test_two_derived_models_do_not_share_a_file() -> None:
    data = derived_registry()
    data["models"]["r"] = {**DERIVED, "derive": {"from": "s", "type": "F16"}}
    with pytest.raises(RegistryError, match=re.escape("models.r: file 'm-q4_0.gguf' is q's")):
        parse_registry(data, "test.toml")


def test_a_model_is_not_derived_from_a_derived_one() -> None:
    data = derived_registry()
    data["models"]["r"] = {**DERIVED, "files": "r.gguf", "derive": {"from": "q", "type": "F16"}}
    with pytest.raises(
        RegistryError, match=re.escape("models.r.derive: field 'from' must name a fetched")
    ):
        parse_registry(data, "test.toml")
