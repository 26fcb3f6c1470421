"""The terminal chat: a real pseudo-terminal session, KV reuse between turns, and trimming
when the conversation outgrows the context."""

from __future__ import annotations

import errno
import json
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import jsonschema
import pexpect
import pytest

from edgespec.api import Speculator
from edgespec.cli.chat_repl import HELP, ChatRepl
from edgespec.engine.events import DoneEvent
from edgespec.errors import ConfigError, EdgespecError
from edgespec.text.conversation import Conversation
from tests.conftest import ROOT, closed_port, interruptible
from tests.fakes import FakeTextModel
from tests.grammars import GrammarChatModel


def fake_conversation(n_ctx: int = 512, **kw: object) -> Conversation:
    spec = Speculator(FakeTextModel(seed=4, n_ctx=n_ctx), None)
    return Conversation(spec, drafter="ngram", max_tokens=20, **kw)  # type: ignore[arg-type]


def ask(conv: Conversation, text: str) -> tuple[DoneEvent, int]:
    tokens, dropped = conv.prepare(text)
    events = list(conv.answer(text, tokens))
    assert isinstance(events[-1], DoneEvent)
    return events[-1], dropped


def test_a_new_turn_decodes_only_the_new_tokens() -> None:
    conv = fake_conversation()
    target = conv.spec.target
    first, _ = ask(conv, "hello there")
    assert first.stats.prompt_cached == 0
    history = len(conv.spec.session.cached_tokens)
    decoded_before = target.decoded_tokens
    second, _ = ask(conv, "and again")
    # Everything the first turn left in the cache is reused ...
    assert second.stats.prompt_cached >= history - 1
    # ... and the second prompt's decode covered only what is new.
    prompt = conv.spec.prompt_tokens(conv._rendered([])[:-1])
    new_prompt_tokens = len(prompt) - 1 - second.stats.prompt_cached
    # (each round decodes its last token and its draft)
    rounds = second.stats.rounds + second.stats.drafted
    assert target.decoded_tokens - decoded_before == new_prompt_tokens + rounds
    # the last answer token (generated, never decoded) + the new turn - its last token (pending)
    assert new_prompt_tokens == len("<user>and again<assistant>")


def test_old_turns_are_dropped_when_the_context_fills_up() -> None:
    conv = fake_conversation(n_ctx=200, system="be brief")
    drops = []
    for i in range(12):
        done, dropped = ask(conv, f"question number {i} with some words")
        drops.append(dropped)
        assert done.finish_reason in ("length", "stop", "context")
    assert sum(drops) > 0
    assert conv._rendered([])[0] == {"role": "system", "content": "be brief"}
    assert conv.messages[-2]["content"] == "question number 11 with some words"


def test_a_message_longer_than_the_context_is_refused() -> None:
    conv = fake_conversation(n_ctx=64)
    with pytest.raises(ConfigError, match="this message alone takes"):
        conv.prepare("x" * 100)


def test_save_as_json_and_markdown(tmp_path: Path) -> None:
    conv = fake_conversation(system="sys")
    ask(conv, "hi")
    conv.save(tmp_path / "c.json")
    doc = json.loads((tmp_path / "c.json").read_text())
    assert [m["role"] for m in doc["messages"]] == ["system", "user", "assistant"]
    conv.save(tmp_path / "c.md")
    assert "**user**:\n\nhi" in (tmp_path / "c.md").read_text()
    with pytest.raises(ConfigError, match="cannot save"):
        conv.save(tmp_path / "missing" / "c.json")


@pytest.mark.real
def test_terminal_session(real_pair) -> None:  # type: ignore[no-untyped-def]
    env = dict(os.environ, HF_ENDPOINT=f"http://127.0.0.1:{closed_port()}", PYTHONUNBUFFERED="1")
    child = pexpect.spawn(
        sys.executable,
        ["-m", "edgespec", "run", "--max-tokens", "300", "--ctx-size", "2048"],
        cwd=str(ROOT),
        env=env,
        encoding="utf-8",
        timeout=180,
        dimensions=(40, 200),
        preexec_fn=interruptible,
    )
    try:
        child.expect("edgespec chat")
        child.expect("› ")
        child.sendline("What is the capital of France? Answer with one word.")
        child.expect("Paris")
        child.expect("› ")
        child.sendline("/stats on")
        child.expect(r"statistics on")
        child.expect("› ")
        child.sendline("Repeat your previous answer in capital letters.")
        child.expect("PARIS")
        # The stats footer shows the history came from the KV cache.
        child.expect(r"prompt (\d+) tokens \((\d+) cached\)")
        total, cached = int(child.match.group(1)), int(child.match.group(2))
        assert cached > 30 and total - cached < 25
        child.expect("› ")
        for bad, message in (
            ("/frobnicate", "unknown command /frobnicate"),
            ("/k many", "usage: /k N"),
            ("/save /nonexistent/dir/chat.json", "cannot save to"),
        ):
            child.sendline(bad)
            child.expect(message)
            child.expect("› ")
        child.sendline("Write a Python module with ten string functions, each with a docstring.")
        child.expect("def ")  # it is streaming: the interrupt lands mid-answer
        child.sendintr()
        child.expect("answer interrupted")
        child.expect("› ")
        child.sendline("What is 2 + 3? Answer with the number only.")
        child.expect("5")
        child.expect("› ")
        child.sendeof()
        child.expect(pexpect.EOF)
    finally:
        child.close()
    assert child.exitstatus == 0


def test_save_never_replaces_a_file_unasked_and_never_leaves_half_a_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    conv = fake_conversation()
    ask(conv, "hi")
    target = tmp_path / "chat.md"
    target.write_text("an earlier conversation")
    with pytest.raises(FileExistsError):
        conv.save(target)
    assert target.read_text() == "an earlier conversation"

    def disk_full(src: object, dst: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "replace", disk_full)
    with pytest.raises(ConfigError, match="No space left"):
        conv.save(target, overwrite=True)
    assert target.read_text() == "an earlier conversation"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["chat.md"]  # no temporary left
    monkeypatch.undo()
    conv.save(target, overwrite=True)
    assert "**user**:\n\nhi" in target.read_text()


class FailingModel(FakeTextModel):
    """A model whose decode fails (as llama_decode can) once `fail` is set."""

    fail = False

    def decode(self, tokens, n_logits=1):  # type: ignore[no-untyped-def]
        if self.fail:
            raise EdgespecError("llama_decode failed with code 1 at position 40")
        return super().decode(tokens, n_logits)


def test_the_chat_survives_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    model = FailingModel(seed=4, n_ctx=512)
    spec = Speculator(model, None)
    conv = Conversation(spec, drafter="ngram", max_tokens=8)
    saved = tmp_path / "c.json"
    saved.write_text("{}")

    def typed() -> Iterator[str]:
        yield "/k ²"  # a Unicode digit that int() refuses
        yield "/drafter model"  # no draft model loaded
        yield "hello"
        model.fail = True
        yield "this answer fails"
        model.fail = False
        raise UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte")

    lines = typed()
    answers = iter(["n"])

    def fake_input(prompt: str = "") -> str:
        if "replace it?" in prompt:
            return next(answers)
        try:
            return next(lines)
        except StopIteration:
            raise EOFError from None

    monkeypatch.setattr("builtins.input", fake_input)
    repl = ChatRepl(spec, conv, show_draft=False, stats=False, label="test")
    assert repl.run() == 0
    err = capsys.readouterr().err
    assert "usage: /k N" in err
    assert "needs a draft model" in err
    assert "error: llama_decode failed with code 1" in err
    assert "not valid UTF-8" in err
    # The conversation went on: the first answer and the failed one are both kept.
    assert [m["content"] for m in conv.messages if m["role"] == "user"] == [
        "hello",
        "this answer fails",
    ]
    # /save to an existing file asks first; "n" keeps the file.
    lines = iter(["/save " + str(saved)])
    assert repl.run() == 0
    assert saved.read_text() == "{}" and "(not saved)" in capsys.readouterr().err
    lines = iter(["/save! " + str(saved)])
    assert repl.run() == 0
    assert json.loads(saved.read_text())["messages"][0]["content"] == "hello"


def test_ctrl_c_at_the_replace_question_is_a_no(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    saved = tmp_path / "c.json"
    saved.write_text("{}")
    conv = Conversation(Speculator(FakeTextModel(seed=4), None), drafter="ngram", max_tokens=4)
    lines = iter(["hello", "/save " + str(saved), "and on"])

    def fake_input(prompt: str = "") -> str:
        if "replace it?" in prompt:
            raise KeyboardInterrupt
        try:
            return next(lines)
        except StopIteration:
            raise EOFError from None

    monkeypatch.setattr("builtins.input", fake_input)
    assert ChatRepl(conv.spec, conv, show_draft=False, stats=False, label="test").run() == 0
    assert saved.read_text() == "{}" and "(not saved)" in capsys.readouterr().err
    # The chat went on after the question.
    assert [m["content"] for m in conv.messages if m["role"] == "user"] == ["hello", "and on"]


def one_line(line: str) -> Callable[[str], str]:
    """`input` that gives this line, then Ctrl-D (the chat ends after it)."""
    queue = iter([line])

    def fake_input(prompt: str = "") -> str:
        try:
            return next(queue)
        except StopIteration:
            raise EOFError from None

    return fake_input


def test_schema_and_json_shape_the_answers_that_follow(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    schema = {"type": "object", "properties": {"a": {"type": "boolean"}}, "required": ["a"],
              "additionalProperties": False}  # fmt: skip
    (tmp_path / "s.json").write_text(json.dumps(schema))
    conv = Conversation(Speculator(GrammarChatModel(seed=5), None), drafter="ngram", max_tokens=40)
    repl = ChatRepl(conv.spec, conv, show_draft=False, stats=False, label="test")
    said: list[str] = []

    def typing(*lines: str) -> None:
        """Type these lines into the chat; what it said on stderr, per line, goes to `said`."""
        for line in lines:
            monkeypatch.setattr("builtins.input", one_line(line))
            assert repl.run() == 0
            said.append(capsys.readouterr().err.removeprefix("test\n").strip())

    typing("/schema", "/schema {bad", "/schema missing.json", f"/schema {tmp_path}/s.json")
    assert said[0] == "(no schema: answers are free text)"
    assert "error: the JSON schema is not valid JSON" in said[1]
    assert "error: /schema missing.json: cannot be read" in said[2]
    assert (
        said[3]
        == f"(answers follow the JSON schema in {tmp_path}/s.json; /schema off for free text)"
    )
    typing("ab", "/schema", "/json", "a b", "/json off", "/json please")
    answer = json.loads(conv.messages[1]["content"])
    jsonschema.validate(answer, schema)
    assert said[5] == said[3]  # /schema alone says what is set
    assert said[6] == "(answers follow any JSON object; /schema off for free text)"
    assert isinstance(json.loads(conv.messages[3]["content"]), dict)
    assert said[8] == "(no schema: answers are free text)" and conv.grammar is None
    assert said[9] == "usage: /json (any JSON object), /json off"
    conv.max_tokens = 3
    typing("/json", "a")
    assert said[-1] == "error: the output is incomplete: --max-tokens (3) ran out inside it"
    assert "/schema FILE|JSON" in HELP and "/json" in HELP
