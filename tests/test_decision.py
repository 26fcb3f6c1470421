"""The plan's decision: which drafters, which K, and whether the draft model is loaded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from edgespec.auto.config import AUTO
from edgespec.errors import ConfigError
from edgespec.options import K_MAX, Drafting
from edgespec.planner.calibrate import Calibration
from edgespec.planner.choice import ModelWhy
from edgespec.planner.decide import choose_drafters, decide
from edgespec.planner.resources import Fit, choose_resources
from tests.machines import CPU_TAU, GPU_TAU, hardware

MODEL_MARGIN = AUTO.plan.model_margin


def test_model_drafter_chosen_by_calibration() -> None:
    cpu = Calibration(0.025, CPU_TAU, 0.0145)
    gpu = Calibration(0.010, GPU_TAU, 0.001)
    slow = choose_drafters(cpu, "both")
    assert not slow.use_model and slow.why is ModelWhy.DOES_NOT_PAY
    assert slow.model_k == 0  # no draft length beats plain decoding
    assert slow.model_speed < MODEL_MARGIN and slow.c == pytest.approx(0.0145 / 0.025)
    fast = choose_drafters(gpu, "both")
    assert fast.use_model and fast.why is ModelWhy.PAYS and fast.model_speed >= MODEL_MARGIN
    crowded = choose_drafters(gpu, "target")
    assert not crowded.use_model and crowded.why is ModelWhy.TARGET_ONLY
    unmeasured = choose_drafters(Calibration(0.010, GPU_TAU, None), "both")
    assert unmeasured.why is ModelWhy.NOT_MEASURED
    assert choose_drafters(gpu, "both", draft_given=False).why is ModelWhy.NO_DRAFT


def test_the_choice_renders_its_sentence_from_its_fields() -> None:
    """What `plan` prints and its JSON's reason: the draft model's part, then n-gram lookup's."""
    choice = choose_drafters(Calibration(0.025, CPU_TAU, 0.0145), "both")
    assert choice.reason == f"{choice.model_reason}; {choice.ngram_reason}"
    assert f"(best {choice.model_speed:.2f}x), so it is not loaded" in choice.model_reason
    assert f"the best K is {choice.ngram_k}" in choice.ngram_reason
    assert choose_drafters(Calibration(0.010, GPU_TAU, 0.001), "target").model_reason == (
        "only the target fits in memory"
    )
    # Where the model is used, its second choices come between the two parts; the plan's
    # draft_reason is the model's part alone.
    used = choose_drafters(Calibration(0.010, GPU_TAU, 0.003), "both")
    model, leaves, ngram = used.reason.split("; ", 2)
    assert (model, ngram) == (used.model_reason, used.ngram_reason)
    assert used.leaves is not None and f"({used.leaves.leaves} leaves" in leaves


def test_plan_says_whether_tree_drafts_pay() -> None:
    """Trees where verifying more tokens costs little (a GPU, the Intel machine's kernel
    shapes), chains where every extra token costs nearly a step (the CPU measured here)."""
    steep = choose_drafters(Calibration(0.025, {n: float(n) for n in GPU_TAU}, 0.0145), "both")
    assert steep.tree.width == 1 and steep.tree.tau_max == K_MAX
    gpu = choose_drafters(Calibration(0.010, GPU_TAU, 0.003), "both")
    assert gpu.tree.width > 1 and gpu.tree.speed > gpu.tree.chain_speed
    assert gpu.leaves is not None and gpu.leaves.leaves == 3
    assert gpu.leaves.speed > gpu.leaves.chain_speed
    # A draft model that pays on a device where every token verified costs 0.6 steps more:
    # its leaves do not.
    steep_ish = Calibration(0.025, {n: 0.4 + 0.6 * n for n in GPU_TAU}, 0.002)
    choice = choose_drafters(steep_ish, "both")
    assert choice.use_model and choice.leaves is not None and choice.leaves.leaves == 0


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
    # Measured ratios: positive, but not ordered (a loaded machine can time 2 tokens faster).
    assert cal["tau"]["1"] == 1.0 and cal["tau"]["2"] > 0 and cal["c"] > 0
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

    plan = decide(Drafting.of(), *files, roomy, cpu)
    assert plan.draft is None and plan.choice is not None
    assert plan.choice.why is ModelWhy.DOES_NOT_PAY
    assert plan.draft_reason == plan.choice.model_reason
    assert plan.drafters == ("auto", "ngram", "none") and plan.k == K_MAX
    plan = decide(Drafting.of(), *files, roomy, gpu)
    assert plan.draft == files[1] and plan.drafters[:3] == ("auto", "model", "hybrid")
    doc = json.loads(json.dumps(plan.to_json()))
    assert doc["draft_model"] == {"loaded": True, "reason": plan.draft_reason}
    assert doc["drafter"] == {"name": "auto", "k": K_MAX, "allowed": list(plan.drafters)}

    plan = decide(Drafting.of("ngram"), files[0], None, roomy)
    assert plan.draft is None and plan.k == 8 and plan.drafters == ("ngram", "none")
    assert decide(Drafting.of("model", 3), *files, roomy).k == 3
    kept = decide(Drafting.of("none", keep_draft=True), *files, roomy)
    assert kept.draft == files[1] and kept.draft_reason == "kept loaded on request"

    tight = choose_resources(hardware(int((roomy.memory.target_only + 1000) / 0.9)), t, d)
    plan = decide(Drafting.of(), *files, tight, gpu)
    assert plan.draft is None and tight.fit == Fit.TARGET and plan.draft_reason
    with pytest.raises(ConfigError, match="does not fit next to the target"):
        decide(Drafting.of("model"), *files, tight)
    # Bad options never reach a decision: they are refused where they are built.
    with pytest.raises(ConfigError, match="unknown drafter 'fast'"):
        Drafting.of("fast")
    with pytest.raises(ConfigError, match="--draft-tokens must be >= 0"):
        Drafting.of("ngram", -2)
