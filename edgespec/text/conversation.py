"""A multi-turn conversation over a Speculator: messages, trimming to the context, and answers
streamed as events. No I/O here; the terminal front end is `edgespec.cli.chat_repl`."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from edgespec.engine.events import DoneEvent, Event, TokenEvent
from edgespec.engine.sampling import SamplingParams
from edgespec.errors import ConfigError

if TYPE_CHECKING:
    from edgespec.text.grammar import Grammar


class Answerer(Protocol):
    """What a conversation needs of a loaded pair (`edgespec.api.Speculator` is one)."""

    target: Any  # the target model: its `n_ctx`

    def prompt_tokens(self, prompt: list[dict[str, str]]) -> list[int]: ...

    def stream(
        self,
        prompt: list[int],
        *,
        drafter: str,
        k: int | None,
        max_tokens: int,
        sampling: SamplingParams,
        instruction: str | None,
        grammar: Grammar | None,
    ) -> Generator[Event, None, None]: ...

    def reset(self) -> None: ...


@dataclass
class Conversation:
    spec: Answerer
    system: str | None = None
    max_tokens: int = 512
    drafter: str = "auto"
    k: int | None = None
    sampling: SamplingParams = field(default_factory=SamplingParams)
    messages: list[dict[str, str]] = field(default_factory=list)
    # What the answers must match from now on; None: free text.
    grammar: Grammar | None = None

    def _rendered(self, extra: list[dict[str, str]]) -> list[dict[str, str]]:
        head = [{"role": "system", "content": self.system}] if self.system else []
        return head + self.messages + extra

    def prepare(self, user_text: str) -> tuple[list[int], int]:
        """The prompt for the next answer, and how many of the oldest exchanges were dropped to
        keep room for max_tokens (at most a quarter of the context) of answer."""
        user = [{"role": "user", "content": user_text}]
        n_ctx = self.spec.target.n_ctx
        reserve = min(self.max_tokens, n_ctx // 4)
        dropped = 0
        while True:
            tokens = self.spec.prompt_tokens(self._rendered(user))
            if len(tokens) + reserve <= n_ctx or not self.messages:
                break
            del self.messages[: 2 if len(self.messages) > 1 else 1]
            dropped += 1
        if len(tokens) >= n_ctx - 1:
            raise ConfigError(
                f"this message alone takes {len(tokens)} tokens of the {n_ctx}-token context; "
                "shorten it or restart with a larger --ctx-size"
            )
        return tokens, dropped

    def answer(self, user_text: str, tokens: list[int]) -> Generator[Event, None, None]:
        """Stream the answer; what was generated is recorded even when the consumer stops
        early (Ctrl-C), so the conversation matches what was shown."""
        parts: list[str] = []
        events = self.spec.stream(
            tokens,
            drafter=self.drafter,
            k=self.k,
            max_tokens=self.max_tokens,
            sampling=self.sampling,
            instruction=user_text,
            grammar=self.grammar,
        )
        try:
            for event in events:
                if isinstance(event, TokenEvent):
                    parts.append(event.text)
                yield event
                if isinstance(event, DoneEvent):
                    break
        finally:
            events.close()
            self.messages.append({"role": "user", "content": user_text})
            self.messages.append({"role": "assistant", "content": "".join(parts)})

    def reset(self) -> None:
        self.messages.clear()
        self.spec.reset()

    def save(self, path: Path, *, overwrite: bool = False) -> None:
        """JSON for a .json file, Markdown otherwise; written whole or not at all (a temporary
        file renamed), an existing file replaced only with `overwrite`."""
        messages = self._rendered([])
        if path.suffix.lower() == ".json":
            text = json.dumps({"messages": messages}, indent=2, ensure_ascii=False) + "\n"
        else:
            text = "".join(f"**{m['role']}**:\n\n{m['content']}\n\n" for m in messages)
        if path.exists() and not overwrite:
            raise FileExistsError(path)
        tmp: str | None = None
        try:
            with tempfile.NamedTemporaryFile(
                "w", encoding="utf-8", dir=path.parent, prefix=f".{path.name}.", delete=False
            ) as f:
                tmp = f.name
                f.write(text)
            os.replace(tmp, path)
        except OSError as exc:
            if tmp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
            raise ConfigError(f"cannot save to {path}: {exc.strerror or exc}") from exc
