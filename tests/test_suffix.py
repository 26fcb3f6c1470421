"""Suffix memory: frequency-scored continuations, the session's texts, a project's memory."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from edgespec.auto.config import SuffixConfig
from edgespec.auto.index import SuffixIndex, SuffixMemory
from edgespec.auto.suffix import SuffixDrafter
from edgespec.engine.drafters import Drafter, Lookup, NgramDrafter
from edgespec.errors import ConfigError
from edgespec.text.project_memory import ProjectMemory
from tests.copy_texts import FILE, A, B, C, drafted, drafts_along


def draft(drafter: Drafter, tokens: list[int], k: int = 8) -> list[int]:
    drafter.begin(tokens)
    return drafted(drafter, tokens, k)


def test_the_most_frequent_continuation_wins_over_the_latest() -> None:
    # "1 2 3" was followed by 7 8 three times, by 9 once (last).
    text = [1, 2, 3, 7, 8, 0, 1, 2, 3, 7, 8, 0, 1, 2, 3, 7, 8, 0, 1, 2, 3, 9, 0, 1, 2, 3]
    assert draft(NgramDrafter(), text, 2) == [9, 0]  # prompt lookup copies the last occurrence
    assert draft(SuffixDrafter(), text, 2) == [7, 8]


def test_the_draft_stops_where_the_evidence_thins() -> None:
    # After "5 6" came 1, 2 and 3 once each: no continuation has half the votes.
    text = [5, 6, 1, 0, 5, 6, 2, 0, 5, 6, 3, 0, 4, 4, 5, 6]
    assert draft(SuffixDrafter(), text) == []
    # A long unambiguous copy is drafted as far as asked (round the loop it forms, too).
    code = list(range(10, 40))
    assert draft(SuffixDrafter(), [*code, 0, *code[:5]], 32) == [*code[5:], 0, *code[:6]]
    assert draft(SuffixDrafter(), [*code, 0, *code[:5]], 4) == code[5:9]


def test_a_long_match_copies_its_own_source_not_the_majority() -> None:
    # An 8-token line occurs four times: three times followed by 50 51 52, once (after 70 71)
    # by 60 61 62. The context ends with 70 71 and that line: the copy follows its source.
    line = list(range(10, 18))
    text = [*line, 50, 51, 52, 0, *line, 50, 51, 52, 0, 70, 71, *line, 60, 61, 62, 0]
    text += [*line, 50, 51, 52, 0, 70, 71, *line]
    assert draft(SuffixDrafter(), text, 3) == [60, 61, 62]
    # Without the longer match the counts decide, as for short matches.
    assert draft(SuffixDrafter(), [*text[:-10], 0, 5, *line], 3) == [50, 51, 52]


def test_a_replacement_made_once_is_made_again_in_a_later_copy() -> None:
    # The answer copies the file with 90 91 renamed to 95 and has just copied B again: the
    # copy it drafts renames the second occurrence too, and goes on copying after it.
    out = [0, *A, 95, *B]
    assert drafts_along(SuffixDrafter(), FILE, out, 6) == [95, *C[:5]]
    # Without the first rename it copies the file as it is.
    assert drafts_along(SuffixDrafter(), FILE, [0, *A, 90, 91, *B], 6) == [90, 91, *C[:4]]


def test_a_replacement_the_answer_did_not_repeat_is_forgotten() -> None:
    # Renamed once, then copied unchanged where it came again: the next copy keeps the name.
    text = [*FILE, 90, 91, *range(70, 82)]
    out = [0, *A, 95, *B, 90, 91, *C]
    assert drafts_along(SuffixDrafter(), text, out, 3) == [90, 91, 70]


def test_an_insertion_is_not_made_again() -> None:
    # 90 91 became 95 70 71 72 73, mostly new text (a type hint, say): specific to its place.
    out = [0, *A, 95, 70, 71, 72, 73, *B]
    assert drafts_along(SuffixDrafter(), FILE, out, 4) == [90, 91, *C[:2]]


def offered(drafter: SuffixDrafter, prompt: list[int], out: list[int], k: int) -> Lookup:
    """The lookup offered after `prompt` and `out`, proposals offered at every step before."""
    drafter.begin(prompt)
    for i in range(len(out)):
        drafter.commit([*prompt, *out[:i]])
        drafter.offer([*prompt, *out[:i]], k)
    drafter.commit([*prompt, *out])
    (proposal,) = drafter.offer([*prompt, *out], k)
    assert isinstance(proposal, Lookup)
    return proposal


def test_a_copy_left_at_an_edit_is_taken_up_again_before_a_full_match() -> None:
    # The answer copies A, puts 77 78 in place of 90 91, and goes on with B: three tokens of B
    # (fewer than a copy needs) already say the copy has resumed, at B[3].
    option = offered(SuffixDrafter(), FILE, [0, *A, 77, 78, *B[:3]], 4)
    assert option.resumed and option.available == 4
    assert drafts_along(SuffixDrafter(), FILE, [0, *A, 77, 78, *B[:3]], 4) == B[3:7]
    # Two tokens are not enough; nor are three when no copy came before them.
    assert not offered(SuffixDrafter(), FILE, [0, *A, 77, 78, *B[:2]], 4).resumed
    assert not offered(SuffixDrafter(), FILE, [0, 77, 78, *B[:3]], 4).resumed
    # The source is taken up only near where the copy left it: not 12 tokens further on.
    assert not offered(SuffixDrafter(), FILE, [0, *A, 77, *B[10:12], 90], 4).resumed
    # The source may be the answer itself: it repeats its first 30 tokens with one changed.
    said = list(range(100, 130))
    again = [*said, 0, *said[:12], 99, *said[13:16]]
    assert offered(SuffixDrafter(), [1, 2, 3], again, 4).resumed
    assert drafts_along(SuffixDrafter(), [1, 2, 3], again, 4) == said[16:20]


def test_equally_long_matches_are_copied_only_as_far_as_they_agree() -> None:
    # A log: the same 8-token stamp before different messages. Equal matches that disagree at
    # once leave the draft to the counts (here: nothing has half the votes).
    stamp = list(range(20, 28))
    log = [*stamp, 1, 0, *stamp, 2, 0, *stamp, 3, 0]
    assert draft(SuffixDrafter(), [*log, *stamp], 3) == []
    # Two versions of a file that agree up to an edit: copied up to the edit.
    v1, v2 = [*stamp, 40, 41, 42, 43], [*stamp, 40, 41, 99, 43]
    assert draft(SuffixDrafter(), [*v1, 5, *v2, 0, 9, *stamp], 4) == [40, 41]


def test_earlier_generations_of_the_session_draft_the_next() -> None:
    drafter = SuffixDrafter()
    first = [1, 2, 3, 40, 41, 42, 43, 44, 45]
    drafter.begin(first[:3])
    drafter.commit(first)  # what the engine does when a generation ends
    drafter.end()
    # A new prompt that never contained 40..45: the session remembers them.
    assert draft(drafter, [9, 9, 42, 43]) == [44, 45]
    drafter.memory.forget()
    assert draft(drafter, [9, 9, 42, 43]) == []


def test_the_live_context_outranks_older_versions_in_the_session() -> None:
    # A file edited turn after turn: two earlier versions in the session say 30 follows the
    # lead-in, this turn's prompt (the latest version) says 31. The answer copies the prompt.
    lead = [20, 21, 22, 23, 24, 25, 26, 27]
    memory = SuffixMemory()
    memory.forget(history=[[*lead, 30, 32, 33], [*lead, 30, 32, 33]])
    drafter = SuffixDrafter(memory=memory)
    assert draft(drafter, [9, *lead, 31, 34, 35, 0, *lead], 3) == [31, 34, 35]
    # What the live context lacks still comes from the session.
    assert draft(drafter, [9, 8, *lead[:4]], 3) == lead[4:7]


def test_project_memory_survives_the_process_and_is_capped(tmp_path: Path) -> None:
    memory = ProjectMemory(tmp_path / "mem", "a" * 64, max_tokens=20)
    assert memory.load() == []
    drafter = SuffixDrafter(on_done=memory.add)
    session = [7, 7, 50, 51, 52, 53, 54]
    drafter.begin(session[:2])
    drafter.commit(session)
    drafter.end()  # the generation is over: it went to the memory
    assert memory.load() == [session]
    # A later process drafts from it.
    later = SuffixDrafter(past=ProjectMemory(tmp_path / "mem", "a" * 64).load())
    assert draft(later, [3, 50, 51]) == [52, 53, 54]
    # Over the cap the oldest generations are dropped; a damaged line is skipped.
    with memory.path.open("a") as f:
        f.write("{not json\n")
    memory.add(list(range(100, 110)))
    memory.add(list(range(200, 210)))
    assert memory.load() == [list(range(100, 110)), list(range(200, 210))]
    assert all(json.loads(line) for line in memory.path.read_text().splitlines()[:1])


def test_a_damaged_memory_loses_its_damaged_lines_only(tmp_path: Path) -> None:
    memory = ProjectMemory(tmp_path, "a" * 64)
    memory.path.write_bytes(b"[1,2,3]\n\xff\xfe not UTF-8\n" + b"[" * 100_000 + b"\n[4,5]\n")
    assert memory.load() == [[1, 2, 3], [4, 5]]


def test_a_memory_that_cannot_be_written_does_not_fail_the_answer(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    memory = ProjectMemory(tmp_path, "a" * 64)
    memory.path.mkdir()  # where the file should be: not writable, even by root
    memory.add([1, 2, 3])
    memory.add([4, 5, 6])
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1 and "cannot be written" in warnings[0]


def test_compacting_the_memory_never_writes_through_a_planted_link(tmp_path: Path) -> None:
    memory = ProjectMemory(tmp_path, "a" * 64, max_tokens=2)
    victim = tmp_path / "victim"
    victim.write_text("keep me")
    memory.path.with_suffix(".tmp").symlink_to(victim)
    for start in range(0, 40, 4):  # well over 16 bytes a token: compacted
        memory.add(list(range(start, start + 2)))
    assert victim.read_text() == "keep me"
    assert not memory.path.is_symlink() and memory.load() == [[36, 37]]


def test_a_memory_over_the_session_cap_is_not_indexed_again_after_each_generation() -> None:
    drafter = SuffixDrafter(SuffixConfig(session_tokens=10), past=[list(range(50))])
    index = drafter.session
    drafter.begin([1, 2])
    drafter.commit([1, 2, 3, 4])
    drafter.end()
    assert drafter.session is index  # kept: the session added 4 tokens of its own


def test_memory_must_be_a_folder(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match="is a file"):
        ProjectMemory(tmp_path / "file", "a" * 64)


def test_a_memory_that_is_a_file_fails_before_any_model_loads(
    tmp_path: Path, isolated: dict[str, str]
) -> None:
    from tests.conftest import edgespec_here

    (tmp_path / "notes.txt").write_text("x")
    result = edgespec_here("run", "hi", "--memory", str(tmp_path / "notes.txt"), env=isolated)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"edgespec: error: --memory {tmp_path / 'notes.txt'} is a file; give a folder"
    ]


@pytest.mark.real
def test_a_second_run_drafts_from_the_memory_of_the_first(
    real_pair: object, tmp_path: Path
) -> None:
    import os

    from edgespec.models import files
    from tests.conftest import closed_port, edgespec

    env = dict(os.environ, HF_ENDPOINT=f"http://127.0.0.1:{closed_port()}")
    env.pop("EDGESPEC_DEBUG", None)
    args = ("run", "Write a Python function that merges two sorted lists.", "--json")
    args += ("--max-tokens", "48", "--ctx-size", "1024", "--memory", str(tmp_path / "mem"))

    def answer() -> list[dict]:  # type: ignore[type-arg]
        res = edgespec(*args, env=env)
        assert res.returncode == 0, res.stderr
        return [d for d in map(json.loads, res.stdout.splitlines()) if d["type"] == "token"]

    first = answer()
    # The memory holds that generation, prompt and answer, as the target's token ids.
    target = real_pair.target  # type: ignore[attr-defined]
    (doc,) = ProjectMemory(tmp_path / "mem", files.fingerprint(target)).load()
    ids = [d["token"] for d in first]
    assert doc[-len(ids) :] == ids
    prompt = doc[: -len(ids)]
    # A later process drafts that answer from the memory alone (the prompt does not hold it).
    assert draft(SuffixDrafter(), prompt, 16) != ids[:16]
    assert draft(SuffixDrafter(past=[doc]), prompt, 16) == ids[:16]
    # And the second run, drafting from the memory, says exactly what the first said.
    second = answer()
    assert [d["token"] for d in second] == ids
    assert len(ProjectMemory(tmp_path / "mem", files.fingerprint(target)).load()) == 2


def test_a_new_client_does_not_index_the_persistent_memory_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 50, defect 1: the memory is indexed once and shared; a new client's session
    starts empty (it took 4.7 s per new `user` with a 262k-token memory)."""
    past = [list(range(i, i + 500)) for i in range(0, 10_000, 500)]
    memory = SuffixMemory(past=past)
    indexed: list[int] = []
    real_add = SuffixIndex.add

    def counting(self: SuffixIndex, doc: Sequence[int], start: int = 0) -> None:
        indexed.append(len(doc) - start)
        real_add(self, doc, start)

    monkeypatch.setattr(SuffixIndex, "add", counting)
    sessions = [memory.session(("key", f"user{i}")) for i in range(20)]
    assert sum(indexed) == 0
    # Every client still drafts from the memory.
    key = tuple(range(100, 102))
    assert all(s.follows(key) == {102: 1} for s in sessions)
    memory.add(("key", "user0"), [7, 8, 9])
    assert sum(indexed) == 3  # the client's own text only


def test_the_clients_sessions_hold_at_most_the_cap_together() -> None:
    memory = SuffixMemory(SuffixConfig(clients_tokens=100), past=[list(range(50))])
    for i in range(10):
        memory.add(f"client{i}", list(range(1000 + 30 * i, 1030 + 30 * i)))
    own = [memory.session(f"client{i}").tokens - 50 for i in range(9, -1, -1)]
    # The most recently served kept (30 tokens each, 3 of them within 100), the others dropped.
    assert own[:3] == [30, 30, 30]
    assert sum(own) <= 100
