"""A virtual environment of its own for another project's server, built once under the cache.

Servers like callo and laya-serve are run as black boxes: installed from the registry into their own
environment (so their pins never meet the project's), started, and asked over HTTP.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from jevper.servers.process import SpawnError, cache_dir

_STAMP = ".jevper-tool-installed"


@dataclass(frozen=True)
class ToolEnv:
    root: Path

    @property
    def python(self) -> Path:
        return self.root / "bin" / "python"

    def program(self, name: str) -> Path:
        return self.root / "bin" / name

    def version(self, distribution: str) -> str:
        """The installed release of a distribution inside the environment."""
        script = f"import importlib.metadata as m; print(m.version({distribution!r}))"
        done = subprocess.run([str(self.python), "-c", script], capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise SpawnError(f"{distribution} is not installed in {self.root}: {done.stderr.strip()[-300:]}")
        return done.stdout.strip()


def tool_env(name: str, requirement: str) -> ToolEnv:
    """The environment `<cache>/tools/<name>` with `requirement` installed (once; a new requirement
    string installs again). pip's output goes to install.log beside it."""
    env = ToolEnv(cache_dir() / "tools" / name)
    stamp = env.root / _STAMP
    if stamp.exists() and json.loads(stamp.read_text()).get("requirement") == requirement:
        return env
    log = env.root.parent / f"{name}-install.log"
    env.root.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    print(f"jevper: installing {requirement} into {env.root} (once; log: {log})", file=sys.stderr, flush=True)
    with open(log, "ab") as out:
        for command in (
            [sys.executable, "-m", "venv", str(env.root)],
            [str(env.python), "-m", "pip", "install", "--quiet", requirement],
        ):
            if subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, check=False).returncode != 0:
                tail = log.read_text(errors="replace")[-2000:]
                raise SpawnError(f"installing {requirement} failed (log: {log}):\n{tail}")
    stamp.write_text(json.dumps({"requirement": requirement, "seconds": round(time.monotonic() - started)}))
    return env
