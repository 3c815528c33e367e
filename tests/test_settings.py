"""Settings: one typed struct, ``configure``'s keywords, and the one reader of the environment."""

from __future__ import annotations

import ast
import inspect
import math
from collections.abc import Collection
from pathlib import Path

import msgspec
import pytest

import danaus
from danaus.core import config
from danaus.core.settings import FIELDS, JobOptions, Limits, Settings, variable
from danaus.transports.tcp.bootstrap import Bootstrap

PACKAGE = Path(danaus.__file__).parent

DOCUMENTED = [
    ("DANAUS_TRANSPORT", "sim", "transport", "sim"),
    ("DANAUS_CAST_FANOUT", "3", "cast_fanout", 3),
    ("DANAUS_MAX_MESSAGE_BYTES", "8388608", "max_message_bytes", 8 << 20),
    ("DANAUS_FRAME_BYTES", "65536", "frame_bytes", 1 << 16),
    ("DANAUS_HANDSHAKE_TIMEOUT", "0.5", "handshake_timeout", 0.5),
    ("DANAUS_MAX_PENDING_HANDSHAKES", "7", "max_pending_handshakes", 7),
    ("DANAUS_MAX_PROCS_PER_HOST", "9", "max_procs_per_host", 9),
    ("DANAUS_BIND_HOST", "10.0.0.1", "bind_host", "10.0.0.1"),
    ("DANAUS_WORKERS", "10.0.0.2, 10.0.0.3", "workers", ("10.0.0.2", "10.0.0.3")),
    ("DANAUS_JOB_KEY", "k" * 40, "job_key", "k" * 40),
    ("DANAUS_JOB_KEY_FILE", "/keys/job.key", "job_key_file", "/keys/job.key"),
    ("DANAUS_PRELOAD", "torch,numpy", "preload", ("torch", "numpy")),
    ("DANAUS_TRACE", "run.json:run.html", "trace", "run.json:run.html"),
    ("DANAUS_LOG_LEVEL", "DEBUG", "log_level", "DEBUG"),
    ("DANAUS_SCHEDULE_SEED", "17", "schedule_seed", 17),
    ("DANAUS_TRACE_DIR", "/tmp/traces", "trace_dir", "/tmp/traces"),
    ("DANAUS_PROGRESS", "0", "progress", False),
    ("DANAUS_JOBS_DIR", "/run/jobs", "jobs_dir", "/run/jobs"),
    ("DANAUS_CACHE_DIR", "/cache", "cache_dir", "/cache"),
    ("DANAUS_UCX_BULK", "ucx", "ucx_bulk", "ucx"),
    ("DANAUS_UCX_RMA", "off", "ucx_rma", False),
    ("DANAUS_VERBS_PROVIDER", "emulated", "verbs_provider", "emulated"),
    ("DANAUS_VERBS_DEVICE", "mlx5_1", "verbs_device", "mlx5_1"),
    ("DANAUS_VERBS_PORT", "2", "verbs_port", 2),
    ("DANAUS_VERBS_GID_INDEX", "3", "verbs_gid_index", 3),
    ("DANAUS_VERBS_TIMEOUT", "14", "verbs_timeout", 14),
    ("DANAUS_VERBS_RETRY_COUNT", "5", "verbs_retry_count", 5),
    ("DANAUS_VERBS_CACHE_BYTES", "1024", "verbs_cache_bytes", 1024),
    ("DANAUS_OBSERVER", "danaus.otel", "observer", "danaus.otel"),
    ("DANAUS_OTEL_EXPORTER", "console", "otel_exporter", "console"),
    ("DANAUS_WAIT_SPIN_US", "50", "wait_spin_us", 50),
]
"""Every variable the package read before it had settings, and those it reads now by the rule."""


@pytest.fixture(autouse=True)
def _forget_configure(monkeypatch):
    """``configure`` here only checks settings; the next test starts with the settings it had."""
    monkeypatch.setattr(config, "_given", config._given)


@pytest.mark.parametrize(("name", "text", "field", "value"), DOCUMENTED)
def test_each_variable_sets_its_field(name: str, text: str, field: str, value: object) -> None:
    assert variable(field) == name
    assert getattr(Settings.from_environment({name: text}), field) == value
    assert Settings.read(field, {name: text}) == value
    assert getattr(Settings.from_environment({}), field) == Settings.read(field, {})


def test_configure_wins_over_the_environment_which_wins_over_the_default(monkeypatch):
    assert config.setting("heartbeat_timeout") == JobOptions().heartbeat_timeout == 3.0
    monkeypatch.setenv("DANAUS_HEARTBEAT_TIMEOUT", "10")
    monkeypatch.setenv("DANAUS_WAIT_SPIN_US", "50")
    assert config.settings().heartbeat_timeout == 10.0
    danaus.configure(transport="tcp", heartbeat_timeout=20.0)
    chosen = config.settings()
    assert (chosen.heartbeat_timeout, chosen.wait_spin_us) == (20.0, 50)
    assert config.setting("heartbeat_timeout") == 20.0


def test_configure_takes_the_fields_of_the_settings_as_typed_keywords():
    parameters = inspect.signature(danaus.configure).parameters
    assert list(parameters) == list(FIELDS)
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in parameters.values())
    assert parameters["wait_spin_us"].annotation is int
    assert parameters["wait_spin_us"].default == 200


def test_the_settings_hold_the_job_options_which_hold_the_limits():
    assert set(Limits.__struct_fields__) < set(JobOptions.__struct_fields__) < set(FIELDS)
    settings = Settings(wait_spin_us=7, bind_host="10.0.0.1", frame_bytes=1 << 16)
    options = settings.job_options()
    assert type(options) is JobOptions
    assert (options.wait_spin_us, options.frame_bytes) == (7, 1 << 16)


def test_the_job_options_travel_whole_in_a_bootstrap():
    options = JobOptions(wait_spin_us=7, preload=("torch",), trace="run.json", log_level="DEBUG")
    boot = Bootstrap("p", "n", "h", "a", "c", b"k", b"s", 1, [], "/", "127.0.0.1", options=options)
    assert Bootstrap.decode(boot.encode()).options == options


@pytest.mark.parametrize(
    ("fields", "error", "message"),
    [
        ({"wait_spin_us": "200"}, TypeError, "wait_spin_us must be an int, not '200'"),
        ({"hosts": True, "transport": "sim"}, TypeError, "hosts must be an int, not True"),
        ({"workers": "10.0.0.2:1"}, TypeError, "workers must be a list of str"),
        ({"host_control": 3}, TypeError, "host_control must be HostControl or None"),
        ({"job_key": 3}, TypeError, "job_key must be the key's text or a path"),
        ({"wait_spin_us": -1}, ValueError, "wait_spin_us must be from 0 to 100000, not -1"),
        ({"transport": "pigeon"}, ValueError, "unknown transport 'pigeon'"),
    ],
)
def test_a_bad_value_is_refused_naming_its_setting(fields, error, message):
    with pytest.raises(error, match=message):
        danaus.configure(**{"transport": "tcp", **fields})


def test_a_setting_the_transport_does_not_take_names_configure_and_what_it_takes():
    with pytest.raises(TypeError) as raised:
        danaus.configure(transport="sim", heartbeat_interval=1.0)
    message = str(raised.value)
    assert message.startswith("configure(): transport 'sim' has no option 'heartbeat_interval'")
    assert "hosts" in message and "cast_fanout" in message


def test_a_bad_variable_is_named_with_its_value():
    with pytest.raises(ValueError, match="DANAUS_WAIT_SPIN_US='fast' is not an int"):
        Settings.from_environment({"DANAUS_WAIT_SPIN_US": "fast"})
    with pytest.raises(ValueError, match="DANAUS_HOSTS='0': hosts must be at least 1"):
        Settings.from_environment({"DANAUS_HOSTS": "0"})


def test_an_unset_or_empty_variable_leaves_the_default():
    assert Settings.from_environment({"DANAUS_HOSTS": ""}) == Settings()
    assert Settings().time_limit == math.inf


def _field_docstrings() -> dict[str, str]:
    tree = ast.parse((PACKAGE / "core" / "settings.py").read_text())
    docs = {}
    for cls in (node for node in tree.body if isinstance(node, ast.ClassDef)):
        for field, doc in zip(cls.body, cls.body[1:]):
            if isinstance(field, ast.AnnAssign) and isinstance(doc, ast.Expr):
                docs[field.target.id] = doc.value.value  # type: ignore[union-attr,attr-defined]
    return docs


def test_the_reference_gives_each_field_its_variable():
    docs = _field_docstrings()
    assert set(docs) == set(FIELDS)
    for field, doc in docs.items():
        if field in ("network", "host_control"):
            assert "No environment variable" in doc
        else:
            assert f"``{variable(field)}``" in doc, field


def _danaus_names(tree: ast.AST) -> set[str]:
    """The names a module binds to a ``DANAUS_`` string (``KEY_ENV = "DANAUS_KEY"``)."""
    return {
        target.id
        for node in ast.walk(tree)
        if isinstance(node, (ast.Assign, ast.AnnAssign))
        and isinstance(node.value, ast.Constant)
        and str(node.value.value).startswith("DANAUS_")
        for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(target, ast.Name)
    }


def _reads_a_danaus_variable(node: ast.AST, names: Collection[str] = ()) -> bool:
    """Whether ``node`` reads the environment (``os.environ.get``, ``os.environ[...]``,
    ``os.getenv``) for a name that is a ``DANAUS_`` string, one of ``names`` (bound to one)
    or made by ``variable()``."""
    if isinstance(node, ast.Call) and ast.unparse(node.func).endswith(("environ.get", "getenv")):
        key = node.args[0] if node.args else None
    elif (
        isinstance(node, ast.Subscript)
        and isinstance(node.ctx, ast.Load)
        and ast.unparse(node.value).endswith("environ")
    ):
        key = node.slice
    else:
        return False
    text = ast.unparse(key) if key is not None else ""
    return "DANAUS_" in text or text.startswith("variable(") or text in names


def _readers() -> set[str]:
    readers = set()
    for path in PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text())
        names = _danaus_names(tree)
        if any(_reads_a_danaus_variable(node, names) for node in ast.walk(tree)):
            readers.add(str(path.relative_to(PACKAGE)))
    return readers


def test_no_module_but_the_settings_reads_a_danaus_variable():
    # A proc started with another Python learns which from its parent (`with_python`): not a
    # setting.
    assert _readers() == {"core/settings.py", "core/bootstrap.py"}


def test_the_checker_sees_the_ways_of_reading_a_variable():
    for source in (
        "os.environ.get('DANAUS_X')",
        "os.environ['DANAUS_X']",
        "os.getenv('DANAUS_X', '')",
        "os.environ.get(variable('x'))",
    ):
        assert _reads_a_danaus_variable(ast.parse(source).body[0].value)  # type: ignore[attr-defined]
    assert not _reads_a_danaus_variable(ast.parse("os.environ.get('HOME')").body[0].value)  # type: ignore[attr-defined]
    tree = ast.parse("KEY = 'DANAUS_X'\nos.environ.get(KEY)")
    assert _danaus_names(tree) == {"KEY"}
    assert _reads_a_danaus_variable(tree.body[1].value, _danaus_names(tree))  # type: ignore[attr-defined]


def test_settings_compare_and_replace_as_structs():
    settings = Settings()
    assert msgspec.structs.replace(settings, hosts=2).hosts == 2
    assert settings.given(hosts=2) == Settings(hosts=2)
