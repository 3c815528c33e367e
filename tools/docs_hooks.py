"""mkdocs hooks: pages the site shows that a build makes fresh, so they never go stale.

The chaos testing tutorial links to the sequence diagram of a failing seed of
``examples/chaos/kvstore.py``; it is made here by replaying that seed, as the
tutorial's ``danaus chaos replay ... --trace seed26.html`` command does.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parent.parent
TRACE_PAGE = "chaos/buggykv-seed26.html"
SEED = 26
PLAN = '[{"at":4.892206,"kind":"crash","target":[1,2],"duration":0.0,"amount":0.0,"one_way":false}]'
"""The tutorial's seed and its shrunk plan (`tests/chaos/test_tutorial.py` keeps them true)."""


def buggy_kv_page() -> str:
    """The HTML sequence diagram of the tutorial's failing run."""
    sys.path.insert(0, str(ROOT / "examples" / "chaos"))
    try:
        from kvstore import BuggyKV
    finally:
        sys.path.pop(0)
    from danaus.chaos import Plan, run_scenario
    from danaus.chaos.export import to_html

    outcome = run_scenario(BuggyKV(), SEED, Plan.from_json(PLAN))
    return to_html(outcome.trace.events, f"BuggyKV seed {SEED}")


def on_files(files: Files, config: Any) -> Files:
    files.append(File.generated(config, TRACE_PAGE, content=buggy_kv_page()))
    return files
