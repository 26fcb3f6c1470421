"""`edgespec check`: can this draft speculate for this target?"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from edgespec.cli.console import err
from edgespec.cli.options import Offline
from edgespec.cli.progress import DownloadBars
from edgespec.models import check_compatible, load_registry, model_ref, read_gguf
from edgespec.planner.load import quantize


def check(
    target: Annotated[str, typer.Argument(help="Target: registry model name or .gguf path.")],
    draft: Annotated[str, typer.Argument(help="Draft: registry model name or .gguf path.")],
    offline: Offline = False,
) -> None:
    """Check a draft against a target from GGUF metadata (no weights are loaded)."""
    registry = load_registry()
    with DownloadBars(err) as bars:
        t_path, d_path = (
            model_ref(name, registry).locate(quantize=quantize, offline=offline, progress=bars)
            for name in (target, draft)
        )
    t, d = read_gguf(t_path), read_gguf(d_path)
    check_compatible(t, d)
    sys.stdout.write(
        f"compatible: {d_path.name} can draft for {t_path.name} "
        f"(vocabulary {t.vocab_type}, {t.n_vocab} / {d.n_vocab} tokens, "
        f"BOS {t.bos_id}, EOS {t.eos_id})\n"
    )
