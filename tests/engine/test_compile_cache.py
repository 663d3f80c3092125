"""Compiled forwards are kept per key in the user cache folder (app/engine/runtime/compile_cache.py)."""

from __future__ import annotations

import os
from pathlib import Path

import torch

from app.engine.runtime import compile_cache
from app.engine.runtime.compile_cache import INDUCTOR_ENV, compile_key, keep_compiled, user_cache_folder


def test_the_key_changes_with_every_part_and_names_the_target():
    base = (("org/target", "org/draft"), "torch.bfloat16", "2.13.0", "cuda-NVIDIA H200")
    key = compile_key(*base)
    assert key.startswith("target-bfloat16-torch2.13.0-cuda-NVIDIA_H200-")
    variants = [(("org/target",), *base[1:]), (("org/other", "org/draft"), *base[1:]),
                (base[0], "torch.float32", *base[2:]), (*base[:2], "2.14.0", base[3]), (*base[:3], "cpu")]
    assert len({key, *(compile_key(*variant) for variant in variants)}) == 1 + len(variants)
    assert compile_key(*base) == key  # the same models next launch find the same folder


def test_a_compiling_load_points_inductors_cache_at_its_keys_folder(tmp_path, monkeypatch):
    monkeypatch.setenv(compile_cache.CACHE_ENV, str(tmp_path))
    monkeypatch.setattr(compile_cache, "USER_INDUCTOR_DIR", None)
    monkeypatch.setenv(INDUCTOR_ENV, "/somewhere/else")
    folder = keep_compiled(("demo/target",), torch.float32, torch.device("cpu"))
    assert user_cache_folder() == tmp_path
    assert folder is not None and folder.is_dir() and folder.parent == tmp_path / "compiled"
    assert folder.name == compile_key(("demo/target",), "torch.float32", torch.__version__, "cpu")
    assert os.environ[INDUCTOR_ENV] == str(folder)
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    assert cache_dir() == str(folder)  # where Inductor and AOT autograd write their caches


def test_an_inductor_folder_the_user_chose_is_left_alone(tmp_path, monkeypatch):
    monkeypatch.setenv(compile_cache.CACHE_ENV, str(tmp_path))
    monkeypatch.setattr(compile_cache, "USER_INDUCTOR_DIR", "/mine")
    monkeypatch.setenv(INDUCTOR_ENV, "/mine")
    assert keep_compiled(("demo/target",), torch.float32, torch.device("cpu")) is None
    assert os.environ[INDUCTOR_ENV] == "/mine" and not (tmp_path / "compiled").exists()


def test_torchs_own_default_folder_is_not_a_users_choice(tmp_path, monkeypatch):
    """Importing transformers makes Inductor write its default folder into the environment before the engine's
    import reads it: that value must not switch the kept caches off."""
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    assert compile_cache.inductor_default_folder() == Path(default_cache_dir()).absolute()
    monkeypatch.setenv(compile_cache.CACHE_ENV, str(tmp_path))
    monkeypatch.setattr(compile_cache, "USER_INDUCTOR_DIR", default_cache_dir())
    monkeypatch.setenv(INDUCTOR_ENV, default_cache_dir())
    folder = keep_compiled(("demo/target",), torch.float32, torch.device("cpu"))
    assert folder is not None and folder.parent == tmp_path / "compiled"
    assert os.environ[INDUCTOR_ENV] == str(folder)
