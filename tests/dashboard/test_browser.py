"""The dashboard in a real browser: a tcp job of 8 procs, watched live while one proc is killed
and another is busy; and a simulated run, replayed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from danaus.dashboard.simulated import SimSource
from tests.dashboard.programs import simulated
from tests.observe.conftest import PYTHON, program

pytestmark = pytest.mark.timeout(180)

JOB = """
import json, os, sys, time
import danaus
from danaus import Actor, endpoint, this_host

danaus.unhandled_fault_hook = lambda failure: print("failed:", failure.actor_id, flush=True)


class Worker(Actor):
    @endpoint
    def pid(self) -> int:
        print("worker up, pid", os.getpid(), flush=True)
        return os.getpid()

    @endpoint
    def crunch_numbers(self, stop: str) -> int:
        turns = 0
        while not os.path.exists(stop):
            turns += 1
        return turns


danaus.configure(transport="tcp", trace=True)
procs = this_host().spawn_procs(per_host={"gpus": 8})
workers = procs.spawn("worker", Worker)
pids = workers.pid.call().get(timeout=120)
busy = workers.slice(gpus=5).crunch_numbers.call_one(sys.argv[1])
print("ready", json.dumps({str(p["gpus"]): pid for p, pid in pids.items()}), flush=True)
sys.stdin.readline()
busy.get(timeout=60)
danaus.shutdown()
"""

REPORT = """<!doctype html><title>chaos run</title><h1>12 seeds, 1 failing group</h1>
<p>seed 7: the ledger lost an entry</p>"""

WAIT = 60_000
"""Milliseconds the page may take to show what a step waits for."""


def read_line(process: subprocess.Popen[str], prefix: str, timeout: float) -> str:
    """The first line ``process`` prints that starts with ``prefix`` (its other lines skipped)."""
    assert process.stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        if line.strip().startswith(prefix):
            return line.strip()
    raise AssertionError(f"no line starting {prefix!r} within {timeout} s")


def expect(locator):
    """Playwright's ``expect`` (imported once the browser fixture has found Playwright)."""
    from playwright.sync_api import expect

    return expect(locator)


def test_the_dashboard_of_a_job_of_8_procs_in_a_browser(
    browser, screenshots, job_env, tmp_path: Path
):
    stop = tmp_path / "stop"
    reports = tmp_path / "reports"
    reports.mkdir()
    (reports / "chaos-run.html").write_text(REPORT)
    job = subprocess.Popen(
        [PYTHON, program(tmp_path, JOB), str(stop)],
        env=job_env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    dashboard = None
    try:
        pids = json.loads(read_line(job, "ready", 120).partition(" ")[2])
        dashboard = subprocess.Popen(
            [PYTHON, "-m", "danaus.cli", "dashboard", "--no-browser", "--reports", str(reports)],
            env=job_env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            text=True,
        )
        link = read_line(dashboard, "open http://127.0.0.1:", 60).partition(" ")[2]
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.goto(link)
        assert "token=" not in page.url, "the token leaves the address once it is spent"

        # The topology: the controller and 8 procs running, 8 actors, with rates and mailboxes.
        expect(page.locator(".cell.proc[data-state=running]")).to_have_count(9, timeout=WAIT)
        expect(page.locator(".cell.actor[data-state=running]")).to_have_count(8, timeout=WAIT)
        assert page.inner_text(".actormesh .am-head .name") == "worker"
        page.wait_for_selector(".cell.actor.busy", timeout=WAIT)
        busy_proc = page.get_attribute(".cell.actor.busy", "data-proc")
        assert "gpus=5" in page.inner_text(".cell.actor.busy")
        screenshots(page, "1-topology")

        # Kill the proc of gpus=2: it turns failed, with its report, and so does its actor.
        victim = page.get_attribute('.cell.actor[data-actor$="worker[2]"]', "data-proc")
        os.kill(pids["2"], signal.SIGKILL)
        failed = f'.cell.proc[data-proc="{victim}"][data-state=failed]'
        page.wait_for_selector(failed, timeout=WAIT)
        page.wait_for_selector(
            '.cell.actor[data-actor$="worker[2]"][data-state=failed]', timeout=WAIT
        )
        page.click(failed)
        details = page.inner_text("#details")
        assert f"proc {victim}" in details and "failed" in details
        assert f"pid {pids['2']}" in details and "was killed signal 9" in details
        screenshots(page, "2-a-proc-killed")
        page.click('.cell.actor[data-actor$="worker[2]"]')
        report = page.inner_text("#details pre")
        assert "mesh 'worker' rank gpus=2" in report and "Killed(sig=9)" in report
        page.click("#details button:has-text('Open in Failures')")
        page.wait_for_selector("#tab-failures.active")
        cards = page.inner_text("#failures").lower()
        assert "proc lost" in cards and "actor failed" in cards and "killed(sig=9)" in cards
        screenshots(page, "3-failures")

        # The busy proc's stacks, taken while it spins, name the function it spins in.
        page.click("#tabs button[data-tab=topology]")
        page.click(f'.cell.proc[data-proc="{busy_proc}"]')
        page.click("#details-stacks")
        page.wait_for_selector("#tab-stacks.active")
        expect(page.locator("#stacks")).to_contain_text("Worker.crunch_numbers", timeout=WAIT)
        thread = page.inner_text(".thread:has-text('Worker.crunch_numbers') h4")
        assert "danaus-actor-root:3/worker[5]" in thread
        page.fill("#profile-seconds", "1")
        page.click("#profile-take")
        page.wait_for_selector("#flame svg text", timeout=WAIT)
        assert "crunch_numbers" in page.inner_html("#flame svg")
        screenshots(page, "4-stacks-and-flame-graph")

        # Logs, filtered by mesh and coordinates.
        page.click("#tabs button[data-tab=logs]")
        expect(page.locator("#logs .line").nth(7)).to_be_attached(timeout=WAIT)
        page.select_option("#log-mesh", "worker")
        page.fill("#log-coords", "gpus=3")
        whose = page.eval_on_selector_all("#logs .who", "cells => cells.map(c => c.innerText)")
        assert whose == ["worker gpus=3"]
        assert "worker up, pid" in page.inner_text("#logs")
        screenshots(page, "5-logs")

        # The trace timeline, and its download in Perfetto's format.
        page.click("#tabs button[data-tab=timeline]")
        page.wait_for_selector("#timeline svg .track-name", timeout=WAIT)
        tracks = page.eval_on_selector_all(
            "#timeline .track-name", "names => names.map(n => n.textContent)"
        )
        assert "root" in tracks and busy_proc in tracks
        download = page.request.get(page.url.rstrip("/") + "/api/trace.json?download=1")
        assert download.ok and "attachment" in download.headers["content-disposition"]
        assert any(e.get("ph") == "X" for e in download.json()["traceEvents"])
        screenshots(page, "6-timeline")

        # The reports given.
        page.click("#tabs button[data-tab=reports]")
        page.wait_for_selector("#reports a", timeout=WAIT)
        assert page.inner_text("#reports a") == "chaos-run.html"
        shown = page.request.get(page.url.rstrip("/") + page.get_attribute("#reports a", "href"))
        assert shown.ok and "1 failing group" in shown.text()
        assert shown.headers["content-security-policy"].startswith("sandbox")
        screenshots(page, "7-reports")

        first_paint = page.evaluate(
            "performance.getEntriesByName('first-contentful-paint')[0].startTime"
        )
        assert first_paint > 0 and errors == []
    finally:
        stop.touch()
        if dashboard is not None:
            dashboard.send_signal(signal.SIGINT)
            try:
                dashboard.wait(30)
            except subprocess.TimeoutExpired:
                dashboard.kill()
                dashboard.wait()
        job.communicate("stop\n", timeout=120)
    assert dashboard.returncode == 0, "Ctrl-C stops the dashboard"
    assert job.returncode == 0


def test_the_dashboard_of_a_simulated_run_replays_it(browser, screenshots, served):
    source = SimSource(simulated, "simulated", hosts=1, seed=3, replay_seconds=2.0)
    source.run.join(60)  # the run is over: what follows replays it
    server = served(source, interval=0.2)
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    page.goto(server.served.link())
    page.wait_for_selector("#sim:not([hidden])", timeout=WAIT)
    page.wait_for_selector(".cell.proc[data-state=failed]", timeout=WAIT)
    assert page.get_attribute(".cell.proc[data-state=failed]", "data-proc") == "root:1.1"
    digest = source.status().digest
    assert digest is not None and digest[:16] in page.inner_text("#sim-digest")
    screenshots(page, "1-simulated-run")

    # The page stops listening while it is hidden, and listens again when it is seen.
    hide = (
        "hidden => { Object.defineProperty(document, 'hidden', {value: hidden, configurable: 1});"
        " document.dispatchEvent(new Event('visibilitychange')); }"
    )
    page.evaluate(hide, True)
    expect(page.locator("#live-text")).to_have_text("paused while hidden")
    page.evaluate(hide, False)
    expect(page.locator("#live-text")).to_contain_text("live ·", timeout=WAIT)

    page.click("#sim-play")
    expect(page.locator(".cell.proc[data-state=failed]")).to_have_count(0, timeout=WAIT)
    page.wait_for_selector(".cell.proc[data-state=failed]", timeout=WAIT)
    page.click("#tabs button[data-tab=logs]")
    expect(page.locator("#logs")).to_contain_text("step 9", timeout=WAIT)
    assert "step gpus=0" in page.inner_text("#logs")

    page.fill("#sim-seed", "5")
    page.click("#sim-run")
    expect(page.locator("#sim-time")).to_contain_text("finished", timeout=WAIT)
    expect(page.locator("#sim-digest")).not_to_contain_text(digest[:16], timeout=WAIT)
    assert source.status().seed == 5
    crashed = page.locator('.cell.proc[data-proc="root:1.2"][data-state=failed]')
    expect(crashed).to_have_count(1, timeout=WAIT)  # seed 5 crashes the other proc
    screenshots(page, "2-another-seed")
