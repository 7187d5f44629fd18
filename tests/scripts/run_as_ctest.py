"""Runs a test module's unittest tests as CTest reads a script: verbose,
exit 1 on a failure, and 77 (CTest: skipped) when every test it ran skipped,
with the reasons printed."""

from __future__ import annotations

import unittest


def main(module: str) -> int:
    program = unittest.main(module=module, exit=False, verbosity=2)
    result = program.result
    if result.failures or result.errors or result.unexpectedSuccesses:
        return 1
    if result.skipped and result.testsRun <= len(result.skipped):
        print("skipped: " + "; ".join(dict.fromkeys(reason for _, reason in result.skipped)))
        return 77
    return 0
