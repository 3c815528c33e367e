"""The module of `tests.programs.slow_cycle` that imports its package back."""

import tests.programs.slow_cycle as package

BASE = 41


def package_value() -> int:
    return package.VALUE
