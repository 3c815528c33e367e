"""Large messages take UCX only where it has an RDMA device to beat the stream plane with."""

from __future__ import annotations

from pathlib import Path

import pytest

from danaus.core.settings import Settings
from danaus.transports.ucx.fabric import BulkRoutes, bulk_routes, rdma_devices, ucx_may_use_rdma


@pytest.fixture
def with_device(tmp_path: Path) -> Path:
    """A sysfs directory that shows one RDMA device."""
    (tmp_path / "mlx5_0").mkdir()
    return tmp_path


def test_no_directory_or_an_empty_one_is_no_rdma_device(tmp_path: Path) -> None:
    assert rdma_devices(tmp_path / "absent") == []
    assert rdma_devices(tmp_path) == []
    assert not ucx_may_use_rdma({}, tmp_path)


@pytest.mark.parametrize(
    ("tls", "usable"),
    [
        (None, True),
        ("all", True),
        ("rc,sm,self", True),
        ("^tcp", True),
        ("ib", True),
        ("tcp,sm,self", False),
        (" tcp , cuda_copy ,cuda_ipc", False),
    ],
)
def test_a_device_counts_unless_ucx_tls_names_only_transports_without_rdma(
    with_device: Path, tls: str | None, usable: bool
) -> None:
    environ = {} if tls is None else {"UCX_TLS": tls}
    assert ucx_may_use_rdma(environ, with_device) is usable


def test_by_default_large_messages_take_ucx_only_to_other_hosts_and_only_over_rdma(
    with_device: Path, tmp_path: Path
) -> None:
    assert bulk_routes("auto", {}, with_device) == BulkRoutes(False, True, "")
    without = bulk_routes("auto", {}, tmp_path / "absent")
    assert (without.on_this_host, without.between_hosts) == (False, False)
    assert "no RDMA device" in without.why


def test_bulk_ucx_sends_every_large_message_over_ucx(tmp_path: Path) -> None:
    assert bulk_routes("ucx", {}, tmp_path) == BulkRoutes(True, True, "")


def test_an_unknown_setting_is_refused_with_what_is_expected() -> None:
    expected = r"DANAUS_UCX_BULK='rdma': ucx_bulk must be one of auto, ucx"
    with pytest.raises(ValueError, match=expected):
        Settings.from_environment({"DANAUS_UCX_BULK": "rdma"})
