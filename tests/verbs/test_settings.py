"""The verbs settings come from each process's environment, checked."""

from __future__ import annotations

import pytest

import danaus
from danaus.core.settings import Settings


def test_the_environment_chooses_the_device_and_its_timeouts():
    settings = Settings.from_environment(
        {
            "DANAUS_VERBS_PROVIDER": "emulated",
            "DANAUS_VERBS_DEVICE": "mlx5_1",
            "DANAUS_VERBS_PORT": "2",
            "DANAUS_VERBS_GID_INDEX": "3",
            "DANAUS_VERBS_TIMEOUT": "14",
            "DANAUS_VERBS_RETRY_COUNT": "5",
            "DANAUS_VERBS_CACHE_BYTES": "1024",
        }
    )
    chosen = (
        settings.verbs_provider,
        settings.verbs_device,
        settings.verbs_port,
        settings.verbs_gid_index,
        settings.verbs_timeout,
        settings.verbs_retry_count,
        settings.verbs_cache_bytes,
    )
    assert chosen == ("emulated", "mlx5_1", 2, 3, 14, 5, 1024)
    assert Settings.from_environment({}) == Settings()


@pytest.mark.parametrize(
    ("name", "value", "error"),
    [
        ("DANAUS_VERBS_PROVIDER", "rxe", "must be one of pyverbs, emulated"),
        ("DANAUS_VERBS_PORT", "one", "is not an int"),
        ("DANAUS_VERBS_TIMEOUT", "40", "must be from 1 to 31"),
        ("DANAUS_VERBS_RETRY_COUNT", "8", "must be from 0 to 7"),
    ],
)
def test_a_wrong_variable_is_named_at_configure(monkeypatch, name, value, error):
    monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=f"{name}.*{error}"):
        danaus.configure(transport="verbs")
