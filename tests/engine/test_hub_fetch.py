"""Hub models are fetched before loading, and the bytes arriving are reported as load progress.

No network here: `snapshot_download` is replaced by one that "downloads" a local tiny model while driving
the progress bar class it is given, as the real one does.
"""

from __future__ import annotations

import shutil

import huggingface_hub
import pytest

from app.engine.errors import ModelLoadError
from app.engine.loading import load_models
from app.engine.loading.hub import fetch_from_hub


def fake_hub(monkeypatch, folder, chunks=(300, 300, 400)):
    """snapshot_download stand-in: reports `chunks` bytes on a byte bar, then returns `folder`."""
    calls = []

    def snapshot_download(repo_id, allow_patterns=None, tqdm_class=None, **_):
        calls.append((repo_id, tuple(allow_patterns or ())))
        bar = tqdm_class(total=sum(chunks), unit="B", unit_scale=True, desc="Downloading")
        for chunk in chunks:
            bar.update(chunk)
        bar.close()
        return str(folder)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    return calls


def test_hub_download_progress_reaches_the_loader(monkeypatch, tiny_llama):
    target, _ = tiny_llama
    calls = fake_hub(monkeypatch, target)
    reports = []
    models = load_models("some-org/some-model", device="cpu", dtype="float32",
                         progress=lambda fraction, message: reports.append((fraction, message)))
    assert calls and calls[0][0] == "some-org/some-model" and "*.safetensors" in calls[0][1]
    downloading = [(f, m) for f, m in reports if m.startswith("downloading some-org/some-model")]
    assert [round(f, 2) for f, _ in downloading] == [0.12, 0.24, 0.4]  # 30 %, 60 %, 100 % of the first 40 %
    assert downloading[-1][1].endswith("MB")
    assert [f for f, _ in reports] == sorted(f for f, _ in reports) and reports[-1][0] == 1.0
    assert models.target_name == "some-org/some-model"  # named as asked, loaded from the cache folder


def test_folders_are_not_fetched(monkeypatch, tiny_llama):
    calls = fake_hub(monkeypatch, tiny_llama[0])
    assert fetch_from_hub(str(tiny_llama[0])) == str(tiny_llama[0]) and not calls


def test_a_repo_without_safetensors_is_left_to_from_pretrained(monkeypatch, tiny_llama, tmp_path):
    folder = tmp_path / "snapshot"
    shutil.copytree(tiny_llama[0], folder, ignore=shutil.ignore_patterns("*.safetensors"))
    fake_hub(monkeypatch, folder)
    assert fetch_from_hub("some-org/old-model") == "some-org/old-model"
    with pytest.raises(ModelLoadError, match="HF_HUB_OFFLINE"):
        load_models("some-org/old-model", device="cpu")
