"""devstack's care for a newcomer: the previous run's log is kept, a taken port is one line and no traceback."""
from __future__ import annotations

import signal
import socket
import sys

import pytest

from devstack.__main__ import main as devstack_main
from devstack.process import ManagedProcess, port_is_free


def test_starting_keeps_the_previous_runs_log_as_dot_1(tmp_path):
    log = tmp_path / "shim.log"
    for run in ("first", "second", "third"):
        process = ManagedProcess("echo", [sys.executable, "-c", f"print('{run} run')"], {}, log, "http://unused")
        process.start().wait(10)
    assert log.read_text() == "third run\n"
    assert (tmp_path / "shim.log.1").read_text() == "second run\n"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["shim.log", "shim.log.1"]


@pytest.fixture
def taken_port():
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        yield listening.getsockname()[1]


def test_a_listening_port_is_not_free(taken_port):
    assert not port_is_free(taken_port)


def test_up_refuses_a_taken_port_with_one_line_naming_its_flag(taken_port, capsys, monkeypatch):
    monkeypatch.setattr(signal, "signal", lambda *args: None)  # leave pytest's SIGTERM handling alone
    assert devstack_main(["up", "--port", str(taken_port), "--metrics-port", "1", "--triton-http-port", "1",
                          "--triton-grpc-port", "1", "--triton-metrics-port", "1"]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "Traceback" not in error
    assert f"port {taken_port} (--port)" in error
    assert "port 1 (--triton-http-port)" in error  # the same port twice is a conflict too


def test_up_rejects_a_port_out_of_range_before_anything_starts(capsys):
    with pytest.raises(SystemExit) as exited:
        devstack_main(["up", "--port", "70000"])
    assert exited.value.code == 2 and "a port number 1..65535" in capsys.readouterr().err
