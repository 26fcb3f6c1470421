"""A draft found for a target given alone: among the files on this machine, those that pass
the pair rule, the smallest that fits memory, in the preferred quantization; else the
registry's draft for the family, pulled only with consent; else lookups only, said once."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import gguf
import pytest

from edgespec.errors import ConfigError, ModelLoadError
from edgespec.llamacpp.architectures import check_loadable, loadable
from edgespec.models import files
from edgespec.models import summary as summary_module
from edgespec.models.find_draft import find_draft, quant_rank, registry_drafts
from edgespec.models.registry import load_registry
from edgespec.models.resolve import ModelRef
from edgespec.models.summary import Index
from edgespec.options import Drafting
from edgespec.planner.decode_options import DecodeOptions
from edgespec.planner.make import make_plan
from tests.conftest import edgespec_here
from tests.fake_stores import env_of, hf_cache, isolate, lmstudio_folder, ollama_store

VOCAB = [f"t{i}" for i in range(400)]
OTHER_VOCAB = [f"o{i}" for i in range(400)]
Q4_K_M, Q3_K_M, Q8_0, Q2_K = 15, 12, 7, 10  # llama.cpp's general.file_type values


def model(
    path: Path,
    *,
    n_embd: int,
    n_layer: int,
    file_type: int,
    weights: int,
    vocab: list[str] = VOCAB,
    arch: str = "qwen2",
    basename: str = "Fam",
) -> Path:
    """A model's header with `weights` bytes after it (a hole: nothing is written)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(vocab)
    writer.add_block_count(n_layer)
    writer.add_embedding_length(n_embd)
    writer.add_feed_forward_length(4 * n_embd)
    writer.add_head_count(max(n_embd // 64, 1))
    writer.add_head_count_kv(2)
    writer.add_context_length(32768)
    writer.add_file_type(file_type)
    writer.add_basename(basename)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with path.open("r+b") as f:
        f.truncate(-(-path.stat().st_size // 32) * 32 + weights)
    return path


def target(where: Path, **kw: object) -> Path:
    args = {"n_embd": 1536, "n_layer": 28, "file_type": Q4_K_M, "weights": 1_100_000_000}
    return model(where / "files" / "target.gguf", **{**args, **kw})  # type: ignore[arg-type]


def small(where: Path, name: str, file_type: int, weights: int, **kw: object) -> Path:
    args = {"n_embd": 896, "n_layer": 24, "file_type": file_type, "weights": weights}
    return model(where / "files" / name, **{**args, **kw})  # type: ignore[arg-type]


@pytest.fixture
def where(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return isolate(tmp_path, monkeypatch)


def everything_fits(info: object) -> bool:
    return True


def knows_all(arch: str) -> bool:
    return True


def test_the_smallest_compatible_model_in_the_preferred_quantization(where: Path) -> None:
    t = target(where)
    hf_cache(
        where / "hf" / "hub",
        {
            "Org/Small-GGUF/small-q4_k_m.gguf": small(where, "q4km.gguf", Q4_K_M, 490_000_000),
            "Org/Small-GGUF/small-q3_k_m.gguf": small(where, "q3km.gguf", Q3_K_M, 400_000_000),
            "Org/Small-GGUF/small-q8_0.gguf": small(where, "q8.gguf", Q8_0, 530_000_000),
        },
    )
    lmstudio_folder(
        where / "home" / ".lmstudio" / "models",
        {
            # Fewer bytes, more weights (a 1B in two bits): the 0.5B still comes first.
            "pub/mid/mid-q2_k.gguf": small(
                where, "mid.gguf", Q2_K, 380_000_000, n_embd=2048, n_layer=16
            ),
            # Another vocabulary: not a draft for this target, however small.
            "pub/tiny/tiny.gguf": small(where, "tiny.gguf", Q4_K_M, 1000, vocab=OTHER_VOCAB),
        },
    )
    ollama_store(
        where / "ollama", {"fam:1.5b": t, "fam:big": target(where / "big", weights=2 << 30)}
    )
    choice = find_draft(t, everything_fits, knows_all, name="ollama:fam:1.5b")
    assert choice.chosen is not None
    assert choice.chosen.found.spec == "hf:Org/Small-GGUF/small-q4_k_m.gguf"
    assert choice.looked_at == 5 and choice.compatible == 4
    assert "found for ollama:fam:1.5b" in choice.reason
    assert "Q4_K_M preferred to Q3_K_M, Q8_0" in choice.reason
    assert "the smallest of the 4 of 5 smaller GGUF files" in choice.reason


def test_a_draft_that_does_not_fit_memory_is_passed_over(where: Path) -> None:
    t = target(where)
    first = small(where, "a.gguf", Q4_K_M, 400_000_000)
    second = small(where, "b.gguf", Q4_K_M, 600_000_000, n_embd=1024)
    lmstudio_folder(
        where / "home" / ".lmstudio" / "models", {"p/a/a.gguf": first, "p/b/b.gguf": second}
    )
    choice = find_draft(t, lambda info: info.path.name != "a.gguf", knows_all)
    assert choice.chosen is not None and choice.chosen.found.path.name == "b.gguf"
    assert "(1 smaller did not fit)" in choice.reason
    none = find_draft(t, lambda info: False, knows_all)
    assert none.chosen is None and "2 share its vocabulary but none fits memory" in none.reason


def test_files_beside_the_target_count_and_unknown_architectures_do_not(where: Path) -> None:
    t = target(where)
    small(where, "beside.gguf", Q4_K_M, 400_000_000)
    choice = find_draft(t, everything_fits, knows_all)
    assert choice.chosen is not None and choice.chosen.found.store == "beside the target"
    none = find_draft(t, everything_fits, lambda arch: arch != "qwen2")
    assert none.chosen is None and "none shares its vocabulary" in none.reason


def test_headers_are_read_once_per_file_version(
    where: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    t = target(where)
    d = small(where, "d.gguf", Q4_K_M, 400_000_000)
    assert find_draft(t, everything_fits, knows_all).chosen is not None

    def no_reading(path: object) -> None:
        raise AssertionError(f"{path} read again")

    monkeypatch.setattr(summary_module, "read_gguf", no_reading)
    again = find_draft(t, everything_fits, knows_all)
    assert again.chosen is not None and again.chosen.found.path == d
    d.touch()  # a changed file is read again, and only it
    with pytest.raises(AssertionError, match=r"d\.gguf read again"):
        Index().summary(d)


def test_vocabularies_of_different_sizes_are_compared_token_by_token(where: Path) -> None:
    t = target(where, vocab=[*VOCAB, *(f"x{i}" for i in range(100))])
    small(where, "d.gguf", Q4_K_M, 400_000_000)
    small(where, "e.gguf", Q4_K_M, 300_000_000, vocab=[*VOCAB[:300], *OTHER_VOCAB[:100]])
    choice = find_draft(t, everything_fits, knows_all)
    assert choice.chosen is not None and choice.chosen.found.path.name == "d.gguf"
    assert choice.compatible == 1


def test_the_registry_drafts_of_a_family() -> None:
    registry = load_registry()

    def drafts_for(basename: str) -> list[str]:
        fake = summary_module.Summary(
            Path("t.gguf"), "k", 3, {"general.basename": basename}, 1, "", 0, 0, 10**12
        )
        return [m.name for m in registry_drafts(fake, registry)]

    assert drafts_for("Qwen2.5-Coder")[0] == "qwen2.5-coder-0.5b-instruct-q4_k_m"
    assert "llama-3.2-1b-instruct-q4_k_m" in drafts_for("Meta-Llama-3.1")
    assert drafts_for("gemma-3")[0] == "gemma-3-270m-it-q8_0"
    assert drafts_for("NoSuchFamily") == []


def test_quantizations_are_ranked_four_bits_first() -> None:
    assert quant_rank("Q4_0") < quant_rank("Q4_K_M") < quant_rank("Q8_0") < quant_rank("F16")
    assert quant_rank("F16") < quant_rank("Q2_K") == quant_rank("IQ1_S")


# --- in the plan -----------------------------------------------------------------------------


KEEP = Drafting.of("none", keep_draft=True)  # a draft is found and loaded whatever it costs


def plan_for(spec: str, **kw: object) -> object:
    options = DecodeOptions(target=spec, n_ctx=512, **kw)  # type: ignore[arg-type]
    return make_plan(options, KEEP)


def test_the_plan_loads_the_draft_found_and_says_why(where: Path) -> None:
    t = target(where)
    d = small(where, "d.gguf", Q4_K_M, 400_000_000)
    ollama_store(where / "ollama", {"fam:1.5b": t})
    hf_cache(where / "hf" / "hub", {"Org/Small-GGUF/small.gguf": d})
    plan = plan_for("ollama:fam:1.5b")
    assert plan.draft is not None and plan.draft.resolve() == d  # type: ignore[attr-defined]
    reason = plan.draft_reason  # type: ignore[attr-defined]
    assert reason.startswith("draft hf:Org/Small-GGUF/small.gguf (Fam Q4_K_M, 0.40 GB, the Hugging")
    assert "found for ollama:fam:1.5b" in reason
    opted_out = plan_for("ollama:fam:1.5b", draft="none")
    assert opted_out.draft is None and opted_out.draft_reason == "no draft model given"  # type: ignore[attr-defined]


def test_without_a_draft_the_target_runs_with_lookups_only(where: Path) -> None:
    t = target(where, basename="NoRegistryFamily")
    notes = files.Notes()
    plan = make_plan(DecodeOptions(target=str(t), n_ctx=512), KEEP, progress=notes)
    assert len(notes.lines) == 1 and notes.lines[0] == plan.draft_reason  # said once
    assert plan.draft is None  # type: ignore[attr-defined]
    assert plan.draft_reason.startswith("no draft model for")  # type: ignore[attr-defined]
    assert plan.draft_reason.endswith("auto drafts with lookups only (--draft names a draft model)")  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match="drafter 'model' needs a draft model: no draft model"):
        make_plan(DecodeOptions(target=str(t), n_ctx=512), Drafting.of("model"))


def test_the_registry_draft_is_pulled_only_with_consent(
    where: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    t = target(where, basename="Qwen2.5-Coder")
    fetched = small(where / "fetched", "d.gguf", Q4_K_M, 400_000_000)
    pulls: list[str] = []

    def locate(self: ModelRef, **kw: object) -> Path:
        if self.path is not None:  # the target: a path is checked, not fetched
            return self.path
        pulls.append(self.name)
        return fetched

    monkeypatch.setattr(ModelRef, "locate", locate)
    asked: list[str] = []
    options = DecodeOptions(target=str(t), n_ctx=512)

    def refuse(question: str) -> bool:
        asked.append(question)
        return False

    refused = make_plan(options, KEEP, confirm=refuse)
    assert refused.draft is None and pulls == [] and len(asked) == 1
    assert "Pull the registry's qwen2.5-coder-0.5b-instruct-q4_k_m (0.49 GB" in asked[0]
    assert "run with --yes to pull it" in refused.draft_reason
    offline = make_plan(replace(options, offline=True, yes=True), KEEP)
    assert offline.draft is None and "run without --offline" in offline.draft_reason
    agreed = make_plan(options, KEEP, confirm=lambda q: True)
    assert agreed.draft == fetched and pulls == ["qwen2.5-coder-0.5b-instruct-q4_k_m"]
    yes = make_plan(replace(options, yes=True), KEEP)
    assert yes.draft == fetched and "the registry's qwen2.5-coder" in yes.draft_reason


# --- architectures this llama.cpp cannot load ------------------------------------------------


def test_an_architecture_unknown_to_this_llamacpp_is_refused_before_loading(
    where: Path,
) -> None:
    assert loadable("qwen2") and loadable("llama") and not loadable("edgespec-no-such-arch")
    odd = model(
        where / "odd.gguf",
        n_embd=64,
        n_layer=2,
        file_type=1,
        weights=1000,
        arch="edgespec-no-such-arch",
    )
    with pytest.raises(ModelLoadError, match="'edgespec-no-such-arch' model, an architecture"):
        check_loadable(odd, "edgespec-no-such-arch")
    res = edgespec_here("run", "hi", "--target", str(odd), "--drafter", "none", env=env_of(where))
    assert res.returncode == 1 and len(res.stderr.strip().splitlines()) == 1
    assert "edgespec-no-such-arch" in res.stderr and "use a model of another family" in res.stderr
