import multiprocessing
import os
import tempfile
import threading

import pytest
import torch

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
# Compiling loads keep their caches in a scratch folder, never in the user cache folder.
os.environ.setdefault("SPEC_PLAYGROUND_CACHE", tempfile.mkdtemp(prefix="playground-cache-"))
# Tiny models run fastest on one thread, and a shared machine punishes oversubscription.
torch.set_num_threads(1)

from transformers.utils import logging as hf_logging  # noqa: E402

hf_logging.disable_progress_bar()


@pytest.fixture(scope="session")
def tiny_llama(tmp_path_factory):
    from tests.tiny_models import tiny_pair

    return tiny_pair(tmp_path_factory.mktemp("llama"), "llama")


@pytest.fixture(scope="session")
def tiny_qwen2(tmp_path_factory):
    from tests.tiny_models import tiny_pair

    return tiny_pair(tmp_path_factory.mktemp("qwen2"), "qwen2")


@pytest.fixture(scope="session")
def tiny_gpt2(tmp_path_factory):
    from tests.tiny_models import tiny_pair

    return tiny_pair(tmp_path_factory.mktemp("gpt2"), "gpt2")


THREAD_EXIT_S = 5.0


@pytest.fixture(autouse=True)
def no_thread_left_behind():
    """Fail any test that leaves a Python thread (QThread workers included) or an engine process running."""
    before = set(threading.enumerate())
    children_before = set(multiprocessing.active_children())
    yield
    leftover = [t for t in threading.enumerate() if t not in before and t.is_alive() and not t.daemon]
    for thread in leftover:  # a worker told to stop may still be on its way out (transformers' weight loader
        thread.join(timeout=THREAD_EXIT_S)  # shuts its pool down without waiting): give it a moment, not forever
    leftover = [t for t in leftover if t.is_alive()]
    assert not leftover, f"threads left running: {leftover}"
    processes = [p for p in multiprocessing.active_children() if p not in children_before]
    assert not processes, f"processes left running: {processes}"
