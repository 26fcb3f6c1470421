"""Issue 63, defect 2: who a client is, under each key setting, and what an answer tells of the
caches. A key of `--api-key-file` is a client no other caller can borrow; one shared `--api-key`
and no key make `user` a name any caller may send, so the counters that tell what the caches
hold are left out where one caller could read another's. In-process over fake models."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient
from typer.testing import CliRunner

from edgespec.api import Speculator
from edgespec.auto.prior import CostModel
from edgespec.cli import loading
from edgespec.cli.app import app as cli
from edgespec.errors import ConfigError
from edgespec.planner.decode_options import DecodeOptions
from edgespec.server.app import create_app
from edgespec.server.identity import read_keys
from tests.conftest import ROOT
from tests.fakes import FakeFimModel

SECRET = "def launch():\n    code = 4711  # keep it to yourself\n"
INFILL = {"input_prefix": SECRET, "input_suffix": "\n", "n_predict": 4, "temperature": 0}
CHAT = {"messages": [{"role": "user", "content": SECRET}], "max_tokens": 4, "temperature": 0}
# What an answer tells of the caches (the /infill answer's and its `timings`', the block's).
TELLING = {"tokens_cached"}
TELLING_TIMINGS = {"cache_n", "prompt_n", "prompt_ms", "prompt_per_token_ms", "prompt_per_second"}


def serving(**kw: Any) -> TestClient:
    spec = Speculator(FakeFimModel(seed=4, n_ctx=512), None)
    spec.enable_auto(CostModel({1: 1.0, 2: 1.1, 8: 1.4, 16: 2.0}, 0.2), use_model=False)
    app = create_app(spec, model_names=["fake"], **kw)
    return TestClient(app, base_url="http://127.0.0.1:8080")


def bearer(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


def cached(client: TestClient, key: str | None = None, user: str | None = None) -> int:
    """The prompt tokens an /infill answer says were cached."""
    doc = {**INFILL, **({"user": user} if user else {})}
    res = client.post("/infill", json=doc, headers=bearer(key) if key else {})
    assert res.status_code == 200, res.text
    return int(res.json()["timings"]["cache_n"])


def test_each_key_of_the_key_file_is_a_client_no_other_caller_can_borrow() -> None:
    with serving(api_keys=["alice-key", "mallory-key"]) as c:
        assert c.post("/infill", json=INFILL).status_code == 401
        assert c.post("/infill", json=INFILL, headers=bearer("guess")).status_code == 401
        cached(c, "alice-key", "alice")
        assert cached(c, "alice-key", "alice") > 0  # her own prefix, kept for her
        # Mallory's exact guess at Alice's prompt, even under her `user`, finds nothing cached.
        assert cached(c, "mallory-key", "alice") == 0
        assert cached(c, "mallory-key", "alice") > 0  # the counters are there: they tell her own


def test_keys_of_the_key_file_do_not_draft_from_each_others_texts() -> None:
    ask = {**CHAT, "max_tokens": 24}
    with serving(api_keys=["alice-key", "mallory-key"]) as c:
        first = c.post("/v1/chat/completions", json=ask, headers=bearer("mallory-key")).json()
    with serving(api_keys=["alice-key", "mallory-key"]) as c:
        for _ in range(2):
            c.post("/v1/chat/completions", json=ask, headers=bearer("alice-key"))
        after = c.post("/v1/chat/completions", json=ask, headers=bearer("mallory-key")).json()
    # Her answer is drafted as on a server where Alice had asked nothing: neither Alice's texts
    # nor the rates learned from them (how long her copies ran) shape Mallory's drafts.
    assert after["edgespec"]["drafters"] == first["edgespec"]["drafters"]


@pytest.mark.parametrize(
    "setting", [{"api_key": "shared"}, {"api_keys": ["a", "b"], "shared_memory": True}]
)
def test_where_callers_share_a_client_the_answers_leave_out_what_tells_the_cache(
    setting: dict[str, Any],
) -> None:
    key = bearer(setting.get("api_key") or "a")
    with serving(**setting) as c:
        whole = c.post("/infill", json=INFILL, headers=key).json()
        streamed = c.post("/infill", json={**INFILL, "stream": True}, headers=key).text
        fields = c.post(
            "/infill", json={**INFILL, "response_fields": ["tokens_cached"]}, headers=key
        ).json()
        chat = c.post("/v1/chat/completions", json=CHAT, headers=key).json()
        chunks = c.post("/v1/chat/completions", json={**CHAT, "stream": True}, headers=key).text
    assert not TELLING & set(whole) and not TELLING_TIMINGS & set(whole["timings"])
    assert whole["timings"]["predicted_n"] == whole["tokens_predicted"]
    assert "tokens_cached" not in streamed and "cache_n" not in streamed
    assert fields == {}
    assert "ttft_s" not in chat["edgespec"] and "ttft_s" not in chunks
    assert "tokens_per_s" in chat["edgespec"]


def test_without_keys_every_caller_is_one_client() -> None:
    # `user` keeps callers' caches apart only as a courtesy: any caller may send any name, and
    # then it is told what that name's caches hold. The docs say so; the counters are there.
    with serving() as c:
        cached(c, user="alice")
        assert cached(c, user="alice") > 0
        whole = c.post("/infill", json=INFILL).json()
        chat = c.post("/v1/chat/completions", json=CHAT).json()
    assert "tokens_cached" in whole and "cache_n" in whole["timings"]
    assert "ttft_s" in chat["edgespec"]


def test_the_key_file_is_read_one_key_a_line(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    keys.write_text("# the editors\nalice-key\n\n  mallory-key  \n")
    assert read_keys(keys) == ["alice-key", "mallory-key"]
    for text, says in [("# none\n\n", "holds no key"), ("a\nb\na\n", "a key twice")]:
        keys.write_text(text)
        with pytest.raises(ConfigError, match=says):
            read_keys(keys)
    with pytest.raises(ConfigError, match="cannot be read"):
        read_keys(tmp_path / "missing")


def test_serve_refuses_a_bad_key_file_before_loading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    loaded: list[DecodeOptions] = []

    def stop(options: DecodeOptions, drafting: object) -> None:
        loaded.append(options)
        raise ConfigError("stop here")

    monkeypatch.setattr(loading, "load", stop)
    keys = tmp_path / "keys"
    keys.write_text("\n")
    refused = CliRunner().invoke(cli, ["serve", "--api-key-file", str(keys)])
    assert "holds no key" in str(refused.exception) and not loaded
    keys.write_text("alice-key\n")
    CliRunner().invoke(cli, ["serve", "--api-key-file", str(keys)])
    assert len(loaded) == 1


def test_the_docs_isolation_table_names_tests_that_exist() -> None:
    text = (ROOT / "docs" / "usage.md").read_text()
    table = text.split("### What is isolated between clients", 1)[1].split("\n\n")[2]
    cited = re.findall(r"`(test_\w+\.py)(?:::(\w+))?`", table)
    assert len(cited) >= 8
    for file, name in cited:
        source = (ROOT / "tests" / file).read_text()
        assert not name or f"def {name}(" in source, f"{file}::{name}"
