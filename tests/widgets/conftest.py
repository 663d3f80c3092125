"""Fixtures for the window tests: an isolated settings store, a window, real tiny models."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QSettings

from tests.widgets.fakes import FakeEngine


@pytest.fixture
def store(tmp_path):
    """A settings file of this test only: never the user's real settings."""
    return QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)


@pytest.fixture
def make_window(qtbot, store):
    from app.launch import HistoryOutOfCollector
    from app.main_window import MainWindow

    windows = []

    def make(engine=None):
        window = MainWindow(settings=store, engine_process=False)  # in-process models, so tests can patch them
        HistoryOutOfCollector(window.session)  # the collector policy of the app's entry points
        qtbot.addWidget(window)
        window.show()  # offscreen: paints and lays out like a real session
        if engine is not None:
            window.set_engine(engine)
        windows.append(window)
        return window

    yield make
    for window in windows:
        window.shutdown()  # joins any thread a failing test left behind


@pytest.fixture
def fake_window(make_window):
    return make_window(FakeEngine())


@pytest.fixture(scope="session")
def tiny_engine(tiny_llama):
    """Real engine in this process on the tiny random llama pair."""
    from app.engine.engine import LocalEngine
    from app.engine.load_request import LoadRequest

    target, draft = tiny_llama
    return LocalEngine.load(LoadRequest(target=str(target), draft=str(draft), device="cpu", dtype="float32"))


@pytest.fixture
def real_window(make_window, tiny_engine):
    window = make_window(tiny_engine)
    window.controls.prompt.setPlainText("def add(a, b):")
    return window


@pytest.fixture(autouse=True)
def normal_theme():
    """Every test starts and ends in the normal theme: the theme hub is one per application."""
    from app.widgets.theme import theme_hub

    yield
    theme_hub().set_presentation(False)
    theme_hub().set_text_scale(1.0)
