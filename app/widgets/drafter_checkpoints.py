"""The model dialog's fields for published drafter checkpoints: one per learned drafter that reads a format.

Each field takes a hub id or a folder; under it, what the checkpoint declares as read from its config.json
(the detected format, the verifier it was trained for, its draft vocabulary and tap layers), before anything
loads. A hub id is described once it is downloaded, as it loads.
"""

from __future__ import annotations

from PySide6.QtWidgets import QFileDialog, QHBoxLayout, QLabel, QLineEdit, QPushButton, QVBoxLayout, QWidget

from app.engine.drafters.published.formats import READS, describe_folder

LABELS = {"eagle": "EAGLE checkpoint", "medusa": "Medusa checkpoint", "mtp": "MTP (target's checkpoint)"}


class CheckpointField(QWidget):
    """A hub id or folder for one drafter, a "Folder…" button, and the detected format under them."""

    def __init__(self, name: str, parent=None) -> None:
        super().__init__(parent)
        self.name = name
        self.edit = QLineEdit()
        self.edit.setPlaceholderText(f"optional: hub id or folder ({', '.join(READS[name])})")
        self.browse = QPushButton("Folder…")
        self.browse.clicked.connect(self._browse)
        self.detected = QLabel()
        self.detected.setObjectName("detectedCheckpoint")
        self.detected.setWordWrap(True)
        self.detected.hide()
        self.edit.textChanged.connect(self._describe)
        row = QHBoxLayout()
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.edit, 1)
        row.addWidget(self.browse)
        column = QVBoxLayout(self)
        column.setContentsMargins(0, 0, 0, 0)
        column.addLayout(row)
        column.addWidget(self.detected)

    def _browse(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, f"{LABELS.get(self.name, self.name)} folder", self.edit.text())
        if folder:
            self.edit.setText(folder)

    def _describe(self, text: str) -> None:
        source = text.strip()
        self.detected.setVisible(bool(source))
        self.detected.setText(describe_folder(source) if source else "")

    @property
    def value(self) -> str:
        return self.edit.text().strip()


class DrafterCheckpoints:
    """The fields of every learned drafter that reads a published format, as rows of the dialog's form."""

    def __init__(self) -> None:
        self.fields = {name: CheckpointField(name) for name in READS}

    def rows(self) -> list[tuple[str, QWidget]]:
        return [(LABELS.get(name, name), field) for name, field in self.fields.items()]

    def values(self) -> dict[str, str]:
        """{drafter name: hub id or folder} of the fields filled in."""
        return {name: field.value for name, field in self.fields.items() if field.value}

    def set_values(self, values: dict[str, str]) -> None:
        for name, field in self.fields.items():
            field.edit.setText(values.get(name, ""))

    def set_enabled(self, enabled: bool) -> None:
        for field in self.fields.values():
            field.edit.setEnabled(enabled)
            field.browse.setEnabled(enabled)
