"""`decide`: what to load and how to speculate, `auto`'s drafters weighed on calibrated costs."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from edgespec.auto.config import AUTO, AutoConfig, PlanConfig
from edgespec.auto.costs import LearnedCosts
from edgespec.auto.policy import AdaptiveDraftLength
from edgespec.auto.prior import CostModel
from edgespec.engine.drafters import DraftKind, Lookup
from edgespec.errors import ConfigError
from edgespec.options import K_MAX, TREE_WIDTH, DrafterKind, Drafting
from edgespec.planner.calibrate import Calibration
from edgespec.planner.choice import DrafterChoice, LeavesShowcase, ModelWhy, TreeShowcase
from edgespec.planner.plan import DecodePlan, LinkCost
from edgespec.planner.resources import Fit, Resources


def cost_model(calibration: Calibration, config: PlanConfig = AUTO.plan) -> CostModel:
    return CostModel(
        calibration.tau,
        calibration.c if calibration.c is not None else 0.0,
        config.round_overhead_s / calibration.target_step_s,
    )


def _tree_showcase(costs: CostModel, config: AutoConfig) -> TreeShowcase:
    """What `auto` would do with a long lookup whose text went several ways at its first three
    positions, accepted at `tree_showcase_alpha`: its shape, speed, and the best chain's."""
    alpha = config.plan.tree_showcase_alpha
    policy = AdaptiveDraftLength(costs, tree_width=TREE_WIDTH, config=config)
    offer = Lookup(tuple(range(K_MAX)), config.policy.long_match, "suffix", forks=(0, 1, 2))
    speed, tree = policy.preview_lookup(offer, alpha)
    chain = policy.preview_lookup(replace(offer, forks=()), alpha)[0]
    return TreeShowcase(
        width=tree.width,
        nodes=tree.nodes,
        speed=speed,
        chain_speed=chain,
        tau_max=costs.tau(K_MAX),
        alpha=alpha,
    )


def _leaves_showcase(costs: CostModel, alpha: float, config: AutoConfig) -> LeavesShowcase:
    """How many of the draft model's second choices `auto` verifies beside its chain at `alpha`
    (0: none pay), the expected speed, and the chain's alone."""

    def best(leaves_allowed: int) -> tuple[float, int]:
        policy = AdaptiveDraftLength(costs, tree_width=leaves_allowed, config=config)
        speed, shape = policy.preview_model(K_MAX, alpha)
        return speed, shape.width - 1

    speed, leaves = best(TREE_WIDTH)
    return LeavesShowcase(leaves=leaves, speed=speed, chain_speed=best(1)[0])


def choose_drafters(
    calibration: Calibration, fit: Fit, draft_given: bool = True, config: AutoConfig = AUTO
) -> DrafterChoice:
    """Whether to load the draft model: only if at `model_alpha` some K beats plain decoding
    by `model_margin` (below it, it costs memory and load time for nothing)."""
    costs = cost_model(calibration, config.plan)
    # The same costs the policy weighs every round, in target steps (a step of 1 s).
    steps = LearnedCosts(costs, 1.0, calibration.draft_tau or None, config.costs)
    plan = config.plan
    ngram_k, ngram_speed = steps.best_k(DraftKind.LOOKUP, plan.lookup_showcase_alpha, K_MAX)
    tree = _tree_showcase(costs, config)
    base = DrafterChoice(
        use_model=False,
        model_k=0,
        model_speed=0.0,
        ngram_k=ngram_k,
        ngram_speed=ngram_speed,
        why=ModelWhy.NO_DRAFT,
        measured=calibration.measured,
        tree=tree,
        model_alpha=plan.model_alpha,
        lookup_alpha=plan.lookup_showcase_alpha,
    )
    if not draft_given:
        return base
    if fit != Fit.BOTH:
        return replace(base, why=ModelWhy.TARGET_ONLY)
    if calibration.c is None:
        return replace(base, why=ModelWhy.NOT_MEASURED)
    model_k, model_speed = steps.best_k(DraftKind.MODEL, plan.model_alpha, K_MAX)
    weighed = replace(
        base, model_k=model_k, model_speed=model_speed, c=calibration.c, tau2=costs.tau(2)
    )
    if model_speed < plan.model_margin:
        return replace(weighed, why=ModelWhy.DOES_NOT_PAY)
    leaves = _leaves_showcase(costs, plan.model_alpha, config)
    return replace(weighed, use_model=True, why=ModelWhy.PAYS, leaves=leaves)


def _draft_decision(
    drafting: Drafting, draft: Path | None, resources: Resources, choice: DrafterChoice | None
) -> tuple[bool, str]:
    """Whether to load the draft model, and why."""
    label = drafting.drafter.label
    if draft is None:
        if drafting.wants_model:
            return False, "no draft model given"
        return False, f"drafter {label} does not use it"
    if resources.fit != Fit.BOTH:
        why = (
            "the draft model does not fit next to the target: both need "
            + resources.memory.draft_shortage
        )
        if drafting.needs_model:
            raise ConfigError(f"{why}; use --drafter ngram")
        return False, why
    if drafting.needs_model:
        return True, f"drafter {label} drafts with it"
    if drafting.keep_draft:
        return True, "kept loaded on request"
    if choice is not None:
        return choice.use_model, choice.model_reason
    return False, f"drafter {label} does not use it"


def decide(
    drafting: Drafting,
    target: Path,
    draft: Path | None,
    resources: Resources,
    calibration: Calibration | None = None,
    cached: bool = False,
    link: LinkCost | None = None,
    memory: Path | None = None,
) -> DecodePlan:
    """The one place where what to load and how to speculate is decided; `memory`: `--memory`'s
    folder."""
    choice = None
    if drafting.auto:
        if calibration is None:
            raise ConfigError("the auto drafter needs this device's calibration")
        choice = choose_drafters(calibration, resources.fit, draft_given=draft is not None)
    load, reason = _draft_decision(drafting, draft, resources, choice)
    allowed = [DrafterKind.NGRAM, DrafterKind.NONE]
    if load:
        allowed[:0] = [DrafterKind.MODEL, DrafterKind.HYBRID]
    if calibration is not None:
        allowed.insert(0, DrafterKind.AUTO)
    return DecodePlan(
        target=target,
        draft=draft if load else None,
        draft_reason=reason,
        resources=resources,
        drafter=drafting.drafter,
        k=drafting.k,
        drafters=tuple(allowed),
        calibration=calibration,
        calibration_cached=cached,
        choice=choice,
        link=link,
        memory=memory,
    )
