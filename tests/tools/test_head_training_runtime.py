"""The learned heads' GPU recipe, tested on the CPU: ``train_heads.py --device/--dtype`` and the GPU run.

``--device cuda --dtype bfloat16`` trains the heads on the GPU under bfloat16
autocast (float32 weights, float32 softmax) and exports the same fp16 files.
Without a GPU the tests run the same code path on the CPU in bfloat16, run the
losses with every tensor on a non-CPU device ("meta", which refuses to mix
devices as CUDA does), and check that ``--device cuda`` fails cleanly.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from app.engine.drafters.heads import FAMILIES, TargetShape, build_module, default_config
from app.engine.drafters.heads.common import TargetParts
from tools.train.demo_training.runtime import CPU, Runtime
from tools.train.head_training import data as head_data
from tools.train.head_training import family as head_family
from tools.train.head_training.lineage import lineage_steps, lineage_words
from tools.train.head_training.losses import LOSSES
from tools.train.head_training.run import RUNS, full_run, gpu_run, quick_run

REPO_ROOT = Path(__file__).resolve().parents[2]
TRAIN_MODULE = ["-m", "tools.train.heads"]  # run from the repository root
LEARNED = tuple(FAMILIES)


def train_heads(*arguments: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_HUB_DISABLE_PROGRESS_BARS="1",
               OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, *TRAIN_MODULE, *arguments], env=env, capture_output=True, text=True,
                          timeout=timeout, cwd=REPO_ROOT)


# ---- end to end: the GPU recipe at --quick size, on the CPU ---------------------------------------


@pytest.fixture(scope="module")
def bfloat16_heads(tiny_llama, tmp_path_factory):
    root = tmp_path_factory.mktemp("bf16_heads")
    process = train_heads("--run", "gpu", "--quick", "--device", "cpu", "--dtype", "bfloat16", "--threads", "1",
                          "--target", str(tiny_llama[0]), "--out", str(root / "heads"),
                          "--cache-dir", str(root / "cache"))
    assert process.returncode == 0, process.stderr[-3000:]
    return root / "heads", process


def test_quick_bfloat16_run_trains_every_family_in_the_heads_format(bfloat16_heads):
    folder, process = bfloat16_heads
    assert "training on 1 CPU threads (bfloat16)" in process.stderr
    assert (folder / "FORMAT.md").is_file()
    for family in LEARNED:
        config = json.loads((folder / family / "config.json").read_text())
        assert config["family"] == family and config["format_version"] == 1
        assert config["training"]["steps"] > 0 and config["training"]["run"] == "quick"
        assert config["training"]["precision"].startswith("bfloat16 mixed-precision")
        weights = load_file(str(folder / family / "model.safetensors"))
        assert all(t.dtype == torch.float16 and torch.isfinite(t).all() for t in weights.values())


def test_bfloat16_heads_load_on_the_cpu_in_float32_and_draft(tiny_llama, bfloat16_heads):
    from app.engine.decoding.decoder import SpeculativeDecoder
    from app.engine.loading import load_models
    from tests.engine.helpers import PROMPTS, run

    models = load_models(*map(str, tiny_llama), heads=str(bfloat16_heads[0]))
    assert set(LEARNED) <= set(models.heads) and set(LEARNED) <= set(models.available_drafters)
    for spec in models.heads.values():
        assert all(p.dtype == torch.float32 and p.device.type == "cpu" for p in spec.module.parameters())
    decoder = SpeculativeDecoder(models)
    _, reference = run(decoder, PROMPTS[0], drafters=(), max_new_tokens=24)
    for family in LEARNED:
        passes, end = run(decoder, PROMPTS[0], drafters=(family,), k=3, max_new_tokens=24)
        assert end.token_ids == reference.token_ids  # greedy: the drafts never change the text
        assert {p.drafter for p in passes if p.k} == {family}


# ---- the command line -----------------------------------------------------------------------------


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is available here")
def test_cuda_without_a_gpu_is_refused_in_one_line(tiny_llama, tmp_path):
    process = train_heads("--device", "cuda", "--dtype", "bfloat16", "--target", str(tiny_llama[0]),
                          "--out", str(tmp_path / "heads"), "--cache-dir", str(tmp_path / "cache"), timeout=120)
    assert process.returncode == 1
    assert process.stderr.strip().splitlines() == [process.stderr.strip()], process.stderr  # one line
    assert process.stderr.startswith("--device cuda: no CUDA device") and "Traceback" not in process.stderr
    assert not (tmp_path / "heads").exists() and not (tmp_path / "cache").exists()


def test_gpu_run_needs_cuda_unless_quick():
    from tools.train.heads import parse_args

    with pytest.raises(SystemExit):
        parse_args(["--run", "gpu"])
    args = parse_args(["--run", "gpu", "--quick", "--dtype", "bfloat16"])
    assert (args.run, args.device, args.dtype) == ("gpu", "cpu", "bfloat16")
    assert (parse_args([]).run, parse_args([]).device, parse_args([]).dtype) == ("full", "cpu", "float32")


# ---- the GPU configuration ------------------------------------------------------------------------


def test_cpu_run_is_unchanged_and_the_gpu_run_is_keyed_apart():
    # The CPU defaults: any change here retrains (and re-caches) every CPU family's heads.
    assert full_run(1234, "pydoc").fingerprint() == "022d727914"
    assert full_run(1234, "docs").fingerprint() == "542ac9d211"
    runs = [RUNS[name](1234, "docs") for name in RUNS] + [quick_run(1234, "docs")]
    assert len({r.fingerprint() for r in runs}) == len({r.data_fingerprint() for r in runs}) == len(runs)
    assert gpu_run(1234, "docs").prose_repeats == 1 and set(gpu_run(1).schedules) == set(LEARNED)


def test_gpu_heads_fit_the_gpu_familys_60_mb():
    from tools.train.demo_training.config import gpu_config

    config = gpu_config()
    shape = TargetShape(config.target.hidden_size, config.vocab_size, config.target.num_layers)
    run = gpu_run(1234, "docs")
    heads = sum(sum(p.numel() for p in build_module(default_config(f, shape, **run.arch[f])).parameters())
                for f in LEARNED)

    def llama(s) -> int:  # tied embeddings, norms included
        layer = 4 * s.hidden_size**2 + 3 * s.hidden_size * s.intermediate_size + 2 * s.hidden_size
        return s.num_layers * layer + config.vocab_size * s.hidden_size + s.hidden_size

    megabytes = 2 * (heads + llama(config.target) + llama(config.draft)) / 1e6 + 1.2  # bf16/fp16, tokenizers
    assert 2 * heads / 1e6 < 21 and megabytes < 60, (2 * heads / 1e6, megabytes)


# ---- device placement and precision, without a GPU ------------------------------------------------


@pytest.mark.parametrize("family", LEARNED)
def test_losses_keep_every_tensor_on_the_training_device(family):
    """On "meta" (no data, device checks as on CUDA) the loss and its backward see no CPU tensor."""
    shape, run, device = TargetShape(64, 300, 4), quick_run(1), "meta"
    config = default_config(family, shape, **run.arch[family])
    module = build_module(config).to(device)
    parts = TargetParts(torch.nn.Embedding(300, 64).to(device), torch.nn.Linear(64, 300, bias=False).to(device))
    batch = (torch.zeros(2, 48, dtype=torch.long, device=device),
             [torch.zeros(2, 48, 64, device=device) for _ in config.feature_layers],
             torch.zeros(2, 48, 8, dtype=torch.long, device=device), torch.zeros(2, 48, 8, device=device))
    with head_family.on_default_device(device):
        loss = LOSSES[family](module, parts, batch, run, torch.Generator().manual_seed(0))
    loss.backward()
    assert loss.device.type == device and loss.dtype == torch.float32
    assert all(p.grad is not None and p.grad.device.type == device for p in module.parameters() if p.requires_grad)


def test_greedy_continuations_do_not_depend_on_the_batch(tiny_llama):
    target, _ = head_data.load_target(tiny_llama[0])
    prompts = torch.randint(1, 300, (70, 5), generator=torch.Generator().manual_seed(0))
    small = head_data.continuations(target, prompts, 3, seed=1, batch=16)
    large = head_data.continuations(target, prompts, 3, seed=1, batch=64)
    greedy = head_data.greedy_rows(len(prompts))
    assert greedy == 64 and torch.equal(small[:greedy], large[:greedy])
    assert (head_data.greedy_rows(800), head_data.greedy_rows(3000), head_data.greedy_rows(4)) == (448, 1536, 4)


def test_greedy_continuations_under_a_penalty_are_generates(tiny_llama):
    """Written under a repetition penalty, the target's greedy text is `generate`'s with the same penalty."""
    target, _ = head_data.load_target(tiny_llama[0])
    prompts = torch.randint(1, 300, (6, 5), generator=torch.Generator().manual_seed(2))
    ours = head_data.continuations(target, prompts, 12, seed=1, penalty=1.5)
    hf = target.generate(prompts, max_new_tokens=12, min_new_tokens=12, do_sample=False, repetition_penalty=1.5,
                         attention_mask=torch.ones_like(prompts), pad_token_id=0)
    assert torch.equal(ours, hf)
    assert not torch.equal(ours, head_data.continuations(target, prompts, 12, seed=1))  # the penalty acted


def test_the_penalty_keys_the_data_and_defaults_to_the_familys(tmp_path):
    from tools.train.heads import configured_run, generation_penalty_of, parse_args

    run = full_run(1234, "docs")
    assert dataclasses.replace(run, generation_penalty=1.2).data_fingerprint() != run.data_fingerprint()
    (tmp_path / "target").mkdir()
    target = ["--target", str(tmp_path / "target")]
    assert generation_penalty_of(parse_args(target))[0] == 1.0  # no playground.json: off
    (tmp_path / "playground.json").write_text(json.dumps({"repetition_penalty": 1.2}))
    assert generation_penalty_of(parse_args(target))[0] == 1.2
    assert generation_penalty_of(parse_args([*target, "--generation-penalty", "1.0"]))[0] == 1.0
    run = configured_run(parse_args(target))
    assert run.generation_penalty == run.label_penalty == 1.2  # the labels are the penalised distribution too
    assert configured_run(parse_args([*target, "--label-penalty", "1.0"])).label_penalty == 1.0


def test_labels_under_a_penalty_are_the_engines_processed_distribution(tiny_llama):
    """Each position's label is the top-k of the target's logits processed as the window processes them, for the
    context up to that position; with the penalty off the labels are the plain softmax's."""
    from app.engine.core.repetition import process_rows
    from app.engine.settings import RepetitionSettings

    target, _ = head_data.load_target(tiny_llama[0])
    tokens = torch.randint(1, 40, (3, 24), generator=torch.Generator().manual_seed(3))  # a small id range: repeats
    plain = head_data.target_outputs(target, tokens, (1,))
    penalised = head_data.target_outputs(target, tokens, (1,), penalty=1.5)
    assert torch.equal(plain["features"][1], penalised["features"][1])
    with torch.no_grad():
        logits = target(input_ids=tokens).logits  # (S, T, V)
    settings = RepetitionSettings(penalty=1.5)
    for s in range(tokens.shape[0]):
        rows = process_rows(logits[s], torch.empty(0, dtype=torch.long), [tokens[s, : t + 1] for t in range(24)],
                            settings)  # (T, V)
        expected = torch.softmax(rows, -1).topk(head_data.LABEL_TOP, dim=-1)
        assert torch.equal(penalised["label_ids"][s].long(), expected.indices)
        assert torch.allclose(penalised["label_probs"][s].float(), expected.values, atol=1e-3)
        plain_top = torch.softmax(logits[s], -1).topk(head_data.LABEL_TOP, dim=-1)
        assert torch.equal(plain["label_ids"][s].long(), plain_top.indices)
    assert not torch.equal(plain["label_ids"][:, :, 0], penalised["label_ids"][:, :, 0])  # the penalty acted


def test_heads_are_scored_under_the_labels_penalty():
    """The loss reads each scored row's logits penalised for the context up to its label's position."""
    from app.engine.core.repetition import process_rows
    from app.engine.settings import RepetitionSettings
    from tools.train.head_training.losses import head_loss, soft_ce

    shape = TargetShape(16, 50, 2)
    parts = TargetParts(torch.nn.Embedding(50, 16), torch.nn.Linear(16, 50))
    data = synthetic_data(shape, (1,), sequences=2, length=12)
    data["tokens"] = torch.randint(0, 6, (2, 12), generator=torch.Generator().manual_seed(1))
    batch = head_data.batch_of(data, torch.tensor([[0], [1]]), (1,))
    hidden = torch.randn(2, 4, 16, generator=torch.Generator().manual_seed(2))
    positions = torch.tensor([2, 5, 9, 11])
    run = dataclasses.replace(full_run(1234, "docs"), label_penalty=1.3)
    tokens, _, ids, probs = batch
    with torch.no_grad():
        logits = parts.logits(hidden)
        processed = torch.stack([process_rows(logits[b], torch.empty(0, dtype=torch.long),
                                              [tokens[b, : p + 1] for p in positions.tolist()],
                                              RepetitionSettings(penalty=1.3)) for b in range(2)])
        expected = soft_ce(processed.flatten(0, 1), ids[:, positions].flatten(0, 1), probs[:, positions].flatten(0, 1),
                           torch.ones(8))
        loss = head_loss(parts, hidden, batch, positions, torch.ones(4, dtype=torch.bool), run)
        plain = head_loss(parts, hidden, batch, positions, torch.ones(4, dtype=torch.bool), full_run(1234, "docs"))
    assert torch.allclose(loss, expected) and not torch.allclose(loss, plain)


def test_the_label_penalty_keys_the_labels_and_shares_the_text():
    from tools.train.heads import parse_args, with_overrides

    run = RUNS["broad"](1234, "docs")
    penalised = with_overrides(run, parse_args(["--label-penalty", "1.2"]))
    assert penalised.label_penalty == 1.2 and run.label_penalty == 1.0
    assert penalised.text_fingerprint() == run.text_fingerprint()
    assert penalised.data_fingerprint() != run.data_fingerprint()
    assert run.data_fingerprint() == run.text_fingerprint()  # the keys of heads trained before the option stay


def test_hard_labels_move_a_share_onto_the_argmax_and_share_the_soft_runs_data():
    from tools.train.heads import parse_args

    shape, layers = TargetShape(16, 50, 2), (1, 2)
    data = synthetic_data(shape, layers)
    data["label_probs"] = data["label_probs"].sort(-1, descending=True).values  # top-k comes sorted
    rows = torch.tensor([[0], [3]])
    _, _, ids, soft = head_data.batch_of(data, rows, layers)
    _, _, same_ids, hard = head_data.batch_of(data, rows, layers, hard_label_weight=0.5)
    assert torch.equal(ids, same_ids)
    assert torch.allclose(soft.sum(-1), torch.ones(2, 32)) and torch.allclose(hard.sum(-1), torch.ones(2, 32))
    assert torch.allclose(hard[..., 0], 0.5 * soft[..., 0] + 0.5)
    assert torch.allclose(hard[..., 1:], 0.5 * soft[..., 1:])
    run = full_run(1234, "docs")
    mixed = dataclasses.replace(run, hard_label_weight=0.5)
    assert mixed.data_fingerprint() == run.data_fingerprint() and mixed.fingerprint() != run.fingerprint()
    assert parse_args(["--hard-label-weight", "0.5"]).hard_label_weight == 0.5
    assert parse_args([]).hard_label_weight is None  # the run's own: broad puts half of each label on the argmax
    assert RUNS["broad"](1234, "docs").hard_label_weight == 0.5 and run.hard_label_weight == 0.0


def test_experiment_options_tune_the_run_and_keep_its_data():
    from tools.train.heads import parse_args, with_overrides

    run = RUNS["broad"](1234, "docs")
    tuned = with_overrides(run, parse_args(["--steps", "12000", "--intermediate", "768", "--loss-rows", "0.5",
                                            "--eagle-unroll", "4"]))
    assert {s["steps"] for s in tuned.schedules.values()} == {12000}
    assert all(tuned.schedules[f]["peak_lr"] == run.schedules[f]["peak_lr"] for f in run.schedules)
    assert tuned.arch["eagle"] == {**run.arch["eagle"], "intermediate": 768}
    assert tuned.arch["medusa"] == run.arch["medusa"]  # Medusa's heads have no MLP to widen
    assert tuned.loss_rows == 0.5 and tuned.eagle_unroll == 4 and tuned.hard_label_weight == run.hard_label_weight
    assert tuned.data_fingerprint() == run.data_fingerprint() and tuned.fingerprint() != run.fingerprint()
    assert with_overrides(run, parse_args([])) == run
    slower = with_overrides(run, parse_args(["--peak-lr", "1e-3"]))
    assert {s["peak_lr"] for s in slower.schedules.values()} == {1e-3}
    assert all(slower.schedules[f]["steps"] == run.schedules[f]["steps"] for f in run.schedules)


def test_more_corpus_sequences_make_new_text_and_keep_the_training():
    from tools.train.heads import parse_args, with_overrides, with_text_overrides

    run = RUNS["broad"](1234, "docs")
    args = parse_args(["--corpus-sequences", "28000"])
    wider = with_overrides(with_text_overrides(run, args), args)
    assert wider.corpus_sequences == 28000 and wider.generated_sequences == run.generated_sequences
    assert wider.text_fingerprint() != run.text_fingerprint() and wider.data_fingerprint() != run.data_fingerprint()
    assert wider.schedules == run.schedules and wider.arch == run.arch
    assert with_text_overrides(run, parse_args([])) == run


def test_a_continued_run_is_refused_an_output_folder_that_is_its_start(tmp_path):
    from tools.train.heads import parse_args

    with pytest.raises(SystemExit):
        parse_args(["--init-from", str(tmp_path), "--out", str(tmp_path)])
    assert parse_args(["--init-from", str(tmp_path), "--out", str(tmp_path / "next")]).init_from == tmp_path


def test_a_head_continues_from_an_exported_head_and_records_it(tiny_llama, tmp_path):
    target, _ = head_data.load_target(tiny_llama[0])
    shape = TargetShape.of(target, target.config.num_hidden_layers)
    family = "eagle"
    quick = quick_run(7)
    fresh = dataclasses.replace(quick, schedules={f: {**s, "steps": 4} for f, s in quick.schedules.items()})
    data = synthetic_data(shape, default_config(family, shape).feature_layers)
    config, module = head_family.train_family(family, target, data, fresh, shape, "tiny", "x", tmp_path / "a", 0.0)
    head_family.export(tmp_path / "heads", family, config, module)
    start = tmp_path / "heads" / family
    exported = {k: v.float() for k, v in load_file(str(start / "model.safetensors")).items()}

    # At learning rate 0 (AdamW's decay scales with it too) a continuation must return the head it started from.
    still = dataclasses.replace(fresh, head_init={family: head_family.head_checksum(start)},
                                schedules={f: {**s, "peak_lr": 0.0} for f, s in fresh.schedules.items()})
    assert still.fingerprint() != dataclasses.replace(still, head_init={}).fingerprint()
    continued, module = head_family.train_family(family, target, data, still, shape, "tiny", "x", tmp_path / "b",
                                                 0.0, init=start)
    assert all(torch.equal(exported[k], v) for k, v in module.state_dict().items())
    start_record = continued.training["continues"]
    assert start_record["checksum"] == head_family.head_checksum(start) and start_record["steps"] == 4
    assert start_record["seconds"] == config.training["seconds"] and "continues" not in config.training
    assert lineage_steps(continued.training) == 4 + continued.training["steps"]

    wider = dataclasses.replace(still, arch={**still.arch, family: {**still.arch[family], "intermediate": 96}})
    with pytest.raises(head_family.HeadInitMismatch, match="intermediate"):
        head_family.train_family(family, target, data, wider, shape, "tiny", "x", tmp_path / "c", 0.0, init=start)


class Killed(Exception):
    """Stands in for the process being killed mid-run."""


def synthetic_data(shape: TargetShape, layers: tuple[int, ...], sequences: int = 8, length: int = 32) -> dict:
    generator = torch.Generator().manual_seed(0)
    probs = torch.rand(sequences, length, 8, generator=generator)
    return {"tokens": torch.randint(0, shape.vocab_size, (sequences, length), generator=generator),
            "features": {layer: torch.randn(sequences, length, shape.hidden_size, generator=generator).half()
                         for layer in layers},
            "label_ids": torch.randint(0, shape.vocab_size, (sequences, length, 8), generator=generator).int(),
            "label_probs": (probs / probs.sum(-1, keepdim=True)).half()}


@pytest.mark.parametrize("runtime", [CPU, Runtime("cpu", "bfloat16")], ids=["float32", "bfloat16"])
def test_head_training_resumes_exactly_from_its_checkpoint(tiny_llama, tmp_path, monkeypatch, runtime):
    import dataclasses

    target, _ = head_data.load_target(tiny_llama[0])
    shape = TargetShape.of(target, target.config.num_hidden_layers)
    run = dataclasses.replace(quick_run(7), schedules={f: {**s, "steps": 6} for f, s in quick_run(7).schedules.items()})
    family = "eagle"
    data = synthetic_data(shape, default_config(family, shape).feature_layers)
    real_loss, calls = LOSSES[family], []

    def train(cache: Path, kill_at: int | None = None):
        def loss(*args):
            calls.append(1)
            if len(calls) == kill_at:
                raise Killed
            return real_loss(*args)

        monkeypatch.setitem(LOSSES, family, loss)
        calls.clear()
        _, module = head_family.train_family(family, target, data, run, shape, "tiny", "x", cache, 0.0, runtime)
        return {k: v.clone() for k, v in module.state_dict().items()}

    straight = train(tmp_path / "straight")
    with pytest.raises(Killed):
        train(tmp_path / "resumed", kill_at=4)
    resumed = train(tmp_path / "resumed")
    assert len(calls) == 3  # steps 3, 4, 5 after the checkpoint of step 3
    assert all(v.dtype == torch.float32 and torch.equal(straight[k], v) for k, v in resumed.items())


def test_the_drafters_table_says_how_each_heads_text_was_written_and_labelled():
    from tools.measure.drafters import data_words

    assert data_words({}) == "; text without a repetition penalty"  # heads trained before it was recorded
    assert data_words({"generation_penalty": 1.2}) == "; text under repetition penalty 1.2"
    assert data_words({"generation_penalty": 1.2, "hard_label_weight": 0.5}) == \
        "; text under repetition penalty 1.2; 0.5 of each label on the target's argmax"
    assert data_words({"generation_penalty": 1.2, "label_penalty": 1.2, "hard_label_weight": 0.5}) == \
        "; text under repetition penalty 1.2; labels under repetition penalty 1.2; 0.5 of each label on the " \
        "target's argmax"


def test_the_drafters_table_says_which_heads_a_head_descends_from():
    plain = {"checksum": "a", "steps": 12000, "sequences": 18400}
    continued = {"checksum": "b", "steps": 10000, "sequences": 18400, "continues": plain}
    assert lineage_words(plain) == "12000 steps" and lineage_steps(plain) == 12000
    assert lineage_words(continued) == "10000 steps continuing a head trained 12000 steps"
    assert lineage_steps(continued) == 22000
    soup = {"checksum": "c", "steps": 22000, "sequences": 18400,
            "average_of": [plain, {"checksum": "b", "steps": 22000}]}
    assert lineage_words(soup) == "the average of heads trained 12000 and 22000 steps"
    more = {"checksum": "d", "steps": 3000, "sequences": 30077, "continues": soup}
    assert lineage_words(more) == "3000 steps on 30077 sequences continuing the average of heads trained 12000 " \
                                  "and 22000 steps"
    assert lineage_steps(more) == 25000
    assert lineage_words({"average_of": [soup, more]}) == \
        "the average of (1) the average of heads trained 12000 and 22000 steps and (2) head (1) trained 3000 steps " \
        "more on 30077 sequences"
    assert lineage_steps({"average_of": [soup, more]}) == 25000


def test_an_averaged_head_is_the_mean_of_its_heads_weights_and_lists_them(tiny_llama, tmp_path):
    target, _ = head_data.load_target(tiny_llama[0])
    shape = TargetShape.of(target, target.config.num_hidden_layers)
    family = "eagle"
    data = synthetic_data(shape, default_config(family, shape).feature_layers)
    folders = []
    for seed in (7, 8):
        quick = quick_run(seed)
        run = dataclasses.replace(quick, schedules={f: {**s, "steps": 3} for f, s in quick.schedules.items()})
        config, module = head_family.train_family(family, target, data, run, shape, "tiny", "x",
                                                  tmp_path / f"cache{seed}", 0.0)
        head_family.export(tmp_path / f"heads{seed}", family, config, module)
        folders.append(tmp_path / f"heads{seed}" / family)
    weights = [{k: v.float() for k, v in load_file(str(f / "model.safetensors")).items()} for f in folders]

    config, module = head_family.averaged_head(folders)
    assert all(torch.equal(v, (weights[0][k] + weights[1][k]) / 2) for k, v in module.state_dict().items())
    assert [m["checksum"] for m in config.training["average_of"]] == [head_family.head_checksum(f) for f in folders]
    assert [m["steps"] for m in config.training["average_of"]] == [3, 3] and "final_loss" not in config.training
    _, same = head_family.averaged_head([folders[0], folders[0]])
    assert all(torch.equal(v, weights[0][k]) for k, v in same.state_dict().items())

    assert lineage_words(config.training) == "the average of heads trained 3 and 3 steps"

    wide = default_config(family, shape, "tiny", **{**quick_run(7).arch[family], "intermediate": 96})
    head_family.export(tmp_path / "wide", family, wide, build_module(wide))
    with pytest.raises(head_family.HeadInitMismatch, match="intermediate"):
        head_family.averaged_head([folders[0], tmp_path / "wide" / family])


def test_averaging_refuses_one_head_and_an_output_among_its_inputs(tmp_path):
    from tools.train.average_heads import parse_args

    with pytest.raises(SystemExit):
        parse_args(["--family", "eagle", "--heads", str(tmp_path), "--out", str(tmp_path / "o")])
    with pytest.raises(SystemExit):
        parse_args(["--family", "eagle", "--heads", str(tmp_path), "--heads", str(tmp_path / "b"),
                    "--out", str(tmp_path)])
