"""`python app/serve.py [streamlit run flags]`: `streamlit run dashboard.py`, with the dashboard's
modules imported and the shipped catalog opened while the browser loads Streamlit's front end.
`make run`, `llm-planner dashboard`, the browser tests and the page benchmark start the server
this way (app/local_server.py, planner/dashboard_cmd.py).

A first page costs its script run: importing pandas, the engine and the planner (~0.5 s on the
2-core machine of docs/performance.md) and building the catalog (~0.2 s) before any widget is
drawn. The browser meanwhile spends about a second on Streamlit's JavaScript, in its own process,
while the server waits. So a background thread does that work as soon as the server's runtime
exists: the first script run then finds the modules imported and the catalog built (Python's
import lock makes it wait for a module still being imported: never a half-imported one).

The server's own thread answers the browser's requests meanwhile; a shorter GIL switch interval
while the thread runs keeps those answers prompt (the thread is the only other Python work).
"""

from __future__ import annotations

import socket
import sys
import threading
import time
from pathlib import Path

DASHBOARD = Path(__file__).resolve().parent.parent / "dashboard.py"
# Seconds the thread waits at most for the server's runtime (then it gives up: nothing is lost
# but the head start).
WAIT_S = 30.0
# The GIL switch interval while the thread imports (Python's default: 5 ms).
SWITCH_S = 0.001


def _listening() -> bool:
    """Does the server accept connections yet (its start is left to run alone)."""
    from streamlit import config

    address = config.get_option("server.address") or "127.0.0.1"
    if address in ("0.0.0.0", "::"):  # every interface: this machine's own answers
        address = "127.0.0.1"
    try:
        with socket.create_connection((address, int(config.get_option("server.port"))), timeout=0.05):
            return True
    except OSError:
        return False


def _preload() -> None:
    from streamlit.runtime import Runtime

    deadline = time.monotonic() + WAIT_S
    while not (Runtime.exists() and _listening()):  # (caches made before the runtime would not be its own)
        if time.monotonic() > deadline:
            return
        time.sleep(0.01)
    before = sys.getswitchinterval()
    sys.setswitchinterval(SWITCH_S)
    try:
        from app import common, frame, tables  # noqa: F401  (what dashboard.py and the first page import)
        from catalog import default_catalog

        cat = default_catalog()  # the shipped catalog, built from its YAML when new
        cat.models()
        cat.gpus()
    except Exception:  # noqa: BLE001  (the page's own run reports any error as it would)
        pass
    finally:
        sys.setswitchinterval(before)


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    threading.Thread(target=_preload, name="preload", daemon=True).start()
    from streamlit.web import cli

    sys.argv = ["streamlit", "run", str(DASHBOARD), *args]
    return cli.main()


if __name__ == "__main__":
    if not __package__:  # run as a file: the folder holding app/, engine/, ... is the import root, not app/
        sys.path[0] = str(DASHBOARD.parent)
    sys.exit(main())
