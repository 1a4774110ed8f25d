"""`translator serve` as a subprocess on a free loopback port, for tests and benchmarks.

It imports no TensorFlow: the server process loads it, the caller only talks HTTP (or
gRPC, at `grpc_target`, with TF Serving's stubs).

    with ServerProcess(export_base, tmp / "serve.log", "--no-batching") as server:
        server.wait_ready()
        status, body = server.post("/v1/models/translator:predict", {"instances": ["Hi."]})
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on (at the time of the call)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ServerProcess:
    """`translator serve --model MODEL` in a subprocess, and a stdlib HTTP client for it.

    The server starts at once; call `wait_ready` before sending requests, and `stop` (or
    leave the `with` block) to end it.

    Args:
        model: The export base directory (or whatever `translator serve --model` takes).
        log_path: Where the server's stdout and stderr go.
        *options: More `translator serve` options, e.g. "--no-batching".
        cwd: The server's working directory (default: this process').
        env: Extra environment variables of the server (TensorFlow's C++ log level is 2
            unless given).
    """

    def __init__(
        self,
        model: str | os.PathLike[str],
        log_path: str | os.PathLike[str],
        *options: str,
        cwd: str | os.PathLike[str] | None = None,
        env: dict[str, str] | None = None,
    ):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = Path(log_path)
        # `python -m translator`, not the console script: the same interpreter and sys.path.
        command = [sys.executable, "-m", "translator", "serve", "--model", str(model)]
        command += ["--port", str(self.port), *options]
        # The gRPC API on a free port too (8500 may be taken), unless turned off.
        self.grpc_port = None
        while "--no-grpc" not in options and self.grpc_port in (None, self.port):
            self.grpc_port = free_port()
        if self.grpc_port is not None:
            command += ["--grpc-port", str(self.grpc_port)]
        # HOST:PORT of the gRPC API, as gRPC channels take it (None: REST only).
        self.grpc_target = None if self.grpc_port is None else f"127.0.0.1:{self.grpc_port}"
        self._log = open(self.log_path, "wb")  # noqa: SIM115 (open for the life of the process)
        environment = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", **(env or {})}
        self.process = subprocess.Popen(
            command, stdout=self._log, stderr=subprocess.STDOUT, cwd=cwd, env=environment
        )

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def log(self) -> str:
        """What the server has written so far."""
        return self.log_path.read_text("utf-8", errors="replace")

    def wait_ready(self, timeout: float = 180.0) -> None:
        """Waits until `/healthz` answers 200.

        Raises:
            RuntimeError: The server exited, or did not answer within `timeout` seconds;
                the message holds its log.
        """
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited with {self.process.returncode}:\n{self.log()}")
            try:
                if self.get("/healthz", timeout=2)[0] == 200:
                    return
            except OSError:  # not listening yet
                pass
            time.sleep(0.25)
        raise RuntimeError(f"server not ready after {timeout} s:\n{self.log()}")

    def request(
        self, method: str, path: str, body: bytes | None = None, timeout: float = 120
    ) -> tuple[int, Any]:
        """(status, parsed JSON body) of one request; HTTP errors are returned, not raised."""
        request = urllib.request.Request(self.url + path, data=body, method=method)
        if body is not None:
            request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as error:
            with error:
                return error.code, json.loads(error.read())

    def get(self, path: str, timeout: float = 120) -> tuple[int, Any]:
        """(status, JSON body) of a GET request."""
        return self.request("GET", path, timeout=timeout)

    def post(self, path: str, body: Any, timeout: float = 120) -> tuple[int, Any]:
        """(status, JSON body) of a POST of `body`: bytes as they are, else as JSON."""
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        return self.request("POST", path, data, timeout=timeout)

    def stop(self, timeout: float = 60) -> int:
        """Stops the server: SIGTERM, then a kill after `timeout` seconds.

        Returns:
            The server's exit code (0 for a clean shutdown on SIGTERM).
        """
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()
        return self.process.returncode
