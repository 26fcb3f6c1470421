"""Models made here where nobody publishes the file a device wants: a verified registry file
requantized by llama.cpp's own quantizer (`[models.NAME.derive]` in models.toml; the numbers
behind the registry's choices: docs/tuning.md, The derived draft).

A derived file is kept beside a record of its source and its own sha256, and made again when
either no longer matches. Another compiler or CPU may round a weight differently from the
project's machines, so a sha256 unlike the registry's is reported and the file kept (its
source was verified, and the code that made it is llama.cpp's).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

from edgespec.errors import FetchError, VerifyError
from edgespec.models import files
from edgespec.models.registry import Derivation, ModelSpec
from edgespec.system import cachefile, paths

# (source, out, type, pure): llama.cpp's quantizer, handed down by the layer above
# (`edgespec.planner.load.quantize`) or a test.
Quantize = Callable[[Path, Path, str, bool], None]


def store_path(spec: ModelSpec) -> Path:
    return paths.home() / "derived" / spec.filename


def _record_path(path: Path) -> Path:
    return path.with_suffix(".json")


def _recipe(derive: Derivation) -> dict[str, object]:
    return {
        "source": derive.source.filename,
        "source_sha256": derive.source.sha256,
        "type": derive.type,
        "pure": derive.pure,
    }


def find_local(spec: ModelSpec, progress: files.Progress | None = None) -> files.Located | None:
    """The derived file if it is on disk, made by this recipe, and unchanged since."""
    assert spec.derive is not None
    path = store_path(spec)
    record = _record_path(path)
    if not path.is_file() or not record.is_file():
        return None
    made = cachefile.read(record)
    made = made if isinstance(made, dict) else {}
    recipe_holds = all(made.get(key) == value for key, value in _recipe(spec.derive).items())
    if not recipe_holds or files.fingerprint(path, progress) != made.get("sha256"):
        if progress is not None:
            progress.note(f"{path.name} does not match its record; it will be made again")
        return None
    return files.Located(path, "derived")


def fetch(
    spec: ModelSpec,
    *,
    offline: bool = False,
    progress: files.Progress | None = None,
    quantize: Quantize,
) -> files.Located:
    """The derived model on disk: its source fetched (and verified) first, then requantized."""
    derive = spec.derive
    assert derive is not None
    progress = progress or files.Silent()
    local = find_local(spec)  # quietly: what is wrong is said once, below
    if local is not None:
        return local
    try:
        source = files.fetch(derive.source, offline=offline, progress=progress)
    except FetchError as exc:
        raise type(exc)(f"to make {spec.name}: {exc}") from exc
    with files.model_lock(spec, progress):
        local = find_local(spec, progress)  # another pull may have made it meanwhile
        if local is not None:
            return local
        try:
            return _make(spec, derive, source.path, progress, quantize)
        except OSError as exc:
            reason = exc.strerror or str(exc)
            raise FetchError(f"cannot make {store_path(spec)}: {reason}") from exc


def _make(
    spec: ModelSpec,
    derive: Derivation,
    source: Path,
    progress: files.Progress,
    quantize: Quantize,
) -> files.Located:
    target = store_path(spec)
    assert spec.size is not None  # the registry requires it of a derived model
    target.parent.mkdir(parents=True, exist_ok=True)
    for path in (target, _record_path(target)):
        files.remove_stale(path)  # what a killed make left (the lock is held)
    free = shutil.disk_usage(target.parent).free
    if free < spec.size:
        # llama.cpp would write most of it first, then fail with a message about a stream.
        raise FetchError(
            f"not enough disk space to make {target.name}: {free / 1e9:.1f} GB free in "
            f"{target.parent}, {spec.size / 1e9:.1f} GB needed; free space or set EDGESPEC_HOME"
        )
    progress.note(
        f"making {target.name}: {source.name} requantized to {derive.type} by llama.cpp's "
        "quantizer (once; Ctrl-C takes effect when it is done)"
    )
    with cachefile.partial(target) as tmp:
        quantize(source, tmp, derive.type, derive.pure)
        size = tmp.stat().st_size
        if size != spec.size:
            # The tensors' types fix the size: a different one is a different recipe.
            raise VerifyError(
                f"{spec.name}: llama.cpp's quantizer made {size} bytes where the registry "
                f"says {spec.size}; nothing was kept"
            )
        digest = files.sha256_file(tmp)
        os.replace(tmp, target)
    files.remember(target, digest)
    record = _record_path(target)
    with cachefile.partial(record) as tmp:  # whole or absent: a reader never sees half of it
        tmp.write_text(json.dumps({**_recipe(derive), "sha256": digest}, indent=1))
        os.replace(tmp, record)
    if spec.sha256 is not None and digest != spec.sha256:
        progress.note(
            f"{target.name}: sha256 {digest} differs from the one this project's machines made "
            f"({spec.sha256}); another compiler or CPU rounds differently. Kept: its source was "
            "verified"
        )
    return files.Located(target, "derived")
