"""The plan's decision: which drafters, which K, and whether the draft model is loaded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from edgespec.errors import ConfigError
from edgespec.options import K_MAX
from edgespec.planner.calibrate import Calibration
from edgespec.planner.plan import DecodeOptions, Fit, choose_drafters, choose_resources, decide
from tests.machines import CPU_TAU, GPU_TAU, hardware


def test_model_drafter_chosen_by_calibration() -> None:
    cpu = Calibration(0.025, CPU_TAU, 0.0145)
    gpu = Calibration(0.010, GPU_TAU, 0.001)
    assert not choose_drafters(cpu, "both").use_model
    assert choose_drafters(cpu, "both").model_k == 0  # no draft length beats plain decoding
    assert choose_drafters(gpu, "both").use_model
    assert not choose_drafters(gpu, "target").use_model


def test_plan_says_whether_tree_drafts_pay() -> None:
    """Trees where verifying more tokens costs little (a GPU, the Intel machine's kernel
    shapes), chains where every extra token costs nearly a step (the CPU measured here)."""
    steep = Calibration(0.025, {n: float(n) for n in GPU_TAU}, 0.0145)
    assert "tree drafts (other continuations verified in the same pass) do not pay here" in (
        choose_drafters(steep, "both").reason
    )
    gpu = choose_drafters(Calibration(0.010, GPU_TAU, 0.003), "both").reason
    assert "tree drafts pay here" in gpu
    assert "its second choices are verified beside the chain where it is unsure (3 leaves" in gpu
    # A draft model that pays on a device where every token verified costs 0.6 steps more:
    # its leaves do not.
    steep_ish = Calibration(0.025, {n: 0.4 + 0.6 * n for n in GPU_TAU}, 0.002)
    reason = choose_drafters(steep_ish, "both")
    assert reason.use_model and "its second choices (tree leaves" in reason.reason


@pytest.mark.real
def test_plan_json_is_complete_and_calibration_is_reused(real_pair, isolated) -> None:  # type: ignore[no-untyped-def]
    from tests.conftest import edgespec

    args = ("plan", "--target", str(real_pair.target), "--draft", str(real_pair.draft), "--json")
    first = edgespec(*args, env=isolated)
    assert first.returncode == 0, first.stderr
    doc = json.loads(first.stdout)
    assert set(doc) >= {"hardware", "memory", "settings", "calibration", "decision", "models"}
    assert doc["hardware"]["physical_cores"] >= 1 and doc["hardware"]["available_ram"] > 0
    mem = doc["memory"]
    assert mem["fit"] in ("both", "target")
    for part in ("weights", "kv_cache", "compute", "total"):
        assert mem["target"][part] > 0 and mem["draft"][part] > 0
    assert mem["target"]["weights"] == 1111370240  # tensor bytes of the 1.5B Q4_K_M file
    cal = doc["calibration"]
    assert not cal["cached"] and cal["seconds"] > 0
    assert cal["tau"]["1"] == 1.0 and cal["tau"]["2"] > 1.0 and cal["c"] > 0
    assert doc["decision"]["reason"] and "ngram" in doc["decision"]["drafters"]
    # Why the draft model is or is not loaded, and the drafter and K every command would use.
    assert doc["draft_model"]["reason"] and doc["draft_model"]["loaded"] == (
        "model" in doc["decision"]["drafters"]
    )
    assert doc["drafter"]["name"] == "auto" and doc["drafter"]["k"] == 32
    assert "auto" in doc["drafter"]["allowed"]
    second = json.loads(edgespec(*args, env=isolated).stdout)
    assert second["calibration"]["cached"] and second["calibration"]["tau"] == cal["tau"]
    text = edgespec(
        "plan", "--target", str(real_pair.target), "--draft", str(real_pair.draft), env=isolated
    )
    # In a pipe the memory table is its header and rows, tab-separated (no drawn title).
    assert text.returncode == 0 and "decision" in text.stdout and "weights\t" in text.stdout
    # A corrupt cache is ignored and rebuilt.
    for f in (Path(isolated["EDGESPEC_HOME"]) / "calibration").glob("*.json"):
        f.write_text("garbage")
    third = json.loads(edgespec(*args, env=isolated).stdout)
    assert not third["calibration"]["cached"]


def test_decide_says_what_to_load_and_why(infos) -> None:  # type: ignore[no-untyped-def]
    t, d = infos
    files = (Path("t.gguf"), Path("d.gguf"))
    roomy = choose_resources(hardware(8_000_000_000), t, d)
    cpu, gpu = Calibration(0.025, CPU_TAU, 0.0145), Calibration(0.010, GPU_TAU, 0.001)

    plan = decide(DecodeOptions(), *files, roomy, cpu)
    assert plan.draft is None and plan.draft_reason
    assert plan.choice is not None and plan.choice.model_k == 0  # it cannot beat plain decoding
    assert plan.drafters == ("auto", "ngram", "none") and plan.k == K_MAX
    plan = decide(DecodeOptions(), *files, roomy, gpu)
    assert plan.draft == files[1] and plan.drafters[:3] == ("auto", "model", "hybrid")
    doc = json.loads(json.dumps(plan.to_json()))
    assert doc["draft_model"] == {"loaded": True, "reason": plan.draft_reason}
    assert doc["drafter"] == {"name": "auto", "k": K_MAX, "allowed": list(plan.drafters)}

    plan = decide(DecodeOptions(drafter="ngram"), files[0], None, roomy)
    assert plan.draft is None and plan.k == 8 and plan.drafters == ("ngram", "none")
    assert decide(DecodeOptions(drafter="model", k=3), *files, roomy).k == 3
    kept = decide(DecodeOptions(drafter="none", keep_draft=True), *files, roomy)
    assert kept.draft == files[1] and kept.draft_reason == "kept loaded on request"

    tight = choose_resources(hardware(int((roomy.memory.target_only + 1000) / 0.9)), t, d)
    plan = decide(DecodeOptions(), *files, tight, gpu)
    assert plan.draft is None and tight.fit == Fit.TARGET and plan.draft_reason
    with pytest.raises(ConfigError, match="does not fit next to the target"):
        decide(DecodeOptions(drafter="model"), *files, tight)
    with pytest.raises(ConfigError, match="unknown drafter 'fast'"):
        decide(DecodeOptions(drafter="fast"), *files, roomy)
    with pytest.raises(ConfigError, match="--draft-tokens must be >= 0"):
        decide(DecodeOptions(drafter="ngram", k=-2), *files, roomy)
