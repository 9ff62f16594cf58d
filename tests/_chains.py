"""What a traceback printer or a logger walks: an error's chain of causes and contexts, which must end."""

from __future__ import annotations


def acyclic(error: BaseException) -> None:
    """The chain a traceback prints (each cause, else each unsuppressed context) ends: no error in it
    comes back, and none is its own cause or context."""
    seen: list[BaseException] = []
    current: BaseException | None = error
    while current is not None:
        assert all(current is not earlier for earlier in seen), f"a cycle through {current!r:.120}"
        assert current.__cause__ is not current and current.__context__ is not current
        seen.append(current)
        current = current.__cause__ or (None if current.__suppress_context__ else current.__context__)
