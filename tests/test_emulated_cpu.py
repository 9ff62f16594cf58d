"""Opt in (marker `emulated`): the embedded server on an emulated AVX2-only CPU, under Debian's qemu-user.

Run: apt-get install qemu-user; pip install -e '.[llamacpp-b10434]'; scripts/test -m emulated
Measured (2 cores, 2026-11-30): the default b11549 served in about 7 s and answered a first chat
completion 26 s later; the b10434 prebuilt died at once with SIGILL.
"""

from __future__ import annotations

import httpx
import pytest

from jevper.servers import SpawnError
from jevper.servers.llamacpp import skulk_binary, spawn_llamacpp, under_qemu, xllamacpp_build

pytestmark = pytest.mark.emulated


def test_the_default_server_starts_and_answers_with_logprobs_on_an_avx2_only_cpu() -> None:
    with spawn_llamacpp(build=under_qemu(xllamacpp_build(), "Haswell"), startup_timeout=600) as server:
        reply = httpx.post(
            f"{server.base_url}/chat/completions",
            json={
                "model": server.model,
                "messages": [{"role": "user", "content": "Say yes."}],
                "max_tokens": 2,
                "logprobs": True,
                "top_logprobs": 3,
            },
            timeout=900,
        )
    assert reply.status_code == 200
    entry = reply.json()["choices"][0]["logprobs"]["content"][0]
    assert len(entry["top_logprobs"]) == 3


def test_the_b10434_prebuilt_dies_with_sigill_there_and_is_reported_as_an_illegal_instruction() -> None:
    build = skulk_binary()  # needs the llamacpp-b10434 extra
    with pytest.raises(SpawnError) as died, spawn_llamacpp(build=under_qemu(build, "Haswell")):
        pass
    assert "killed by SIGILL (illegal instruction" in str(died.value)
    assert "--release b11549" in str(died.value)
