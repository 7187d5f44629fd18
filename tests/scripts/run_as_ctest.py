"""Runs a test module's unittest tests as CTest reads a script: verbose,
exit 1 on a failure, and 77 (CTest: skipped) when any test it ran skipped,
the tests and reasons printed. (Only a module whose every test skipped was
reported skipped: one that skipped some of them read as "Passed", and a test
that skipped on every CI run went unseen.)"""

from __future__ import annotations

import unittest


def main(module: str) -> int:
    program = unittest.main(module=module, exit=False, verbosity=2)
    result = program.result
    if result.failures or result.errors or result.unexpectedSuccesses:
        return 1
    if result.skipped:
        print(f"skipped {len(result.skipped)} of {result.testsRun}: " +
              "; ".join(f"{test.id()}: {reason}" for test, reason in result.skipped))
        return 77
    return 0
