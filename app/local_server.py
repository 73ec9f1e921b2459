"""The dashboard as a real server on this machine, for the browser test and the page benchmark.

`running_dashboard()` starts `streamlit run dashboard.py` on a free localhost port, waits until
/_stcore/health answers, yields the URL and always stops the server. `launch_chromium()` starts
Debian's Chromium (/usr/bin/chromium) through Playwright, which cannot download a browser here.
Nothing in the dashboard itself imports this module.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DASHBOARD = ROOT / "dashboard.py"
LAUNCHER = ROOT / "app" / "serve.py"  # streamlit run dashboard.py, its imports done while the browser loads
CHROMIUM = Path("/usr/bin/chromium")
# the app's root element once a script run has finished
IDLE = "[data-testid='stApp'][data-test-script-state='notRunning']"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]


class DashboardDidNotStart(RuntimeError):
    """The server exited or did not answer in time; the message ends with its log."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _log_tail(log) -> str:
    log.seek(0)
    return log.read().decode(errors="replace")[-3000:]


@contextlib.contextmanager
def running_dashboard(env: Mapping[str, str], timeout_s: float = 60.0, poll_s: float = 0.2) -> Iterator[str]:
    """`streamlit run dashboard.py` with `env`, answering on the yielded http://127.0.0.1:<port>.

    Raises DashboardDidNotStart if the server exits or /_stcore/health does not answer within
    timeout_s; polls it every poll_s seconds."""
    port = free_port()
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(
            [sys.executable, str(LAUNCHER), "--server.port", str(port),
             "--server.address", "127.0.0.1", "--server.headless", "true", "--browser.gatherUsageStats", "false",
             "--server.fileWatcherType", "none", "--server.runOnSave", "false"],
            cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=dict(env))
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + timeout_s
            while True:
                if proc.poll() is not None:
                    raise DashboardDidNotStart(f"streamlit exited with {proc.returncode}:\n{_log_tail(log)}")
                try:
                    with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as resp:
                        if resp.status == 200:
                            break
                except OSError:
                    pass
                if time.monotonic() > deadline:
                    raise DashboardDidNotStart(f"streamlit did not answer /_stcore/health within {timeout_s:g} s:\n"
                                               + _log_tail(log))
                time.sleep(poll_s)  # polling the health endpoint, not waiting on the UI
            yield url
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)


def launch_chromium(playwright):
    """Debian's Chromium through Playwright (`playwright install` cannot download here)."""
    return playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
