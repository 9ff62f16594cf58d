"""Test helpers that ship with jevper: ``jevper.testing.faults``, a loopback server that misbehaves on
purpose (run it with ``python -m jevper.testing.faults``) or, given a ``Script``, answers as queued."""
