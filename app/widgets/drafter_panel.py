"""Drafter chain, K, the token tree and the verification rule: every control applies live, at the next pass.

Edits are coalesced by a short single-shot timer (a dragged slider makes one
settings value, not fifty), then `sig_changed` fires; the window's settings
model (app/settings_model.py) builds a validated DecodeSettings with
`settings_from` and shows any SettingsError inline with `show_error` instead
of raising. `apply` and `set_available` emit nothing: their caller pushes.

The token tree (docs/ALGORITHMS.md §9) is a toggle and a node budget N
beside K, which is then the tree's depth limit. ASD is a chain rule, so the
tree is off (its controls disabled, their state kept) while ASD verifies.
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, QSignalBlocker, Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QButtonGroup,
    QCheckBox,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QRadioButton,
    QSlider,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from app.engine.drafters.registry import BRANCHING_DRAFTERS, DRAFTER_LABELS
from app.engine.settings import MAX_K, MAX_TREE_NODES, AsdSettings, DecodeSettings
from app.widgets.fields import CheckedDoubleSpinBox, CheckedSpinBox, spin_box

THROTTLE_MS = 120
VERIFY_LABELS = {"greedy": "Greedy", "sample": "Sampling", "asd": "ASD"}
VERIFY_TIPS = {"greedy": "Keep a draft only if it is the target's most likely token: the target's own greedy text",
               "sample": "Keep a draft with probability min(1, p/q), resample from the residual: the target's "
                         "distribution exactly",
               "asd": "Approximate Speculative Decoding: lossy, budgeted — accepts some mismatches, paid from a "
                      "regret budget B"}
ADAPTIVE_K_TIP = "Adaptive K: +2 when every draft was accepted, −1 otherwise, between its bounds"
NAME_ROLE = Qt.ItemDataRole.UserRole
REPETITION_PENALTY_TIP = ("Repetition penalty: the logits of tokens already in the text are divided by it (negative "
                          "ones multiplied), for target and drafter alike under every rule; 1.00 is off.")
NO_REPEAT_NGRAM_TIP = ("No-repeat n-gram size n: a token that would repeat an n-gram already in the text is never "
                       "chosen, for target and drafter alike under every rule; off at 0.")
TREE_NODES = 16  # the node budget N a tree starts with
TREE_SLIDER = (4, 64)  # the slider's span of N; the spin box takes 1 to MAX_TREE_NODES
K_CHAIN_TIP = "K: tokens drafted per pass"
K_TREE_TIP = "K: the token tree's depth limit (its longest branch); N limits how many nodes it has"
TREE_TIP = ("Draft a tree of continuations of at most N nodes and verify it in one target forward; "
            "K is then its depth limit. Applies from the next pass.")
TREE_ASD_TIP = ("ASD is a chain rule: its regret ledger follows one line of drafts, so the token tree is off "
                "while ASD verifies. Choose Greedy or Sampling to use it.")


class DrafterPanel(QWidget):
    sig_changed = Signal()

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self._throttle = QTimer(self)
        self._throttle.setSingleShot(True)
        self._throttle.setInterval(THROTTLE_MS)
        self._throttle.timeout.connect(self.sig_changed)
        self._build_chain()
        self._build_k()
        self._build_verify()
        self.error = QLabel()
        self.error.setObjectName("inlineError")
        self.error.setWordWrap(True)
        self.error.setStyleSheet("color: #c0392b;")
        self.error.hide()
        column = QVBoxLayout(self)
        for part in (self.chain_box, self.k_box, self.verify_box, self.error):
            column.addWidget(part)
        column.addStretch(1)
        fields: list[CheckedSpinBox | CheckedDoubleSpinBox] = [*self.findChildren(CheckedSpinBox),
                                                               *self.findChildren(CheckedDoubleSpinBox)]
        for field in fields:
            field.sig_range_error.connect(self.show_error)  # a number out of range is said, not silently replaced
        self._sync_enabled()

    # --- construction ------------------------------------------------------------
    def _build_chain(self) -> None:
        self.chain = QListWidget()
        self.chain.setDragDropMode(QAbstractItemView.DragDropMode.InternalMove)
        self.chain.setDefaultDropAction(Qt.DropAction.MoveAction)
        self.chain.setToolTip("Checked drafters form a fallback chain: the first that proposes wins. Drag to reorder.")
        self.chain.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)  # every row shows, whole
        self.chain.itemChanged.connect(self._edited)
        self.chain.model().rowsMoved.connect(self._edited)
        self.exit_layer = QSpinBox()
        self.exit_layer.setRange(1, 1)
        self.exit_layer.setToolTip("Layer skip drafts with the first E layers of the target")
        self.exit_layer.valueChanged.connect(self._edited)
        form = QFormLayout()
        form.addRow("Layer-skip exit layer E", self.exit_layer)
        self.chain_box = QGroupBox("Drafters (fallback chain)")
        column = QVBoxLayout(self.chain_box)
        column.addWidget(self.chain)
        column.addLayout(form)
        self._fit_rows()

    def _build_k(self) -> None:
        self.k_label = QLabel("K")
        self.k_spin, self.k_slider, row = self._spin_and_slider(self.k_label, (1, MAX_K), (1, 16), 1)
        self.adaptive_k = QCheckBox("Adaptive K (+2 / −1)")
        self.adaptive_k.setToolTip(ADAPTIVE_K_TIP)
        self.adaptive_k.toggled.connect(self._edited)
        self.tree = QCheckBox("Token tree")
        self.tree.setToolTip(TREE_TIP)
        self.tree.toggled.connect(self._edited)
        self.tree_label = QLabel("nodes N")
        self.tree_nodes, self.tree_slider, tree_row = self._spin_and_slider(self.tree_label, (1, MAX_TREE_NODES),
                                                                            TREE_SLIDER, TREE_NODES)
        tree_row.insertWidget(0, self.tree)
        self.tree_note = QLabel()  # why the tree is off, or that the checked drafters propose one branch
        self.tree_note.setWordWrap(True)
        self.tree_note.setStyleSheet("color: #6b6b6b;")
        self.k_box = QGroupBox("Draft length")
        column = QVBoxLayout(self.k_box)
        column.addLayout(row)
        column.addWidget(self.adaptive_k)
        column.addLayout(tree_row)
        column.addWidget(self.tree_note)

    def _spin_and_slider(self, label: QLabel, spin_range: tuple[int, int], slider_range: tuple[int, int],
                         value: int) -> tuple[QSpinBox, QSlider, QHBoxLayout]:
        """A spin box over the whole range and a slider over its usual part, kept in step; edits apply live."""
        spin = CheckedSpinBox(label.text(), f"{label.text()}: {spin_range[0]} to {spin_range[1]}")
        spin.setRange(*spin_range)
        spin.setValue(value)
        slider = QSlider(Qt.Orientation.Horizontal)
        slider.setRange(*slider_range)
        slider.setValue(value)

        def from_spin(value: int) -> None:
            slider.blockSignals(True)
            slider.setValue(min(max(value, slider.minimum()), slider.maximum()))
            slider.blockSignals(False)
            self._edited()

        spin.valueChanged.connect(from_spin)
        slider.valueChanged.connect(spin.setValue)
        row = QHBoxLayout()
        row.addWidget(label)
        row.addWidget(slider, 1)
        row.addWidget(spin)
        return spin, slider, row

    def _build_verify(self) -> None:
        self.rule_buttons = QButtonGroup(self)
        rules = QHBoxLayout()
        for rule, label in VERIFY_LABELS.items():
            button = QRadioButton(label)  # short, so the three fit a narrow panel; the tip says the rest
            button.setToolTip(VERIFY_TIPS[rule])
            button.setProperty("rule", rule)
            self.rule_buttons.addButton(button)
            rules.addWidget(button)
        self.rule_buttons.buttons()[0].setChecked(True)
        self.rule_buttons.buttonToggled.connect(self._edited)
        self.temperature = spin_box(0.01, 10.0, 1.0, "temperature applied to target and drafter alike", step=0.05)
        self.top_k = spin_box(0, 100_000, 0, "top-k (0 = off)")
        self.top_p = spin_box(0.01, 1.0, 1.0, "top-p nucleus", step=0.01)
        self.budget = spin_box(0.0, 1e6, 8.0, "B: regret the whole request may spend", step=0.5)
        self.gate = spin_box(0.0, 1e3, 0.25, "g: largest regret per unit of suffix value", step=0.05)
        self.cap = spin_box(0, MAX_K, 2, "M: most accepted mismatches in one block")
        for spin in (self.temperature, self.top_k, self.top_p, self.budget, self.gate, self.cap):
            spin.valueChanged.connect(self._edited)
        self.sampling_form = _form(("Temperature", self.temperature), ("Top-k", self.top_k), ("Top-p", self.top_p))
        self.asd_form = _form(("Budget B", self.budget), ("Gate g", self.gate), ("Block cap M", self.cap))
        self.verify_box = QGroupBox("Verification")
        column = QVBoxLayout(self.verify_box)
        column.addLayout(rules)
        column.addWidget(self.sampling_form)
        column.addWidget(self.asd_form)
        self.asd_note = QLabel()  # when B, g or M let no mismatch through: ASD is strict greedy then
        self.asd_note.setWordWrap(True)
        self.asd_note.setStyleSheet("color: #6b6b6b;")
        self.asd_note.hide()
        column.addWidget(self.asd_note)
        self._build_repetition(column)

    def _build_repetition(self, column: QVBoxLayout) -> None:
        """Repetition penalty and no-repeat n-gram: under every rule, on target and drafter alike."""
        self.repetition_penalty = spin_box(1.0, 2.0, 1.0, REPETITION_PENALTY_TIP, step=0.05)
        self.repetition_penalty.setDecimals(2)
        self.no_repeat_ngram = spin_box(0, 10, 0, NO_REPEAT_NGRAM_TIP)
        self.no_repeat_ngram.setSpecialValueText("off")  # shown at 0
        for spin in (self.repetition_penalty, self.no_repeat_ngram):
            spin.valueChanged.connect(self._edited)
        self.repetition_form = _form(("Repetition penalty", self.repetition_penalty),
                                     ("No-repeat n-gram", self.no_repeat_ngram))
        column.addWidget(self.repetition_form)

    # --- state -------------------------------------------------------------------
    def set_available(self, available: tuple[str, ...], num_layers: int, default_exit: int) -> None:
        """Offer the drafters these models support; keep the user's order and checks where possible."""
        previous = self.chain_order()
        checked = set(self.checked_drafters())
        self.chain.blockSignals(True)
        self.chain.clear()
        order = [n for n in previous if n in available] + [n for n in available if n not in previous]
        for name in order:
            self._add_item(name, name in checked or (not previous and name == available[0]), enabled=True)
        for name in DRAFTER_LABELS:
            if name not in available:
                self._add_item(name, False, enabled=False)
        self.chain.blockSignals(False)
        self._fit_rows()
        self.exit_layer.blockSignals(True)
        self.exit_layer.setRange(1, max(1, num_layers - 1))
        self.exit_layer.setValue(min(max(1, default_exit), max(1, num_layers - 1)))
        self.exit_layer.blockSignals(False)
        self._sync_enabled()  # quiet: whoever offers new models pushes the settings once

    def _fit_rows(self) -> None:
        """The list exactly as tall as its rows: none is cut in half (the panel scrolls, not the list)."""
        count = self.chain.count()
        rows = (sum(self.chain.sizeHintForRow(i) for i in range(count)) if count  # before any models: room for all
                else len(DRAFTER_LABELS) * (self.chain.fontMetrics().height() + 2))
        self.chain.setFixedHeight(rows + 2 * self.chain.frameWidth())

    def changeEvent(self, event) -> None:
        super().changeEvent(event)
        if event.type() == QEvent.Type.FontChange:  # the Classroom layout: taller rows
            self._fit_rows()

    def _add_item(self, name: str, checked: bool, enabled: bool) -> None:
        item = QListWidgetItem(DRAFTER_LABELS.get(name, name))
        item.setData(NAME_ROLE, name)
        flags = Qt.ItemFlag.ItemIsUserCheckable | Qt.ItemFlag.ItemIsSelectable | Qt.ItemFlag.ItemIsDragEnabled
        item.setFlags(flags | Qt.ItemFlag.ItemIsEnabled if enabled else flags)
        item.setCheckState(Qt.CheckState.Checked if checked and enabled else Qt.CheckState.Unchecked)
        label = DRAFTER_LABELS.get(name, name)
        item.setToolTip(label if enabled else f"{label}: not available for the loaded models")  # a cut label whole
        self.chain.addItem(item)

    def chain_order(self) -> list[str]:
        return [self.chain.item(i).data(NAME_ROLE) for i in range(self.chain.count())]

    def checked_drafters(self) -> tuple[str, ...]:
        items = (self.chain.item(i) for i in range(self.chain.count()))
        return tuple(item.data(NAME_ROLE) for item in items
                     if item.checkState() == Qt.CheckState.Checked and item.flags() & Qt.ItemFlag.ItemIsEnabled)

    def set_drafters(self, chain: tuple[str, ...]) -> None:
        """Check exactly `chain` (in that order, first), leaving the other items after it; an edit like the user's."""
        self._check_chain(chain)
        self._edited()

    def _check_chain(self, chain: tuple[str, ...]) -> None:
        self.chain.blockSignals(True)
        rows = {self.chain.item(i).data(NAME_ROLE): i for i in range(self.chain.count())}
        for target_row, name in enumerate(n for n in chain if n in rows):
            current = [self.chain.item(i).data(NAME_ROLE) for i in range(self.chain.count())].index(name)
            self.chain.insertItem(target_row, self.chain.takeItem(current))
        for i in range(self.chain.count()):
            item = self.chain.item(i)
            on = item.data(NAME_ROLE) in chain and bool(item.flags() & Qt.ItemFlag.ItemIsEnabled)
            item.setCheckState(Qt.CheckState.Checked if on else Qt.CheckState.Unchecked)
        self.chain.blockSignals(False)

    @property
    def rule(self) -> str:
        button = self.rule_buttons.checkedButton()
        return button.property("rule") if button else "greedy"

    def set_rule(self, rule: str) -> None:
        for button in self.rule_buttons.buttons():
            if button.property("rule") == rule:
                button.setChecked(True)

    def changes(self) -> dict:
        """The fields of DecodeSettings this panel owns, for `DecodeSettings.with_changes`."""
        return dict(
            drafters=self.checked_drafters(), k=self.k_spin.value(), adaptive_k=self.adaptive_k.isChecked(),
            verify=self.rule, tree=self.tree_nodes.value() if self.tree_on else None,
            sampling=dict(temperature=self.temperature.value(), top_k=self.top_k.value(), top_p=self.top_p.value()),
            repetition=dict(penalty=self.repetition_penalty.value(), no_repeat_ngram=self.no_repeat_ngram.value()),
            asd=dict(budget=self.budget.value(), gate=self.gate.value(), cap=self.cap.value()),
            options=dict(layer_skip_exit=self.exit_layer.value()),
        )

    @property
    def tree_on(self) -> bool:
        """The tree is checked and the rule can verify one (ASD cannot)."""
        return self.tree.isChecked() and self.rule != "asd"

    def settings_from(self, base: DecodeSettings) -> DecodeSettings:
        """A validated settings value; raises SettingsError (shown with `show_error`)."""
        return base.with_changes(**self.changes())

    def apply(self, settings: DecodeSettings) -> None:
        """Show `settings` in the controls without emitting any change (the caller pushes them)."""
        widgets = (self.k_spin, self.k_slider, self.adaptive_k, self.temperature, self.top_k, self.top_p,
                   self.budget, self.gate, self.cap, self.rule_buttons, self.exit_layer, self.tree, self.tree_nodes,
                   self.tree_slider)
        for widget in widgets:
            widget.blockSignals(True)
        self.k_spin.setValue(settings.k)
        self.k_slider.setValue(min(settings.k, self.k_slider.maximum()))
        if settings.verify != "asd":  # under ASD the tree is off whatever the toggle says: keep the user's choice
            self.tree.setChecked(settings.tree is not None)
        if settings.tree is not None:
            self.tree_nodes.setValue(settings.tree)
            self.tree_slider.setValue(min(max(settings.tree, self.tree_slider.minimum()), self.tree_slider.maximum()))
        self.adaptive_k.setChecked(settings.adaptive_k)
        self.temperature.setValue(settings.sampling.temperature)
        self.top_k.setValue(settings.sampling.top_k)
        self.top_p.setValue(settings.sampling.top_p)
        self._show_repetition(settings)
        self.budget.setValue(settings.asd.budget)
        self.gate.setValue(settings.asd.gate)
        self.cap.setValue(settings.asd.cap)
        self.set_rule(settings.verify)
        if settings.options.layer_skip_exit is not None:
            self.exit_layer.setValue(settings.options.layer_skip_exit)
        for widget in widgets:
            widget.blockSignals(False)
        self._check_chain(settings.drafters)
        self._sync_enabled()

    def _show_repetition(self, settings: DecodeSettings) -> None:
        repetition = settings.repetition
        with QSignalBlocker(self.repetition_penalty), QSignalBlocker(self.no_repeat_ngram):
            self.repetition_penalty.setValue(repetition.penalty)
            self.no_repeat_ngram.setValue(repetition.no_repeat_ngram)

    def show_error(self, message: str | None) -> None:
        self.error.setText(message or "")
        self.error.setVisible(bool(message))

    # --- reactions -----------------------------------------------------------------
    def _edited(self, *args) -> None:
        self._sync_enabled()
        self._throttle.start()

    def flush(self) -> None:
        """Emit a pending change now (e.g. right before a generation starts)."""
        if self._throttle.isActive():
            self._throttle.stop()
            self.sig_changed.emit()

    def _sync_enabled(self) -> None:
        self.sampling_form.setEnabled(self.rule == "sample")
        self.asd_form.setEnabled(self.rule == "asd")
        self._sync_asd_note()
        self.exit_layer.setEnabled("layer-skip" in self.checked_drafters())
        self._sync_tree()

    def _sync_asd_note(self) -> None:
        reason = AsdSettings(budget=self.budget.value(), gate=self.gate.value(),
                             cap=self.cap.value()).strict_greedy_reason() if self.rule == "asd" else None
        self.asd_note.setText(reason or "")
        self.asd_note.setVisible(reason is not None)

    def _sync_tree(self) -> None:
        """The tree's controls: off under ASD (saying why), K named the depth limit while the tree is on."""
        asd = self.rule == "asd"
        self.tree.setEnabled(not asd)
        for widget in (self.tree_label, self.tree_nodes, self.tree_slider):
            widget.setEnabled(self.tree_on)
        note = self._tree_note(asd)
        self.tree_note.setText(note)
        self.tree_note.setVisible(bool(note))
        self.tree.setToolTip(TREE_ASD_TIP if asd else f"{TREE_TIP} {note}".strip())
        tip = "N: the most draft tokens one pass verifies (4 to 64 is the useful span; 1 to 256 allowed)"
        for widget in (self.tree_label, self.tree_nodes, self.tree_slider):
            widget.setToolTip(TREE_ASD_TIP if asd else tip)
        self.k_label.setText("K (depth)" if self.tree_on else "K")
        for widget in (self.k_label, self.k_spin, self.k_slider):
            widget.setToolTip(K_TREE_TIP if self.tree_on else K_CHAIN_TIP)

    def _tree_note(self, asd: bool) -> str:
        if asd and self.tree.isChecked():
            return "The token tree is off while ASD verifies: ASD is a chain rule."
        chain = self.checked_drafters()
        if not self.tree_on or not chain or any(name in BRANCHING_DRAFTERS for name in chain):
            return ""
        names = ", ".join(DRAFTER_LABELS.get(name, name) for name in chain)
        one = len(chain) == 1
        return (f"The checked drafter{'' if one else 's'} ({names}) propose{'s' if one else ''} one branch: "
                "the tree is a chain.")


def _form(*rows) -> QWidget:
    holder = QWidget()
    form = QFormLayout(holder)
    form.setContentsMargins(0, 0, 0, 0)
    for label, widget in rows:
        form.addRow(label, widget)
    return holder
