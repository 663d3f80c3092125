"""The decode settings the window runs with, owned in one place.

The drafter panel and the run controls describe a `DecodeSettings`; this
view-model turns what they describe into a validated value in the live
holder the engine reads at every pass, and tells the panel when a value is
invalid (shown inline, never raised). Settings that come from elsewhere (the
saved settings, a ready prompt, newly loaded models) go into the panels
through `show`, which emits nothing, and are pushed once.
"""

from __future__ import annotations

from PySide6.QtCore import QObject, Signal

from app.engine.engine import ModelsSummary
from app.engine.settings import DecodeSettings, LiveSettings, SettingsError
from app.widgets.controls import ControlsPanel
from app.widgets.drafter_panel import DrafterPanel


class SettingsModel(QObject):
    sig_invalid = Signal(object)  # str: why the panels describe no valid settings; None once they do

    def __init__(self, drafters: DrafterPanel, controls: ControlsPanel, parent=None) -> None:
        super().__init__(parent)
        self.live = LiveSettings()
        self._drafters = drafters
        self._controls = controls
        self._wanted: DecodeSettings | None = None  # saved settings waiting for models that offer their drafters
        drafters.sig_changed.connect(self.push)
        controls.sig_changed.connect(self.push)
        self.sig_invalid.connect(drafters.show_error)

    def current(self) -> DecodeSettings:
        """The settings the panels describe; raises SettingsError."""
        base = self._drafters.settings_from(self.live.get())
        return base.with_changes(max_new_tokens=self._controls.max_tokens.value(), seed=self._controls.seed.value())

    def push(self) -> DecodeSettings | None:
        """Write the panels' settings into the live holder; None (and the reason shown inline) if invalid."""
        try:
            settings = self.current()
        except SettingsError as error:
            self.sig_invalid.emit(str(error))
            return None
        self.live.set(settings)
        self.sig_invalid.emit(None)  # after the live value changed: listeners read the new one
        return settings

    def flush(self) -> DecodeSettings | None:
        """Push now, with any edit the panel still holds back (right before a run starts)."""
        self._drafters.flush()
        return self.push()

    def restore(self, settings: DecodeSettings) -> None:
        """Saved settings: live at once, and kept for the drafters the next models offer."""
        self.live.set(settings)
        self._wanted = settings
        self._drafters.apply(settings)
        self._controls.max_tokens.setValue(settings.max_new_tokens)
        self._controls.seed.setValue(settings.seed)

    def offer_models(self, summary: ModelsSummary) -> bool:
        """Offer these models' drafters, keep the wanted set-up where they allow it, and push once.

        Saved settings keep their repetition controls; otherwise the controls take what the models suggest
        (their family's playground.json; off for other models). True when they took a suggestion that is on.
        """
        saved, self._wanted = self._wanted, None
        wanted = saved or self.live.get().with_changes(repetition=summary.suggested_repetition)
        self._drafters.set_available(summary.available_drafters, summary.num_layers, summary.default_exit_layer)
        self._drafters.apply(wanted)
        self.push()
        return saved is None and summary.suggested_repetition.active

    def use(self, **changes) -> DecodeSettings | None:
        """The live settings with these changes (a ready prompt's set-up), shown and pushed; None if invalid.

        An ASD set-up turns a token tree off (ASD is a chain rule); the panel keeps its toggle for later."""
        if changes.get("verify") == "asd":
            changes.setdefault("tree", None)
        try:
            settings = self.live.get().with_changes(**changes)
        except SettingsError as error:
            self.sig_invalid.emit(str(error))
            return None
        self._drafters.apply(settings)
        return self.push()
