"""``danaus top``: a live terminal view of a running job (textual).

It asks the job's controller for a snapshot every ``interval`` seconds (in a
thread, so the screen never waits on the job) and shows the `TopModel`'s rows:
hosts, procs, actor meshes, actors, failures and ranks stopped at
``breakpoint()``. Keys: ``q`` quits, ``p`` pauses and resumes the refresh,
``s`` shows the Python stack of every thread of the proc under the cursor of
the procs table (`danaus.admin.stacks`; ``escape`` goes back).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import DataTable, Footer, Header, Label, Static

from danaus.admin.model import TopModel
from danaus.admin.stacks import format_stacks
from danaus.admin.views import JobView, StacksView

INTERVAL = 1.0
"""Seconds between snapshots."""

Source = Callable[[], JobView]
"""Where snapshots come from: the admin socket, or anything that makes `JobView` s."""
StacksSource = Callable[[str], StacksView]
"""Where a proc's stacks come from, by proc id."""

TABLES: dict[str, tuple[str, ...]] = {
    "hosts": ("host", "procs", "actors", "CPU %", "RSS MiB"),
    "procs": ("proc", "host", "pid", "CPU %", "RSS MiB", "actors", "mailbox", "msg/s", "status"),
    "meshes": ("mesh", "id", "class", "members", "states", "mailbox", "msg/s"),
    "actors": ("actor", "rank", "proc", "state", "mailbox", "msg/s", "running"),
    "failures": ("age s", "proc", "what", "cause"),
    "sessions": ("session", "actor", "rank", "proc", "endpoint", "stopped at"),
}


def rows(model: TopModel, table: str) -> list[tuple[Any, ...]]:
    """The cells of one of `TABLES`, from ``model``."""
    if table == "hosts":
        return [
            (h.host, h.procs, h.actors, f"{h.cpu_percent:.0f}", f"{h.rss_mib:.0f}")
            for h in model.hosts()
        ]
    if table == "procs":
        return [
            (
                p.proc,
                p.host,
                p.pid if p.pid is not None else "",
                f"{p.cpu_percent:.0f}",
                f"{p.rss_mib:.0f}",
                p.actors,
                p.mailbox,
                f"{p.messages_per_s:.0f}",
                "ok" if p.answered else "NOT ANSWERING",
            )
            for p in model.procs()
        ]
    if table == "meshes":
        return [
            (m.mesh, m.mesh_id, m.class_name, m.members, m.states, m.mailbox, f"{m.rate:.0f}")
            for m in model.meshes()
        ]
    if table == "actors":
        return [
            (a.actor, a.rank, a.proc, a.state, a.mailbox, f"{a.messages_per_s:.0f}", a.running)
            for a in model.actors()
        ]
    if table == "failures":
        return [(f"{f.age_s:.0f}", f.proc, f.what, f.cause) for f in model.failures()]
    return [
        (s.id, s.actor_id, s.rank, s.proc, s.method or "", s.location) for s in model.sessions()
    ]


class StacksScreen(ModalScreen[None]):
    """One proc's stacks, over the tables until ``escape``."""

    BINDINGS: ClassVar[list[Binding]] = [Binding("escape", "app.pop_screen", "back")]
    DEFAULT_CSS = """
    StacksScreen { align: center middle; }
    StacksScreen > VerticalScroll { width: 95%; height: 90%; border: round $accent; }
    """

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(self.text, id="stacks", markup=False)
        yield Footer()


class TopApp(App[None]):
    """The terminal view; ``source`` gives one snapshot per call, ``stacks`` a proc's stacks."""

    TITLE = "danaus top"
    CSS = """
    #summary { padding: 0 1; background: $boost; }
    .title { padding: 1 1 0 1; text-style: bold; }
    DataTable { height: auto; max-height: 20; }
    """
    BINDINGS: ClassVar[list[Binding]] = [
        Binding("q", "quit", "quit"),
        Binding("p", "pause", "pause/resume"),
        Binding("s", "stacks", "stacks of the proc under the cursor"),
    ]

    def __init__(
        self, source: Source, interval: float = INTERVAL, stacks: StacksSource | None = None
    ) -> None:
        super().__init__()
        self.source = source
        self.stacks = stacks
        self.interval = interval
        self.model = TopModel()
        self.paused = False
        self.error: str | None = None

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static("connecting...", id="summary")
        with VerticalScroll():
            for name, columns in TABLES.items():
                yield Label(name, classes="title")
                table: DataTable[Any] = DataTable(id=name, zebra_stripes=True)
                table.add_columns(*columns)
                yield table
        yield Footer()

    def on_mount(self) -> None:
        self.fetch()
        self.set_interval(self.interval, self.fetch)

    def action_pause(self) -> None:
        self.paused = not self.paused
        self.query_one("#summary", Static).update(
            "paused (p resumes)" if self.paused else self.model.summary()
        )

    def action_stacks(self) -> None:
        """Ask for the stacks of the proc under the procs table's cursor, off the screen thread."""
        table = self.query_one("#procs", DataTable)
        if self.stacks is None or table.row_count == 0:
            return
        proc = str(table.get_row_at(table.cursor_row)[0])
        self.run_worker(lambda: self._fetch_stacks(proc), thread=True, group="stacks")

    def _fetch_stacks(self, proc: str) -> None:
        assert self.stacks is not None
        try:
            text = format_stacks(self.stacks(proc))
        except Exception as exc:
            text = f"no stacks of proc {proc}: {exc}"
        self.call_from_thread(self.push_screen, StacksScreen(text))

    def fetch(self) -> None:
        """Ask for a snapshot off the screen's thread; one at a time."""
        if not self.paused:
            self.run_worker(self._fetch, thread=True, exclusive=True, group="fetch")

    def _fetch(self) -> None:
        try:
            view = self.source()
        except Exception as exc:
            self.call_from_thread(self._failed, f"no snapshot: {exc}")
        else:
            self.call_from_thread(self.show, view)

    def _failed(self, message: str) -> None:
        self.error = message
        self.query_one("#summary", Static).update(message)

    def show(self, view: JobView) -> None:
        """Take ``view`` into the model and redraw every table."""
        self.error = None
        self.model.update(view)
        self.query_one("#summary", Static).update(self.model.summary())
        for name in TABLES:
            self._fill(self.query_one(f"#{name}", DataTable), rows(self.model, name))

    @staticmethod
    def _fill(table: DataTable[Any], cells: Sequence[tuple[Any, ...]]) -> None:
        table.clear()
        for row in cells:
            table.add_row(*(str(c) for c in row))
