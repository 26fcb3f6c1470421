"""`auto`: the per-round control of speculation, as one component.

- `config.py`: every tuning constant, with where it comes from (`AutoConfig`);
- `suffix.py`: the suffix drafter (lookups, copies, edits, resumed copies) and `hints.py`, the
  replacements a request names;
- `policy.py`: which proposal, K and tree shape each round (`AdaptiveDraftLength`);
- `prior.py`: the calibration's cost model (`CostModel`), the prior of `costs.py`: what each
  part of a round costs, learned from the rounds that run;
- `confidence.py`: how far the draft model's own probabilities are trusted.

- `start.py`: one generation's drafter and policy, started afresh from its settings, with what
  earlier generations taught (`Learned`) passed in.

The engine knows none of it: it asks drafters to `offer` proposals, the policy to `choose`, and
hands the policy back its choice with the round's event and measured time.
"""
