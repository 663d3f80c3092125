"""The model dialog's published drafter checkpoint fields: what a folder's config.json declares shows before
loading, and the checkpoints travel in the load request (and back into the dialog)."""

from __future__ import annotations

import json

from app.settings_store import DEFAULT_REQUEST
from app.widgets.model_dialog import ModelDialog


def _dialog(qtbot, **request) -> ModelDialog:
    dialog = ModelDialog(current=DEFAULT_REQUEST.with_changes(**request))
    qtbot.addWidget(dialog)
    return dialog


def _speculators_folder(tmp_path):
    folder = tmp_path / "eagle3"
    folder.mkdir()
    folder.joinpath("config.json").write_text(json.dumps({
        "speculators_model_type": "eagle3", "draft_vocab_size": 32000, "eagle_aux_hidden_state_layer_ids": [29, 2, 16],
        "transformer_layer_config": {"vocab_size": 128256},
        "speculators_config": {"verifier": {"name_or_path": "meta-llama/Llama-3.1-8B-Instruct"}}}))
    return folder


def test_a_checkpoint_folder_shows_its_format_verifier_vocabulary_and_taps(qtbot, tmp_path):
    dialog = _dialog(qtbot)
    field = dialog.checkpoints.fields["eagle"]
    field.edit.setText(str(_speculators_folder(tmp_path)))
    shown = field.detected.text()
    assert "EAGLE-3 (speculators)" in shown and "meta-llama/Llama-3.1-8B-Instruct" in shown
    assert "draft vocabulary 32000" in shown and "taps [2, 16, 29]" in shown
    medusa = tmp_path / "medusa"
    medusa.mkdir()
    medusa.joinpath("config.json").write_text('{"medusa_num_heads": 5, "base_model_name_or_path": "lmsys/vicuna"}')
    dialog.checkpoints.fields["medusa"].edit.setText(str(medusa))
    assert "Medusa (FasterDecoding) for lmsys/vicuna" in dialog.checkpoints.fields["medusa"].detected.text()
    field.edit.setText(str(tmp_path))
    assert "not a drafter checkpoint" in field.detected.text()


def test_checkpoints_travel_in_the_request_and_back(qtbot, tmp_path):
    dialog = _dialog(qtbot)
    assert dialog.request().drafters == ()  # none given: the request is as before
    folder = str(_speculators_folder(tmp_path))
    dialog.checkpoints.fields["eagle"].edit.setText(folder)
    request = dialog.request()
    assert request.drafters == (("eagle", folder),) and request.to_dict()["drafters"] == {"eagle": folder}
    again = _dialog(qtbot, drafters=request.drafters)
    assert again.checkpoints.fields["eagle"].value == folder and again.checkpoints.fields["medusa"].value == ""
