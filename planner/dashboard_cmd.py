"""`llm-planner dashboard`: Streamlit on the dashboard.py beside this package, in the checkout
as in site-packages (pyproject.toml installs dashboard.py, app/ and pages/ side by side, the
layout app/frame.py and dashboard.py's st.Page paths assume), so it runs from any folder.

It runs `python app/serve.py` (`streamlit run dashboard.py` with the dashboard's imports done
while the browser loads; exec'd in place on POSIX, a child process elsewhere): the
planner layer never imports streamlit (tests/test_layers.py). The dashboard's settings, .streamlit/config.toml in the
checkout, are passed as flags, since Streamlit reads that file only from the working folder
or beside the script (tests/test_install.py checks SETTINGS is that file).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

DASHBOARD = Path(__file__).resolve().parent.parent / "dashboard.py"
LAUNCHER = DASHBOARD.parent / "app" / "serve.py"  # runs DASHBOARD (app/serve.py)
# .streamlit/config.toml, flattened (section.key)
SETTINGS = {
    "theme.base": "light",
    "theme.primaryColor": "#2563eb",
    "theme.backgroundColor": "#ffffff",
    "theme.secondaryBackgroundColor": "#f3f6fb",
    "theme.textColor": "#1f2937",
    "theme.font": "sans serif",
    "browser.gatherUsageStats": False,
    "client.toolbarMode": "minimal",
}


def _flag_value(value) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def streamlit_command(port: int = 8501, address: str | None = None, extra: list[str] | None = None) -> list[str]:
    """The child's command line: headless (no browser opened, no first-run prompt; Streamlit
    prints the URL), as `make run` starts it."""
    cmd = [sys.executable, str(LAUNCHER), "--server.port", str(port), "--server.headless", "true"]
    if address:
        cmd += ["--server.address", address]
    for key, value in SETTINGS.items():
        cmd += [f"--{key}", _flag_value(value)]
    extra = list(extra or [])
    if extra[:1] == ["--"]:
        extra = extra[1:]
    return cmd + extra


def run_dashboard(port: int = 8501, address: str | None = None, extra: list[str] | None = None) -> int:
    if not DASHBOARD.is_file():
        raise ValueError(f"dashboard {DASHBOARD} is not a file; accepted: an installed llm-hardware-planner "
                         "(pip install .) or the checkout")
    cmd = streamlit_command(port, address, extra)
    sys.stdout.flush()
    if os.name == "posix":  # become the server: a signal (Ctrl-C, a service manager's TERM) reaches it
        os.execv(cmd[0], cmd)
    try:
        return subprocess.call(cmd)
    except KeyboardInterrupt:  # Ctrl-C reaches the child too, which stops the server
        return 130
