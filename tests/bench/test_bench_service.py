"""Smoke test of bench/service_spread.py (early approval across a service, against Azurite): it
runs in its ``--quick`` mode and prints its table; the figures are checked to be there and to say
what the policy guarantees (never more than N, one zone at a time), not timed."""

from __future__ import annotations

import pytest
from helpers.benchrun import row, run_bench

pytestmark = [pytest.mark.e2e, pytest.mark.bench, pytest.mark.tls]


@pytest.mark.timeout(180)
def test_service_spread_quick() -> None:
    out = run_bench("service_spread.py")
    last, _vs, most, zones, _requests = row(out, "baseline (at NotBefore)")
    assert (int(most), int(zones)) == (4, 2) and float(last) >= 900, out
    last_policy, vs, most, zones, requests = row(out, 'approve = "service"')
    assert int(most) <= 2 and int(zones) == 1 and int(requests) > 0, out
    assert float(last_policy) < float(last) and float(vs) < 0, out
