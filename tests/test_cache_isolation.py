"""Issue 50, defect 4: the KV caches hold one client's tokens at a time, so that no client can
time its first token to learn how another's prompt begins (a cached prefix answers many times
faster). Fake models count the tokens each request decodes."""

from __future__ import annotations

from edgespec.api import Speculator
from tests.fakes import FakeTextModel

SECRET = "the launch code is 4711, keep it to yourself; "


def _prompt_tokens_decoded(
    spec: Speculator, prompt: str, client: object, drafter: str = "none"
) -> int:
    """How many tokens the target decoded for one greedy request (its prompt and 2 more)."""
    before = spec.target.decoded_tokens
    for _ in spec.stream(prompt, drafter=drafter, k=2, max_tokens=2, raw=True, client=client):
        pass
    return spec.target.decoded_tokens - before


def test_another_clients_request_reuses_none_of_the_cached_prefix() -> None:
    target = FakeTextModel(seed=1, n_ctx=512)
    draft = FakeTextModel(seed=1, n_ctx=512)
    spec = Speculator(target, draft)
    _prompt_tokens_decoded(spec, SECRET + "what now?", client="alice", drafter="model")
    assert draft.n_past > 0  # the draft model read Alice's prompt too
    guess = SECRET + "so?"
    full = len(spec.prompt_tokens(guess, raw=True))
    # Mallory's right guess at Alice's prompt costs a whole prefill, as a wrong one would.
    assert _prompt_tokens_decoded(spec, guess, client="mallory") >= full - 1
    assert draft.n_past == 0  # the draft's cache was emptied with the target's
    # Her own next request reuses her own prefix.
    assert _prompt_tokens_decoded(spec, guess + " and?", client="mallory") < full // 2


def test_one_client_keeps_its_prefix_cache() -> None:
    spec = Speculator(FakeTextModel(seed=1, n_ctx=512), None)
    _prompt_tokens_decoded(spec, SECRET + "what now?", client=None)
    full = len(spec.prompt_tokens(SECRET + "so?", raw=True))
    assert _prompt_tokens_decoded(spec, SECRET + "so?", client=None) < full // 2
