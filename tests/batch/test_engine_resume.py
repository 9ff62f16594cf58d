"""``--engine ray --resume`` keeps what the run asked beside OUTPUT and refuses a resume that asks anything
else, before Ray starts, as the local engine does."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from _batch_data import QUESTIONS

from jevper import ConfigError
from jevper._upstreams import Upstream
from jevper.batch import BatchClassifier
from jevper.batch._engine_cli import manifest, run_engine
from jevper.batch._parts import Parts

OPTIONS: dict[str, Any] = {"api": "chat_completions", "method": "auto", "extra_body": {"seed": 1}}


def interrupted(tmp_path: Path, model: str) -> tuple[Path, Path]:
    """An input, and the OUTPUT of a Ray run that stopped after its manifest was written."""
    source = tmp_path / "in.parquet"
    source.write_bytes(b"")
    output = tmp_path / "out.parquet"
    servers = [Upstream("http://127.0.0.1:9/v1", model)]
    Parts(output, folder=tmp_path / "out.parquet.ray-run").start(
        manifest(source, BatchClassifier(QUESTIONS, servers, **OPTIONS)), resume=False
    )
    return source, output


@pytest.mark.parametrize(
    ("changed", "said"),
    [
        ({"model": "b"}, "with model 'a', this one asks 'b'"),
        ({"method": "logprobs"}, "with method 'auto', this one asks 'logprobs'"),
        ({"extra_body": {"seed": 2}}, 'with extra_body {"seed": 1}, this one asks {"seed": 2}'),
    ],
)
def test_a_ray_resume_asking_another_model_or_another_way_is_refused_naming_both(
    tmp_path: Path, changed: dict[str, Any], said: str
) -> None:
    source, output = interrupted(tmp_path, "a")
    model = changed.pop("model", "a")
    with pytest.raises(ConfigError, match=r"--resume: the run in .* was made with ") as refused:
        run_engine(
            "ray",
            source,
            output,
            QUESTIONS,
            [Upstream("http://10.0.0.1:8080/v1", model, api_key="sk-secret")],
            resume=True,
            workers=None,
            address=None,
            options={**OPTIONS, **changed},
        )
    assert said in str(refused.value)
    assert "10.0.0.1" not in str(refused.value) and "sk-secret" not in str(refused.value)
    # The earlier run's manifest stays as it was: the run can still be resumed with its settings.
    kept = Parts(output, folder=tmp_path / "out.parquet.ray-run").earlier()
    assert kept is not None and kept["models"] == ["a"] and kept["method"] == "auto"


def test_a_ray_run_over_an_unfinished_one_without_resume_is_refused(tmp_path: Path) -> None:
    source, output = interrupted(tmp_path, "a")
    with pytest.raises(ConfigError, match=r"an unfinished run left .*ray-run; pass --resume"):
        run_engine(
            "ray",
            source,
            output,
            QUESTIONS,
            [Upstream("http://127.0.0.1:9/v1", "a")],
            resume=False,
            workers=None,
            address=None,
            options=OPTIONS,
        )
