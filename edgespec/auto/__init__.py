"""`auto`: the per-round control of speculation. The engine asks its drafters to `offer`
proposals and its policy to `choose` one, then hands the policy the round's outcome; `start.py`
starts one generation's drafter and policy with what earlier ones learned (`Learned`)."""
