"""A worker's Release refuses, where it is raised, a reason the server would refuse."""

from __future__ import annotations

import pytest

from tether import Release, _codes


def test_a_release_reason_of_the_servers_own_is_refused_here():
    assert _codes.SERVER_RELEASE_REASONS  # generated from the server's list (transport/wire)
    for reason in _codes.SERVER_RELEASE_REASONS:
        with pytest.raises(ValueError, match=reason):
            Release("x", reason=reason)
    assert Release("x", reason="gpu_busy").reason == "gpu_busy"
