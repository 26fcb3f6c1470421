"""Time to first token per chat turn: with the conversation kept in both KV caches, turn 5
should cost about what turn 1 does, not five times as much.

    python scripts/chat_ttft.py [--turns 5] [--drafter auto]
"""

from __future__ import annotations

import argparse
import json

from edgespec.api import Speculator
from edgespec.engine.events import DoneEvent
from edgespec.text.conversation import Conversation

QUESTIONS = [
    "Write a Python function that parses an ISO 8601 date string.",
    "Now make it also accept dates without a time part.",
    "Add a docstring with two examples.",
    "Write a unit test for it with pytest.",
    "Summarise what the function does in one sentence.",
    "Rename it to parse_date.",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--drafter", default="auto")
    parser.add_argument("--max-tokens", type=int, default=96)
    args = parser.parse_args()
    spec = Speculator.load(drafter=args.drafter)
    conv = Conversation(spec, max_tokens=args.max_tokens, drafter=args.drafter)
    rows = []
    for turn, question in enumerate(QUESTIONS[: args.turns], 1):
        tokens, dropped = conv.prepare(question)
        done = [e for e in conv.answer(question, tokens) if isinstance(e, DoneEvent)][-1]
        s = done.stats
        rows.append(
            {
                "turn": turn,
                "prompt_tokens": s.prompt_tokens,
                "cached": s.prompt_cached,
                "ttft_s": round(s.ttft_s, 3),
                "prompt_s": round(s.prompt_s, 3),
                "dropped_turns": dropped,
            }
        )
    # The same final prompt without the cache, for comparison.
    spec.reset()
    tokens, _ = conv.prepare(QUESTIONS[args.turns % len(QUESTIONS)])
    done = [e for e in conv.answer("", tokens) if isinstance(e, DoneEvent)][-1]
    print(
        json.dumps(
            {
                "turns": rows,
                "uncached_last_prompt": {
                    "prompt_tokens": done.stats.prompt_tokens,
                    "ttft_s": round(done.stats.ttft_s, 3),
                },
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
