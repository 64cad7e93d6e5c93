"""The system sampler, for real: this machine's psutil figures, and this process as the client."""

from __future__ import annotations

import socket
import threading
import time

import psutil
import pytest

from tokenrace.monitor import SystemSampler

FIELDS = {
    "cpu_pct",
    "mem_used_bytes",
    "mem_total_bytes",
    "net_rx_bytes_per_s",
    "net_tx_bytes_per_s",
    "net_loopback_bytes_per_s",
    "proc_cpu_pct",
    "proc_rss_bytes",
}


def test_a_real_sample_has_every_field_in_range() -> None:
    s = SystemSampler()
    s.open()
    time.sleep(0.2)
    x = s.sample().model_dump()
    assert set(x) == FIELDS
    assert x["mem_total_bytes"] == psutil.virtual_memory().total
    assert 0 < x["mem_used_bytes"] < x["mem_total_bytes"]
    assert 0.0 <= x["cpu_pct"] <= 100.0
    assert x["proc_rss_bytes"] > 10 * 2**20  # a Python process with psutil loaded
    for k in ("net_rx_bytes_per_s", "net_tx_bytes_per_s", "net_loopback_bytes_per_s"):
        assert x[k] is not None and x[k] >= 0.0


@pytest.mark.slow
def test_the_client_process_cpu_shows_a_busy_loop() -> None:
    s = SystemSampler()
    s.open()
    end = time.process_time() + 0.4  # 0.4 s of this process's own CPU, however busy the machine is
    while time.process_time() < end:
        pass
    x = s.sample().model_dump()
    # CPU time over wall time: a loaded 2-core machine may stretch the wall time, hence the low bar.
    assert x["proc_cpu_pct"] >= 10.0, x


def test_loopback_traffic_is_counted_apart_from_the_wire() -> None:
    """Push 32 MB through a localhost socket: the loopback rate must account for it."""
    payload = b"x" * (1 << 20)
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    received = 0

    def drain() -> None:
        nonlocal received
        conn, _ = server.accept()
        with conn:
            while chunk := conn.recv(1 << 16):
                received += len(chunk)

    reader = threading.Thread(target=drain)
    reader.start()
    s = SystemSampler()
    s.open()
    t0 = time.monotonic()
    with socket.create_connection(("127.0.0.1", port)) as c:
        for _ in range(32):
            c.sendall(payload)
    reader.join(10)
    server.close()
    x = s.sample().model_dump()
    elapsed = time.monotonic() - t0
    assert received == 32 * len(payload)
    # Other processes may use loopback too, so this is a lower bound (10 % slack for timing).
    assert x["net_loopback_bytes_per_s"] * elapsed >= 0.9 * received


def test_a_counter_that_went_backwards_is_unknown_not_zero() -> None:
    s = SystemSampler()
    s.open()
    assert s._last_net is not None
    t, rx, tx, lo = s._last_net
    s._last_net = (t - 1.0, rx + 10**12, tx, lo)  # as if the interface had been reset since
    x = s.sample().model_dump()
    assert x["net_rx_bytes_per_s"] is None and x["net_tx_bytes_per_s"] is not None


def test_before_open_there_is_no_rate() -> None:
    x = SystemSampler().sample().model_dump()
    assert x["net_rx_bytes_per_s"] is None and x["net_loopback_bytes_per_s"] is None
