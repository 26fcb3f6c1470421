"""Fill-in-the-middle on fake models: the prompt's layout and budgets (llama.cpp's), where the
middle ends, /v1/completions with `suffix`, /infill in llama.cpp's shapes, bad input, cancelled
requests, and the `edgespec infill` command."""

from __future__ import annotations

import asyncio
import json
import re
import threading
from collections.abc import Sequence

import numpy as np
import pytest
from starlette.testclient import TestClient
from typer.testing import CliRunner

from edgespec.api import Chunk, Speculator
from edgespec.auto.prior import CostModel
from edgespec.cli import loading
from edgespec.cli.app import app as cli
from edgespec.cli.infill_cmd import cursor_offset
from edgespec.engine.drafters import NgramDrafter
from edgespec.errors import ConfigError
from edgespec.server.app import create_app
from edgespec.text.infill_prompt import InfillEnd, InfillPrompt, build_prompt, echo_line
from tests.fakes import FIM_PIECES, FakeFimModel, FakeTextModel

PRE, SUF, MID, PAD, REP, SEP = range(28, 34)
NAMES = ["fake"]


def text_of(model: FakeFimModel, tokens: Sequence[int]) -> list[str]:
    return [FIM_PIECES[t] for t in tokens]


def with_auto(model: FakeTextModel) -> Speculator:
    spec = Speculator(model, None)
    spec.enable_auto(CostModel({1: 1.0, 2: 1.1, 8: 1.4, 16: 2.0}, 0.2), use_model=False)
    return spec


def client(model: FakeTextModel) -> TestClient:
    return TestClient(create_app(with_auto(model), model_names=NAMES), base_url="http://127.0.0.1")


# --- the prompt ---------------------------------------------------------------------------


def test_the_prompt_is_llama_cpp_s_repo_level_layout() -> None:
    model = FakeFimModel(n_ctx=4096)
    prompt = build_prompt(
        model, "ab\n", "\ncd", extra=[Chunk("xy", "uv")], middle="z", max_tokens=64
    )
    want = ["<|repo_name|>", *"myproject\n", "<|file_sep|>", *"uv\n", *"xy"]
    want += ["<|file_sep|>", *"filename\n", "<|fim_prefix|>", *"ab\nz", "<|fim_suffix|>"]
    want += [*"\ncd", "<|fim_middle|>"]
    assert text_of(model, prompt.tokens) == want and not prompt.truncated
    assert prompt.before == "ab\nz" and prompt.suffix == "\ncd"


def test_a_long_prefix_loses_its_start_and_a_long_suffix_its_end() -> None:
    # n_ctx 200 and 72 tokens to generate: a window of 64 tokens, 48 for the prefix, 14 for
    # the suffix, and no room for the extra files (llama.cpp's budgets).
    model = FakeFimModel(n_ctx=200)
    prefix, suffix = "a" * 150 + "bc", "de" + "f" * 150
    prompt = build_prompt(model, prefix, suffix, extra=[Chunk("xyz")], max_tokens=72)
    pieces = "".join(p if len(p) == 1 else "|" for p in text_of(model, prompt.tokens))
    assert pieces == "|" + "a" * 46 + "bc|de" + "f" * 12 + "|"
    assert prompt.truncated and len(prompt.tokens) == 65  # the window and its three FIM tokens


def test_a_model_without_fim_tokens_is_refused_by_name() -> None:
    with pytest.raises(ConfigError, match=r"no fill-in-the-middle tokens.*fim_pre, fim_suf"):
        build_prompt(FakeTextModel(), "a", "b", max_tokens=8)


def test_lookups_draft_from_the_suffix_in_the_prompt() -> None:
    # The suffix is prompt text: an n-gram of it in the answer drafts what follows it there.
    model = FakeFimModel(n_ctx=512)
    prompt = build_prompt(model, "ab", "qrstuvw", max_tokens=16)
    drafter = NgramDrafter()
    drafter.begin(prompt.tokens)
    context = [*prompt.tokens, *model.tokenize("xqrs")]
    (proposal,) = drafter.offer(context, 4)
    assert text_of(model, proposal.continuation) == list("tuvw")  # type: ignore[attr-defined]


# --- where the middle ends ------------------------------------------------------------------


def end_of(before: str, suffix: str, **kw: object) -> InfillEnd:
    return InfillEnd(InfillPrompt([], False, before, suffix), **kw)  # type: ignore[arg-type]


def feed_all(end: InfillEnd, pieces: Sequence[str], elapsed: float = 0.0) -> tuple[str, bool]:
    out = []
    for piece in pieces:
        text, stop = end.feed(piece, elapsed)
        out.append(text)
        if stop:
            return "".join(out), True
    return "".join(out) + end.flush(), False


def test_the_echo_line_is_the_suffix_s_first_whole_non_blank_line() -> None:
    assert echo_line("def f(", "x):\n\n    return x\n") == "    return x"
    assert echo_line("def f():\n", "    return x\n") == "    return x"
    assert echo_line("x = 1", "") is None


def test_the_middle_stops_before_it_repeats_the_suffix() -> None:
    # The cursor at a line's end: the suffix starts with a newline, which the answer then
    # does not repeat.
    end = end_of("def f(x):\n    y = 1", "\n    return y\n")
    pieces = ["\n    z", " = 2\n  ", "  return", " y\n", "junk"]
    assert feed_all(end, pieces) == ("\n    z = 2", True)
    assert end.reason == "echo"
    # At a line's start: the answer keeps its newline.
    end = end_of("def f(x):\n", "    return y\n")
    assert feed_all(end, ["    z = 2\n", "    return y\n"]) == ("    z = 2\n", True)
    # A line that only starts like the suffix's is shown whole.
    end = end_of("def f(x):\n", "    return y\n")
    assert feed_all(end, ["    ret", "urn yy\n"]) == ("    return yy\n", False)
    # The repeated line at the very end (no newline after it) goes too.
    end = end_of("def f(x):\n", "    return y")
    assert feed_all(end, ["    z = 2\n", "    return y"]) == ("    z = 2\n", False)
    assert end.reason == "echo"


def test_time_budget_stops_at_a_newline_and_n_indent_at_a_shallow_line() -> None:
    end = end_of("", "", budget_s=0.5)
    assert feed_all(end, ["ab", "c\nd"], elapsed=1.0) == ("abc\nd", True)
    assert end.reason == "time"
    assert feed_all(end_of("", "", budget_s=0.5), ["ab", "c\nd"], elapsed=0.1) == ("abc\nd", False)
    end = end_of("if x:\n", "", n_indent=4)
    assert feed_all(end, ["    a\n", "    b\n", "  c\n"]) == ("    a\n    b\n  ", True)


def test_the_library_s_middle_ends_before_the_repeated_line() -> None:
    # What the fake writes after this prefix with no suffix to repeat; then the same, with a
    # suffix whose first line is one of those lines: the answer stops right before it.
    # (The fake's next token depends on the last two only: both prompts end "z<|fim_middle|>".)
    spec = Speculator(FakeFimModel(seed=26, n_ctx=512), None)
    free = spec.infill("ab\n", "xxxxx\nz", max_tokens=120, drafter="none")
    lines = free.split("\n")
    assert len(lines) >= 3, free
    cut = spec.infill("ab\n", lines[1] + "\nz", max_tokens=120, drafter="none")
    assert cut == lines[0] + "\n"
    assert spec.session.last_stats is not None and spec.session.last_stats.generated < 120


def test_auto_and_none_write_the_same_middle() -> None:
    spec = with_auto(FakeFimModel(seed=5, n_ctx=512))
    args = ("abcab\nabc", "\nabcabc\n")
    extra = [Chunk("abcabcabc\nabcabc", "x.py")]
    plain = spec.infill(*args, extra=extra, max_tokens=60, drafter="none")
    assert spec.infill(*args, extra=extra, max_tokens=60, drafter="auto") == plain


# --- the server ---------------------------------------------------------------------------

LLAMA_VIM = {
    # What llama.vim (commit a1c8e6e4) sends for a completion.
    "id_slot": 0,
    "input_prefix": "def add(a, b):\n",
    "input_suffix": "\n",
    "input_extra": [{"filename": "util.py", "text": "def sub(a, b):\n    return a - b\n"}],
    "prompt": "    ",
    "n_predict": 16,
    "stop": [],
    "n_indent": 4,
    "top_k": 40,
    "top_p": 0.90,
    "samplers": ["top_k", "top_p", "infill"],
    "stream": False,
    "cache_prompt": True,
    "t_max_prompt_ms": 500,
    "t_max_predict_ms": 1000,
    # Always sent, empty unless configured: the plugin's check measures the setting's name.
    "model": "",
    "response_fields": [
        "content", "timings/prompt_n", "timings/prompt_ms", "timings/prompt_per_token_ms",
        "timings/prompt_per_second", "timings/predicted_n", "timings/predicted_ms",
        "timings/predicted_per_token_ms", "timings/predicted_per_second", "truncated",
        "tokens_cached",
    ],
}  # fmt: skip


def test_infill_answers_llama_vim_in_the_shape_it_reads() -> None:
    with client(FakeFimModel(seed=4, n_ctx=4096)) as c:
        res = c.post("/infill", json=LLAMA_VIM)
    assert res.status_code == 200
    # llama.vim's own check before it decodes the body.
    assert re.search(r'"content"\s*:"', res.text) and res.text.lstrip().startswith("{")
    doc = res.json()
    assert set(doc) == set(LLAMA_VIM["response_fields"])  # type: ignore[arg-type]
    assert isinstance(doc["content"], str) and doc["truncated"] is False
    assert doc["timings/predicted_n"] <= 16 and doc["timings/prompt_n"] > 0


def test_infill_whole_and_streamed_agree_and_n_predict_0_only_warms() -> None:
    ask = {"input_prefix": "ab\n", "input_suffix": "\ncd", "n_predict": 20, "temperature": 0}
    with client(FakeFimModel(seed=4, n_ctx=512)) as c:
        whole = c.post("/infill", json=ask).json()
        lines = c.post("/infill", json={**ask, "stream": True}).text.split("\n\n")
        warm = c.post("/infill", json={**ask, "n_predict": 0}).json()
    assert whole["stop"] is True and whole["stop_type"] in ("eos", "limit")
    assert whole["tokens_predicted"] == whole["timings"]["predicted_n"] > 0
    docs = [json.loads(line[6:]) for line in lines if line.startswith("data: ")]
    assert all(not d["stop"] for d in docs[:-1]) and docs[-1]["stop"] is True
    assert "".join(d["content"] for d in docs) == whole["content"]
    assert warm["content"] == "" and warm["tokens_predicted"] == 0


class Endless(FakeFimModel):
    """A FIM model that never ends its middle (no end-of-generation token)."""

    def is_eog(self, token: int) -> bool:
        return False


def test_n_predict_minus_1_generates_until_the_context_is_full() -> None:
    # Issue 63: -1 (llama.cpp's "no limit") became the server's default of 512 tokens.
    ask = {"input_prefix": "ab\n", "input_suffix": "\nzz", "temperature": 0}
    plain = {"edgespec": {"drafter": "none"}}
    with client(Endless(seed=4, n_ctx=1024)) as c:
        endless = c.post("/infill", json={**ask, **plain, "n_predict": -1}).json()
        default = c.post("/infill", json={**ask, **plain}).json()
    assert endless["stop_type"] == "limit" and default["stop_type"] == "limit"
    assert endless["tokens_evaluated"] == default["tokens_evaluated"]  # the same layout
    assert endless["tokens_evaluated"] + endless["tokens_predicted"] == 1024
    assert default["tokens_predicted"] == 512


def test_completions_with_suffix_fill_the_middle() -> None:
    model = FakeFimModel(seed=4, n_ctx=512)
    ask = {"prompt": "ab\n", "suffix": "\ncd", "max_tokens": 20, "temperature": 0}
    with client(model) as c:
        res = c.post("/v1/completions", json=ask).json()
        chunks = c.post("/v1/completions", json={**ask, "stream": True}).text.split("\n\n")
        filled = c.post("/infill", json={"input_prefix": "ab\n", "input_suffix": "\ncd",
                                         "n_predict": 20, "temperature": 0}).json()  # fmt: skip
    assert res["object"] == "text_completion"
    # The same prompt both ways: the same greedy middle.
    assert res["choices"][0]["text"] == filled["content"]
    assert res["usage"]["prompt_tokens"] == filled["tokens_evaluated"]
    docs = [json.loads(ch[6:]) for ch in chunks if ch.startswith("data: {")]
    assert "".join(d["choices"][0]["text"] for d in docs) == res["choices"][0]["text"]


def test_fill_in_the_middle_without_fim_tokens_is_a_400_naming_the_field() -> None:
    with client(FakeTextModel(seed=4, n_ctx=256)) as c:
        text = c.post("/v1/completions", json={"prompt": "a", "suffix": "b"})
        infill = c.post("/infill", json={"input_prefix": "a", "input_suffix": "b"})
        missing = c.post("/infill", json={"input_prefix": "a"})
    assert text.status_code == infill.status_code == missing.status_code == 400
    assert text.json()["error"]["param"] == "suffix"
    assert infill.json()["error"]["param"] == "input_suffix"
    assert "fill-in-the-middle" in infill.json()["error"]["message"]
    assert missing.json()["error"]["param"] == "input_suffix"


def test_a_prompt_that_cannot_fit_is_a_400() -> None:
    with client(FakeFimModel(seed=4, n_ctx=64)) as c:
        res = c.post("/infill", json={"input_prefix": "a", "input_suffix": "b",
                                      "prompt": "c" * 100, "n_predict": 8})  # fmt: skip
    assert res.status_code == 400 and res.json()["error"]["param"] == "prompt"
    with client(FakeFimModel(seed=4, n_ctx=64)) as c:
        res = c.post("/infill", json={"input_prefix": "a", "input_suffix": "b", "n_predict": "x"})
    assert res.status_code == 400 and "n_predict must be a whole number" in res.text


class Gate(FakeFimModel):
    """Decodes `free` times, then holds every decode until the test opens it."""

    def __init__(self, free: int, **kw: object) -> None:
        super().__init__(**kw)
        self.free = free
        self.reached, self.opened = threading.Event(), threading.Event()

    def decode(self, tokens: Sequence[int], n_logits: int = 1) -> np.ndarray:
        if self.decode_calls >= self.free:
            self.reached.set()
            self.opened.wait(60)
        return super().decode(tokens, n_logits)


async def post(app: object, doc: dict, gone: asyncio.Event) -> list:  # type: ignore[type-arg]
    """POST `doc` to /infill; the client disconnects when `gone` is set."""
    from tests.test_serve import post_scope

    body = [{"type": "http.request", "body": json.dumps(doc).encode(), "more_body": False}]
    sent: list[dict] = []  # type: ignore[type-arg]

    async def receive() -> dict:  # type: ignore[type-arg]
        if body:
            return body.pop()
        await gone.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict) -> None:  # type: ignore[type-arg]
        sent.append(message)

    await app(post_scope("/infill"), receive, send)  # type: ignore[operator]
    return sent


def test_a_burst_of_cancelled_infill_requests_leaves_nothing_running() -> None:
    # An editor cancels each completion as the user types on: the running one stops within a
    # round, the waiting ones never run, and the next request is served at once.
    model = Gate(free=1, seed=4, n_ctx=512)
    spec = Speculator(model, None)
    started: list[object] = []
    stream_infill = spec.stream_infill
    spec.stream_infill = lambda *a, **kw: started.append(a) or stream_infill(*a, **kw)  # type: ignore[method-assign]
    app = create_app(spec, model_names=NAMES)
    worker = app.state.worker
    ask = {"input_prefix": "ab\n", "input_suffix": "\ncd", "n_predict": 200, "temperature": 0,
           "edgespec": {"drafter": "none"}}  # fmt: skip

    async def scenario() -> list:  # type: ignore[type-arg]
        gone = [asyncio.Event() for _ in range(6)]
        first = asyncio.ensure_future(post(app, {**ask, "stream": True}, gone[0]))
        assert await asyncio.to_thread(model.reached.wait, 10)
        rest = [asyncio.ensure_future(post(app, ask, g)) for g in gone[1:]]
        while worker.waiting < 5:
            await asyncio.sleep(0.01)
        for g in gone:
            g.set()
        answers = await asyncio.wait_for(asyncio.gather(first, *rest), 10)
        decodes = model.decode_calls
        model.opened.set()
        async with worker.turn():  # the generation wound down and handed the turn on
            pass
        assert model.decode_calls <= decodes + 1  # at most the round in flight
        return answers

    answers = asyncio.run(scenario())
    assert [a[0]["status"] for a in answers[1:]] == [499] * 5
    assert len(started) == 1 and not spec.session._running
    model.free = 10**9
    with TestClient(app, base_url="http://127.0.0.1") as c:
        assert c.post("/infill", json={**ask, "n_predict": 4}).status_code == 200


# --- the command line -----------------------------------------------------------------------


def test_a_cursor_is_a_line_and_column_or_an_offset() -> None:
    text = "ab\ncde\n"
    assert cursor_offset(text, 2, 2, None) == 4
    assert cursor_offset(text, 2, None, None) == 6  # the end of the line
    assert cursor_offset(text, None, None, None) == len(text)
    assert cursor_offset(text, None, None, 3) == 3
    for bad in [(4, None, None), (2, 5, None), (None, 1, None), (1, None, 2), (None, None, 9)]:
        with pytest.raises(ConfigError):
            cursor_offset(text, *bad)


def test_the_infill_command_prints_the_middle_and_reads_stdin(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    spec = Speculator(FakeFimModel(seed=3, n_ctx=512), None)
    monkeypatch.setattr(loading, "load", lambda options, drafting: spec)
    want = spec.infill("ab\n", "cd\n", max_tokens=30, drafter="none")
    res = CliRunner().invoke(
        cli, ["infill", "-", "--line", "2", "--column", "1", "-n", "30", "--drafter", "none"],
        input="ab\ncd\n",
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    assert res.stdout == want


def test_the_infill_command_refuses_a_model_without_fim_tokens(
    monkeypatch: pytest.MonkeyPatch, tmp_path: object
) -> None:
    monkeypatch.setattr(
        loading, "load", lambda options, drafting: Speculator(FakeTextModel(), None)
    )
    res = CliRunner().invoke(cli, ["infill", "-", "--drafter", "none"], input="ab\n")
    assert res.exit_code != 0 and isinstance(res.exception, ConfigError)
    assert "fill-in-the-middle" in str(res.exception)
