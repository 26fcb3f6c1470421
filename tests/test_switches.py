"""`auto`'s features switched off one by one (`auto:hints=0`, `trees=0`, `resume=0`,
`edits=0`, `model=0`, `ramp=0`, `proof=0`, `budget=0`): one spelling for the CLI, bench, serve
and the Python API, each switch changing what is drafted, and bad spellings refused with one
message."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from edgespec.api import AutoSwitches, DrafterSpec, RoundEvent, Speculator, TokenEvent
from edgespec.auto.policy import AdaptiveDraftLength
from edgespec.auto.prior import CostModel
from edgespec.auto.suffix import SuffixDrafter
from edgespec.bench import BenchPrompt, parse_configs, run_bench
from edgespec.engine.drafters import EitherDrafter, Lookup
from edgespec.errors import ConfigError
from edgespec.options import Drafting, parse_drafter
from edgespec.server.app import create_app
from tests.conftest import edgespec_here
from tests.copy_texts import FILE, A, B, C, drafts_along
from tests.fakes import FakeTextModel
from tests.machines import CPU_TAU
from tests.proposals import lookup

# Verifying costs almost nothing more per token: trees and long drafts pay.
FLAT = CostModel({n: 1.0 + 0.01 * n for n in range(1, 33)}, 0.0)


def test_switches_parse_into_one_typed_drafter() -> None:
    assert parse_drafter("auto") == DrafterSpec(name="auto")
    both = parse_drafter("auto:hints=0:trees=0")
    assert both.switches == AutoSwitches(hints=False, trees=False)
    assert both.label == "auto:hints=0:trees=0"
    assert parse_drafter("auto:model=0:resume=0").label == "auto:resume=0:model=0"
    assert parse_drafter("auto:hints=1").label == "auto"  # 1 is the default: on
    assert (
        parse_drafter(DrafterSpec(name="auto", switches=AutoSwitches(model=False))).label
        == "auto:model=0"
    )
    # The plan's decisions see the drafter's name, K its default.
    drafting = Drafting.of("auto:model=0")
    assert drafting.auto and drafting.wants_model and drafting.k == 32


@pytest.mark.parametrize(
    ("drafter", "message"),
    [
        ("auto:tree=0", "unknown switch 'tree'; auto takes hints=0|1, trees=0|1, resume=0|1"),
        ("auto:hints=2", "hints must be 0 or 1, not '2'"),
        ("auto:hints", "hints must be 0 or 1, not ''"),
        ("model:hints=0", "hints is a switch of auto only, not of model"),
        ("auto:hints=0:hints=1", "hints is given twice"),
        ("turbo:hints=0", "unknown drafter 'turbo'"),
        ("ngram:k=4", "unknown switch 'k'; ngram takes none"),
    ],
)
def test_bad_switches_name_the_switch_and_the_allowed_values(drafter: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("|", r"\|")) as raised:
        parse_drafter(drafter)
    assert str(raised.value).startswith(f"drafter {drafter!r}")
    with pytest.raises(ConfigError, match="only auto has"):
        parse_drafter(DrafterSpec(name="ngram", switches=AutoSwitches(trees=False)))


def test_bench_configs_take_the_same_switches() -> None:
    configs = parse_configs("auto,auto:hints=0,auto:k=8:w=2:resume=0,auto:trees=0:model=0")
    assert [c.label for c in configs] == [
        "none",
        "auto",
        "auto:hints=0",
        "auto:k=8:w=2:resume=0",
        "auto:trees=0:model=0",
    ]
    assert configs[2].spec == DrafterSpec(name="auto", switches=AutoSwitches(hints=False))
    for bad, message in [
        ("auto:hints=x", "config 'auto:hints=x': hints must be 0 or 1"),
        ("model:k=4:resume=0", "resume is a switch of auto only"),
        ("auto:w=2:w=3", "w is given twice"),
        ("auto:foo=1", r"auto takes k=N, w=N, p=N, hints=0\|1"),
    ]:
        with pytest.raises(ConfigError, match=message):
            parse_configs(bad)


def _rounds(
    spec: Speculator, prompt: str, drafter: str | DrafterSpec, n: int = 60
) -> tuple[Counter[tuple[str, bool]], list[int]]:
    """The rounds by (drafter, tree or not), and the tokens generated."""
    rounds: Counter[tuple[str, bool]] = Counter()
    tokens = []
    spec.reset()
    for event in spec.stream(prompt, drafter=drafter, max_tokens=n):
        if isinstance(event, RoundEvent):
            rounds[event.drafter, event.tree is not None] += 1
        elif isinstance(event, TokenEvent):
            tokens.append(event.token)
    return rounds, tokens


def _pair_speculator() -> Speculator:
    """A target that verifies trees, a draft that often agrees with it, costs that make both
    the draft model and trees pay."""
    target = FakeTextModel(seed=1, n_ctx=512, tree_width=4)
    draft = FakeTextModel(seed=1, n_ctx=512, noise=1.0, noise_seed=5)
    spec = Speculator(target, draft)
    spec.enable_auto(FLAT, use_model=True)
    return spec


def test_model_0_never_offers_the_draft_model() -> None:
    spec = _pair_speculator()
    assert spec.draft is not None
    rounds, plain = _rounds(spec, "hello there", "auto")
    assert sum(n for (drafter, _), n in rounds.items() if drafter == "model") > 0
    before = spec.draft.decode_calls
    rounds, tokens = _rounds(spec, "hello there", "auto:model=0")
    assert not any(drafter == "model" for drafter, _ in rounds)
    assert spec.draft.decode_calls == before and tokens == plain
    # Asked for again, the draft model is back.
    assert any(drafter == "model" for drafter, _ in _rounds(spec, "hello there", "auto")[0])


def test_trees_0_drafts_chains_only() -> None:
    spec = _pair_speculator()
    rounds, plain = _rounds(spec, "hello there", "auto")
    assert sum(n for (_, tree), n in rounds.items() if tree) > 0
    rounds, tokens = _rounds(spec, "hello there", "auto:trees=0")
    assert not any(tree for _, tree in rounds) and tokens == plain
    assert _policy_of(spec, "auto:trees=0").tree_width == 1
    rounds, _ = _rounds(spec, "hello there", DrafterSpec(name="auto"))
    assert (
        any(tree for _, tree in rounds)
        and _policy_of(spec, DrafterSpec(name="auto")).tree_width == 4
    )


def _policy_of(spec: Speculator, drafter: str | DrafterSpec) -> AdaptiveDraftLength:
    """The policy a generation of `drafter` starts with."""
    _, policy = spec.strategy(drafter)
    assert isinstance(policy, AdaptiveDraftLength)
    return policy


def _suffix_of(spec: Speculator, drafter: str, instruction: str = "") -> SuffixDrafter:
    """The suffix drafter a generation of `drafter` starts with."""
    either, _ = spec.strategy(drafter, instruction=instruction)
    assert isinstance(either, EitherDrafter) and isinstance(either.lookup, SuffixDrafter)
    return either.lookup


def test_bench_runs_each_switch_as_its_own_configuration() -> None:
    configs = parse_configs("auto,auto:trees=0,auto:w=1,auto:model=0")
    prompts = [BenchPrompt("fake", 0, "hello there")]
    result = run_bench(_pair_speculator(), prompts, configs, repeats=1, max_tokens=40)
    assert result.complete and not result.failures
    runs = result.prompts[0].runs
    assert runs["auto"][0].tree_share > 0
    assert runs["auto:trees=0"][0].tree_share == runs["auto:w=1"][0].tree_share == 0


def _learned_edits(spec: Speculator, drafter: str) -> set[tuple[int, ...]]:
    """What the suffix drafter expects to replace after a prompt that asks for a rename."""
    suffix = _suffix_of(spec, drafter, "Rename `ab` to `cd`.")
    suffix.begin([1])
    return {old for known in suffix.edits.by_first.values() for old in known}


def test_hints_0_takes_no_replacement_from_the_instruction() -> None:
    spec = Speculator(FakeTextModel(seed=1, n_ctx=256), None)
    spec.enable_auto(FLAT, use_model=False)
    ab = tuple(spec.target.tokenize("ab"))
    assert ab in _learned_edits(spec, "auto")
    assert _learned_edits(spec, "auto:hints=0") == set()
    assert ab in _learned_edits(spec, "auto:model=0")  # another switch leaves hints on


# The answer copies A, puts 77 78 in place of 90 91 and goes on with three tokens of B: fewer
# than a copy needs, enough to take its source up again.
EDITED = [0, *A, 77, 78, *B[:3]]


def _resumed(drafter: SuffixDrafter, prompt: list[int], out: list[int], k: int) -> bool:
    """Whether the draft after `prompt` and `out` is a copy taken up again after an edit
    (proposals offered at every step before, as the engine does)."""
    drafter.begin(prompt)
    for i in range(len(out)):
        drafter.commit([*prompt, *out[:i]])
        drafter.offer([*prompt, *out[:i]], k)
    drafter.commit([*prompt, *out])
    (proposal,) = drafter.offer([*prompt, *out], k)
    return isinstance(proposal, Lookup) and proposal.resumed


def test_resume_0_drafts_no_resumed_copy() -> None:
    assert _resumed(SuffixDrafter(), FILE, EDITED, 4)
    assert not _resumed(SuffixDrafter(switches=AutoSwitches(resume=False)), FILE, EDITED, 4)
    # Through the API: the switch reaches the suffix drafter for that generation only.
    spec = Speculator(FakeTextModel(seed=1, n_ctx=256), None)
    spec.enable_auto(FLAT, use_model=False)
    assert not _resumed(_suffix_of(spec, "auto:resume=0"), FILE, EDITED, 4)
    assert _resumed(_suffix_of(spec, "auto"), FILE, EDITED, 4)


def test_edits_0_makes_no_replacement_learned_from_the_answer() -> None:
    # The answer renamed 90 91 to 95 and has copied B again: the copy renames the next one too.
    renamed = [0, *A, 95, *B]
    assert drafts_along(SuffixDrafter(), FILE, renamed, 4) == [95, *C[:3]]
    assert drafts_along(SuffixDrafter(switches=AutoSwitches(edits=False)), FILE, renamed, 4) == [
        90,
        91,
        *C[:2],
    ]
    # What the instruction names is still made (that is hints=0).
    told = SuffixDrafter(switches=AutoSwitches(edits=False), hints=[([90, 91], [95])])
    assert drafts_along(told, FILE, [0, *A], 4) == [95, *B[:3]]
    spec = Speculator(FakeTextModel(seed=1, n_ctx=256), None)
    spec.enable_auto(FLAT, use_model=False)
    assert drafts_along(_suffix_of(spec, "auto:edits=0"), FILE, renamed, 4) == [90, 91, *C[:2]]
    assert drafts_along(_suffix_of(spec, "auto"), FILE, renamed, 4) == [95, *C[:3]]


def _lookup_policy(drafter: str) -> AdaptiveDraftLength:
    """`auto`'s policy as `drafter` sets it, lookups only, where verifying is steep (CPU_TAU),
    fresh from any text."""
    spec = Speculator(FakeTextModel(seed=1, n_ctx=256), None)
    spec.enable_auto(CostModel(CPU_TAU, 0.0), use_model=False)
    return _policy_of(spec, drafter)


COPY = lookup(32, 8)


def test_ramp_0_drafts_a_first_copy_at_once_where_verifying_is_steep() -> None:
    def first_k(drafter: str) -> int:
        choice = _lookup_policy(drafter).choose([COPY])
        return 0 if choice is None else choice.k

    assert first_k("auto") < first_k("auto:ramp=0")
    assert first_k("auto:ramp=0:trees=0") == first_k("auto:ramp=0")


def test_proof_0_takes_a_one_token_copy_for_copying() -> None:
    def k_after_one_token_copy(drafter: str) -> int:
        policy = _lookup_policy(drafter)
        first = policy.choose([COPY])
        assert first is not None and first.k == 1
        policy.observe(first, RoundEvent(drafter="suffix", k=1, drafted=1, accepted=1), 0.0)
        choice = policy.choose([COPY])
        return 0 if choice is None else choice.k

    assert k_after_one_token_copy("auto") < k_after_one_token_copy("auto:proof=0")


def test_budget_0_lets_a_lookup_risk_any_length() -> None:
    def k_after_a_miss(drafter: str) -> int:
        """K of a copy after a long one missed at its first token."""
        policy = _lookup_policy(drafter)
        first = policy.choose([COPY])
        assert first is not None
        policy.observe(
            first, RoundEvent(drafter="suffix", k=first.k, drafted=first.k, accepted=0), 0.0
        )
        choice = policy.choose([COPY])
        return 0 if choice is None else choice.k

    assert k_after_a_miss("auto:ramp=0") < k_after_a_miss("auto:ramp=0:budget=0")


def _serve() -> TestClient:
    spec = Speculator(FakeTextModel(seed=4, n_ctx=256), None)
    spec.enable_auto(FLAT, use_model=False)
    return TestClient(create_app(spec, model_names=["fake"]), base_url="http://127.0.0.1:8080")


def test_serve_takes_switches_per_request_and_refuses_bad_ones() -> None:
    chat = {
        "messages": [{"role": "user", "content": "abcabcabc"}],
        "max_tokens": 12,
        "temperature": 0,
    }
    with _serve() as client:
        ok = client.post("/v1/chat/completions", json={**chat, "edgespec": {"drafter": "auto"}})
        off = client.post(
            "/v1/chat/completions", json={**chat, "edgespec": {"drafter": "auto:trees=0:hints=0"}}
        )
        assert ok.status_code == off.status_code == 200
        text = [r.json()["choices"][0]["message"]["content"] for r in (ok, off)]
        assert text[0] == text[1]
        bad = client.post(
            "/v1/chat/completions", json={**chat, "edgespec": {"drafter": "auto:hints=2"}}
        )
    assert bad.status_code == 400
    error = bad.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == "drafter"
    assert error["message"] == "drafter 'auto:hints=2': hints must be 0 or 1, not '2'"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("run", "hi", "--drafter", "auto:tree=0"), "drafter 'auto:tree=0': unknown switch 'tree'"),
        (("run", "hi", "-d", "model:model=0"), "model is a switch of auto only, not of model"),
        (("bench", "--configs", "auto,auto:hints=2"), "config 'auto:hints=2': hints must be 0"),
    ],
)
def test_the_command_line_refuses_bad_switches_before_loading(
    isolated: dict[str, str], args: tuple[str, ...], message: str
) -> None:
    res = edgespec_here(*args, env=isolated)
    assert res.returncode == 1 and message in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and "Traceback" not in res.stderr
    assert not Path(isolated["EDGESPEC_HOME"]).exists()
