"""app/serve.py, the dashboard's launcher: when its head start begins, and that it changes nothing
when the server never comes up. (That it serves the dashboard: the browser tests start every
server through it, app/local_server.py.)"""

from __future__ import annotations

import socket
import sys

from app import serve


def _option(port: int, address: str = ""):
    values = {"server.port": port, "server.address": address}
    return lambda name: values[name]


def test_the_head_start_waits_for_the_server_to_listen(monkeypatch):
    from streamlit import config

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        monkeypatch.setattr(config, "get_option", _option(port))
        assert serve._listening()
        monkeypatch.setattr(config, "get_option", _option(port, "0.0.0.0"))  # every interface: asked at 127.0.0.1
        assert serve._listening()
    monkeypatch.setattr(config, "get_option", _option(port))  # the port closed again
    assert not serve._listening()


def test_without_a_server_the_head_start_gives_up_and_leaves_the_interpreter_as_it_was(monkeypatch):
    from streamlit.runtime import Runtime

    monkeypatch.setattr(serve, "WAIT_S", 0.05)
    monkeypatch.setattr(Runtime, "exists", staticmethod(lambda: False))
    before = sys.getswitchinterval()
    serve._preload()
    assert sys.getswitchinterval() == before
