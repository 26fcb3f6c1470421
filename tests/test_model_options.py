"""One set of model options for every command that loads models: declared once
(`ModelOptions`), shown by each command with the same names and help, and given to the planner
as typed."""

from __future__ import annotations

import inspect
from dataclasses import fields
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from edgespec.api import DecodeOptions, DrafterSpec, GenerationConfig, SamplingParams
from edgespec.cli import loading
from edgespec.cli.app import app
from edgespec.cli.options import ModelOptions, SamplingOptions
from edgespec.errors import ConfigError

LOADING = ["run", "infill", "serve", "bench", "plan"]
NAMES = [f.name for f in fields(ModelOptions)]


def _command(name: str) -> Any:
    """The command as Typer builds it (its Click command: its own copy of Click)."""
    return typer.main.get_command(app).commands[name]  # type: ignore[attr-defined]


def _model_params(name: str) -> dict[str, tuple[str, list[str], str | None]]:
    """The command's model options: option or argument, their flags, their help."""
    shown = [p for p in _command(name).params if p.name in NAMES]
    return {p.name: (p.param_type_name, p.opts, getattr(p, "help", None)) for p in shown}


def test_every_command_that_loads_models_takes_the_same_model_options() -> None:
    run = _model_params("run")
    assert sorted(run) == sorted(NAMES)
    for name in LOADING:
        shown = _model_params(name)
        assert sorted(shown) == sorted(NAMES), name
        # `serve PAIR` and `plan PAIR` take the pair as their argument; the rest as run does.
        assert {n: v for n, v in shown.items() if n != "pair"} == {
            n: v for n, v in run.items() if n != "pair"
        }, name


@pytest.mark.parametrize("name", LOADING)
def test_each_command_declares_them_in_one_parameter(name: str) -> None:
    function = _command(name).callback
    assert function is not None
    declared = inspect.signature(inspect.unwrap(function)).parameters
    assert "models" in declared and not set(NAMES) & set(declared)


def test_run_and_infill_share_the_sampling_options_as_one_parameter() -> None:
    names = [f.name for f in fields(SamplingOptions)]
    shown = [
        {p.name: (p.opts, p.help) for p in _command(c).params if p.name in names}
        for c in ("run", "infill")
    ]
    assert sorted(shown[0]) == sorted(names) and shown[0] == shown[1]
    for command in ("run", "infill"):
        function = inspect.unwrap(_command(command).callback)
        assert "sampling" in inspect.signature(function).parameters
    result = CliRunner().invoke(app, ["run", "hi", "--temperature", "-1"])
    assert isinstance(result.exception, ConfigError)  # refused before anything loads
    assert "temperature must be >= 0" in str(result.exception)


class Loaded(Exception):
    """Raised by the fake loader: what the command asked for is then known."""


CALLS = [(["run", "hi"], ["--pair", "p"]), (["plan"], ["p"]), (["serve"], ["p"])]


@pytest.mark.parametrize(("command", "pair"), [*CALLS, (["bench"], ["-p", "p"])])
def test_the_model_options_reach_the_planner_as_typed(
    monkeypatch: pytest.MonkeyPatch, command: list[str], pair: list[str]
) -> None:
    asked: list[DecodeOptions] = []

    def load(options: DecodeOptions, drafting: object) -> None:
        asked.append(options)
        raise Loaded

    monkeypatch.setattr(loading, "load", load)
    monkeypatch.setattr(loading, "plan_only", load)
    given = ["-m", "t.gguf", "-md", "d.gguf", "-t", "3", "-c", "1024", "-ngl", "0", "--offline"]
    result = CliRunner().invoke(app, [*command, *pair, *given])
    assert isinstance(result.exception, Loaded), result.output
    (options,) = asked
    assert (options.pair, options.target, options.draft) == ("p", "t.gguf", "d.gguf")
    assert (options.n_threads, options.n_ctx, options.n_gpu_layers) == (3, 1024, 0)
    assert options.offline and options.rpc is None


@pytest.mark.parametrize(
    "options",
    [ModelOptions, SamplingOptions, SamplingParams, GenerationConfig, DecodeOptions, DrafterSpec],
)
def test_options_are_given_by_name(options: type) -> None:
    """Options are built by naming each value: a positional list of five floats and ints reads
    as nothing, and breaks silently when a field is added in the middle."""
    assert all(f.kw_only for f in fields(options))
    with pytest.raises(TypeError):
        options("auto" if options is DrafterSpec else 1)
