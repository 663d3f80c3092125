"""Choose a target and a drafter (preset, hub id or local folder), published checkpoints for the learned drafters
(drafter_checkpoints.py), a device, a dtype and how they run.

The dialog does not load anything itself: it emits `sig_load_requested` and
the window starts a `ModelLoadThread`, which the dialog then watches for
progress and errors. A failed load leaves the dialog open with the message,
and the window keeps the models it had. While a load runs, Cancel (or Escape,
or closing the dialog) cancels it: the window keeps its models, and the dialog
becomes editable again with the entries as they were.
"""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.engine.load_request import LoadRequest
from app.engine.runtime.execution import default_words
from app.widgets.drafter_checkpoints import DrafterCheckpoints

CUSTOM = "custom"
PRESETS = (
    # label, target, drafter (None target = the bundled demo family)
    ("Bundled demo family (offline)", None, None),
    ("SmolLM2-1.7B-Instruct ← SmolLM2-135M-Instruct (hub)",
     "HuggingFaceTB/SmolLM2-1.7B-Instruct", "HuggingFaceTB/SmolLM2-135M-Instruct"),
    ("Qwen2.5-3B-Instruct ← Qwen2.5-0.5B-Instruct (hub)", "Qwen/Qwen2.5-3B-Instruct", "Qwen/Qwen2.5-0.5B-Instruct"),
    ("Custom: hub id or local folder", CUSTOM, CUSTOM),
)
DEVICES = ("auto", "cpu", "cuda", "mps")
DTYPES = ("auto", "float32", "bfloat16", "float16")
# How the models run (engine/runtime/execution.py): the label shown, the request's value (None: the device's default).
CACHES = ((f"auto ({default_words(0)})", None), ("dynamic", "dynamic"), ("static", "static"))
COMPILE = ((f"auto ({default_words(1)})", None), ("on", True), ("off", False))
TARGET_HINT = "hub id (org/name) or local folder"
# What "auto" resolves to once the other choice is made (resolve_execution): compiling takes the static cache,
# and the dynamic cache is never compiled.
CACHE_AUTO_COMPILED = "auto (static: compiling needs it)"
COMPILE_AUTO_DYNAMIC = "auto (off: the dynamic cache is not compiled)"


class ModelDialog(QDialog):
    sig_load_requested = Signal(object)  # LoadRequest

    def __init__(self, parent=None, current: LoadRequest | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Models")
        self.setMinimumWidth(560)
        self._thread = None
        self._build()
        self.set_request(current or LoadRequest())

    # --- construction ----------------------------------------------------------------
    def _build(self) -> None:
        self.preset = QComboBox()
        for label, target, draft in PRESETS:
            self.preset.addItem(label, (target, draft))
        self.preset.currentIndexChanged.connect(self._preset_chosen)
        self.target = QLineEdit()
        self.target.setPlaceholderText(TARGET_HINT)
        self.draft = QLineEdit()
        self.draft.setPlaceholderText("optional: drafter hub id or folder (same tokenizer)")
        for edit in (self.target, self.draft):
            edit.textEdited.connect(self._typed)  # typing a model of one's own is choosing "Custom"
        self.device = _combo(DEVICES)
        self.dtype = _combo(DTYPES)
        self.cache = _choices(CACHES, "dynamic: the KV cache grows and is cropped; static: preallocated, rolled back "
                                      "by moving its write position (fixed shapes, needed to compile)")
        self.compile = _choices(COMPILE, "compile the one-token and verification forwards with torch.compile "
                                         "(CUDA graphs on a GPU; needs the static cache), every shape while the "
                                         "models load (minutes on a CPU, far less the next time); a failure falls "
                                         "back to eager forwards with a notice. Dynamic cache with compiling off: "
                                         "eager forwards, loaded in seconds")
        for combo in (self.cache, self.compile):
            combo.currentIndexChanged.connect(self._auto_words)
        form = QFormLayout()
        form.addRow("Preset", self.preset)
        target_row, self.target_browse = _with_browse(self.target, self._browse_into)
        draft_row, self.draft_browse = _with_browse(self.draft, self._browse_into)
        form.addRow("Target", target_row)
        form.addRow("Drafter", draft_row)
        self.checkpoints = DrafterCheckpoints()  # published EAGLE-3 / Medusa ... checkpoints for the target
        for label, field in self.checkpoints.rows():
            form.addRow(label, field)
        form.addRow("Device", self.device)
        form.addRow("Dtype", self.dtype)
        form.addRow("KV cache", self.cache)
        form.addRow("Compile", self.compile)
        self.progress = QProgressBar()
        self.progress.hide()
        self.message = QLabel()
        self.message.setObjectName("loadMessage")
        self.message.setWordWrap(True)
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        self.close_button = self.buttons.button(QDialogButtonBox.StandardButton.Close)
        self.load_button = self.buttons.addButton("Load", QDialogButtonBox.ButtonRole.AcceptRole)
        # Shown instead of Close while a load runs; like Escape and closing the dialog, it goes through reject().
        self.cancel_button = self.buttons.addButton(QDialogButtonBox.StandardButton.Cancel)
        self.cancel_button.setToolTip("Stop loading these models; the models in use stay (Esc)")
        self.cancel_button.setAutoDefault(False)  # a second Enter after Load must not cancel the load
        self.cancel_button.hide()
        self.buttons.accepted.connect(self._request_load)
        self.buttons.rejected.connect(self.reject)
        column = QVBoxLayout(self)
        column.addLayout(form)
        column.addWidget(self.progress)
        column.addWidget(self.message)
        column.addWidget(self.buttons)

    def _browse_into(self, edit: QLineEdit) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Model folder", edit.text())
        if folder:
            edit.setText(folder)
            self.preset.setCurrentIndex(len(PRESETS) - 1)

    # --- state ---------------------------------------------------------------------------
    def _preset_chosen(self, index: int) -> None:
        target, draft = self.preset.itemData(index)
        custom = target == CUSTOM
        if not custom:
            self.target.setText(target or "")
            self.draft.setText(draft or "")
        self.target.setPlaceholderText("bundled demo family" if target is None else TARGET_HINT if custom else "")

    def _auto_words(self) -> None:
        """Each "auto" says what it becomes with the other choice as it stands (app/engine/runtime/execution.py)."""
        compiled = self.compile.currentData() is True
        self.cache.setItemText(0, CACHE_AUTO_COMPILED if compiled else CACHES[0][0])
        dynamic = self.cache.currentData() == "dynamic"
        self.compile.setItemText(0, COMPILE_AUTO_DYNAMIC if dynamic else COMPILE[0][0])

    def _typed(self) -> None:
        """The user typed a target or drafter: it is a custom choice now, with what the fields hold."""
        custom = len(PRESETS) - 1
        if self.preset.currentIndex() != custom:
            self.preset.setCurrentIndex(custom)  # a custom preset leaves the fields' text as it is

    def set_request(self, request: LoadRequest) -> None:
        target, draft = request.target, request.draft
        index = next((i for i, (_, t, d) in enumerate(PRESETS) if (t, d) == (target, draft)), len(PRESETS) - 1)
        self.preset.setCurrentIndex(index)
        self._preset_chosen(index)
        self.target.setText(target or "")
        self.draft.setText(draft or "")
        self.device.setCurrentText(request.device)
        self.dtype.setCurrentText(request.dtype)
        for combo, value in ((self.cache, request.cache), (self.compile, request.compile)):
            combo.setCurrentIndex(max(0, combo.findData(value)))
        self.checkpoints.set_values(dict(request.drafters))

    def request(self) -> LoadRequest:
        target, _ = self.preset.currentData()
        return LoadRequest(
            target=None if target is None else (self.target.text().strip() or None),
            draft=None if target is None else (self.draft.text().strip() or None),
            device=self.device.currentText(), dtype=self.dtype.currentText(),
            cache=self.cache.currentData(), compile=self.compile.currentData(),
            drafters=tuple(sorted(self.checkpoints.values().items())),
        )

    # --- loading ---------------------------------------------------------------------------
    def _request_load(self) -> None:
        request = self.request()
        if self.preset.currentData()[0] == CUSTOM and not request.target:
            self.show_error("Enter a target: a hub id such as Qwen/Qwen2.5-0.5B-Instruct, or a local folder.")
            return
        if request.compile and request.cache == "dynamic":
            self.show_error("Compiling needs the static cache (fixed shapes): choose the static or the auto cache.")
            return
        self.sig_load_requested.emit(request)

    def watch(self, thread) -> None:
        """Show the progress and outcome of the window's load thread (a `ModelLoadThread`).

        Only the thread watched now counts, and only until it is cancelled: a signal it sent just before a
        cancel, or one of a thread watched before, changes nothing here."""
        self._thread = thread
        self._set_busy(True)
        self.progress.setRange(0, 0)  # busy until its next step says how far it is
        self.message.setText("Loading…")
        # Bound methods (not lambdas): Qt disconnects them when this dialog is deleted, its load still running.
        thread.sig_progress.connect(self._on_progress)
        thread.sig_failed.connect(self._on_failed)
        thread.sig_loaded.connect(self._on_loaded)
        thread.sig_cancelled.connect(self._on_cancelled)
        thread.finished.connect(self._forget_thread)

    def _watching(self) -> bool:
        """The signal being handled comes from the load watched now, which has not been cancelled."""
        thread = self.sender()
        return thread is not None and thread is self._thread and not self._thread.cancelled

    def _forget_thread(self) -> None:
        if self.sender() is self._thread:
            self._thread = None  # the window deletes the thread object once it has ended

    def _on_progress(self, message: str, done: int, total: int) -> None:
        if not self._watching():
            return
        self.progress.setRange(0, max(total, 0))
        self.progress.setValue(done)
        self.message.setText(message)

    def _on_failed(self, message: str) -> None:
        if not self._watching():
            return
        self._thread = None  # its outcome is in; the thread may take a moment longer to end
        self._set_busy(False)
        self.show_error(message)

    def _on_loaded(self, *_engine) -> None:
        if not self._watching():
            return
        self._thread = None
        self._set_busy(False)
        self.message.setText("Loaded.")
        self.accept()

    def _on_cancelled(self) -> None:
        """The load was cancelled (here, in the status bar, or as the window closes): editable again."""
        if self.sender() is not self._thread or self._thread is None:
            return
        self._thread = None
        self._set_busy(False)
        self.message.setText("Load cancelled. Change the choice and load again, or close.")
        self.load_button.setFocus()

    def cancel_load(self) -> None:
        """Cancel the load this dialog watches; nothing when none runs."""
        if self._thread is not None:
            self._thread.cancel()  # -> sig_cancelled: this dialog, the window's runs and the window react

    def show_error(self, message: str) -> None:
        self.message.setStyleSheet("color: #c0392b;")
        self.message.setText(message)

    def _set_busy(self, busy: bool) -> None:
        self.progress.setVisible(busy)
        if busy:
            self.message.setStyleSheet("")
        for widget in (self.preset, self.target, self.target_browse, self.draft, self.draft_browse, self.device,
                       self.dtype, self.cache, self.compile, self.load_button):
            widget.setEnabled(not busy)
        self.checkpoints.set_enabled(not busy)
        self.close_button.setVisible(not busy)
        self.cancel_button.setVisible(busy)
        if busy:
            self.cancel_button.setFocus()  # Load, which had it, is disabled now

    @property
    def loading(self) -> bool:
        """A load runs whose outcome has not reached this dialog yet."""
        return self._thread is not None

    def reject(self) -> None:
        """Escape, Close, Cancel and the title bar's close: while a load runs they cancel it and the dialog stays
        (editable again); otherwise the dialog closes."""
        if self.loading:
            self.cancel_load()
            return
        super().reject()


def _combo(values) -> QComboBox:
    combo = QComboBox()
    combo.setEditable(True)
    combo.addItems(values)
    return combo


def _choices(choices, tip: str) -> QComboBox:
    """A fixed list of (label, value) choices."""
    combo = QComboBox()
    for label, value in choices:
        combo.addItem(label, value)
    combo.setToolTip(tip)
    return combo


def _with_browse(edit: QLineEdit, browse) -> tuple[QWidget, QPushButton]:
    """A field with its "Folder…" button on its right: the row, and the button."""
    holder = QWidget()
    row = QHBoxLayout(holder)
    row.setContentsMargins(0, 0, 0, 0)
    button = QPushButton("Folder…")
    button.clicked.connect(lambda: browse(edit))
    row.addWidget(edit, 1)
    row.addWidget(button)
    return holder, button
