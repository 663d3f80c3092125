"""Command line: `gui` (default), headless `run`, `bench` and `screenshot`.

    python -m app                       open the window
    python -m app run --prompt "..."    print the text, or JSON lines with --jsonl
    python -m app bench methods         compare every method with autoregressive and HF generate
    python -m app bench trees | asd     chains against trees; ASD's speed / fidelity sweep
    python -m app screenshot PATH       render the window after a real generation

Options before any subcommand belong to `gui`: `python main.py --target FOLDER` opens the window on FOLDER.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import NoReturn

from app import __version__
from app.engine.drafters.published.formats import READS, checkpoint_option, checkpoints_from
from app.engine.drafters.registry import BRANCHING_DRAFTERS, DRAFTER_NAMES, HEAD_FAMILIES
from app.engine.runtime.execution import CACHE_MODES, check_execution, default_words
from app.engine.settings import NO_DRAFTER, SettingsError

DRAFTER_CHOICES = (*DRAFTER_NAMES, NO_DRAFTER)


class CommandLineParser(argparse.ArgumentParser):
    """argparse whose errors are one line, `PROG: error: MESSAGE (see --help)`, with exit status 2."""

    commands: dict[str, argparse.ArgumentParser]

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


class HelpWithDefaults(argparse.RawDescriptionHelpFormatter):
    """Every option's help ends with its default, unless the help already names it."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if (not action.option_strings or action.default is argparse.SUPPRESS or action.default is None
                or "default" in text or "required" in text):
            return text
        if action.nargs == 0:  # a switch
            return f"{text} (default: {'on' if action.default else 'off'})"
        return f"{text} (default: %(default)s)"


def _whole_number(minimum: int):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum} (got {value})")
        return value
    parse.__name__ = "whole number"  # argparse names the type in its messages
    return parse


def _add_model_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("models")
    group.add_argument("--target", help="hub id or folder of the target model (default: the bundled demo family)")
    group.add_argument("--draft-model", help="hub id or folder of a draft model sharing the target's tokenizer "
                                             "(default: the demo draft model with the demo target, else none)")
    group.add_argument("--device", default="auto", help="auto (cuda > mps > cpu), cpu, cuda, cuda:N or mps")
    group.add_argument("--dtype", default="auto", help="auto (bfloat16 or float16 on a GPU, float32 on the CPU), "
                                                       "float32, float16 or bfloat16")
    group.add_argument("--device-map", choices=["auto"],
                       help="spread a large target over devices (accelerate) (default: one device)")
    group.add_argument("--heads", help=f"folder of trained heads ({', '.join(HEAD_FAMILIES)}) for this target "
                                       "(default: none; the demo target's heads load by themselves)")
    for name, formats in READS.items():
        group.add_argument(checkpoint_option(name), metavar="PATH_OR_HUB_ID",
                           help=f"a published checkpoint for the {name} drafter, trained for this target: folder "
                                f"or hub id; reads {', '.join(formats)}, the format detected (default: none; it "
                                f"replaces the {name} head of --heads)")


def _add_execution_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("how the models run")
    group.add_argument("--cache", choices=CACHE_MODES,
                       help="KV cache: dynamic (grows, cropped on a rollback) or static (preallocated, rolled back "
                            f"by moving its write position; fixed shapes) (default: {default_words(0)})")
    group.add_argument("--compile", action=argparse.BooleanOptionalAction,
                       help="compile the one-token and verification forwards with torch.compile (CUDA graphs on "
                            "CUDA; needs the static cache, which it implies), every shape while the models load "
                            "(minutes on a CPU; the steps are shown on stderr); a failed compile falls back to eager "
                            f"forwards with a notice (default: {default_words(1)})")


def execution_request(args) -> dict:
    """--cache and --compile as load_models' arguments, checked (SettingsError says what is allowed)."""
    check_execution(args.cache, args.compile)
    return dict(cache=args.cache, compile=args.compile)


def load_steps(args) -> LoadSteps | None:
    """The loader's progress on stderr when the models will be compiled: the compiles take minutes, and each
    step says what is being compiled. Other loads take seconds and say nothing."""
    from app.engine.runtime.devices import resolve_device
    from app.engine.runtime.execution import resolve_execution

    compiles = resolve_execution(args.cache, args.compile, resolve_device(args.device)).compiles
    return LoadSteps() if compiles else None


class LoadSteps:
    """A `progress(fraction, message)` for the loader that prints each step on stderr ('[ 35%] compiling target:
    verify 8 rows (3/16)'); a download's byte counts at most once a second."""

    def __init__(self, stream=None) -> None:
        self.stream = stream
        self._download_printed = float("-inf")

    def __call__(self, fraction: float, message: str) -> None:
        import time

        if message.startswith("downloading ") and fraction < 1.0:
            now = time.monotonic()
            if now - self._download_printed < 1.0:
                return
            self._download_printed = now
        print(f"[{fraction:4.0%}] {message}", file=self.stream or sys.stderr, flush=True)


def _add_decode_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("decoding")
    group.add_argument("--drafter", action="append", choices=DRAFTER_CHOICES,
                       help="drafter; repeat to form a fallback chain in the order given (default: draft-model "
                            "when one is loaded, else prompt-lookup)")
    group.add_argument("--verify", choices=["greedy", "sample", "asd"], default="greedy",
                       help="verification rule: greedy (exact), sample (lossless sampling) or asd (approximate)")
    group.add_argument("--k", type=int, default=4, help="draft tokens per pass, 1 to 64")
    group.add_argument("--adaptive-k", action="store_true", help="+2 after a fully accepted block, -1 otherwise")
    group.add_argument("--tree", type=int, metavar="N",
                       help="draft a token tree of at most N nodes, K levels deep, verified in one forward "
                            f"(drafters that branch: {', '.join(BRANCHING_DRAFTERS)}); default: a chain")
    group.add_argument("--temperature", type=float, default=1.0, help="sampling temperature, > 0 (sample rule)")
    group.add_argument("--top-k", type=int, default=0, help="keep the k likeliest tokens, 0 = off (sample rule)")
    group.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling mass in (0, 1] (sample rule)")
    _add_repetition_options(group, unset="what the models suggest (the bundled family's playground.json), else off")
    group.add_argument("--asd-budget", type=float, default=8.0, help="ASD request budget B, >= 0")
    group.add_argument("--asd-gate", type=float, default=0.25, help="ASD gate g, >= 0")
    group.add_argument("--asd-cap", type=int, default=2, help="ASD block cap M, >= 0")
    group.add_argument("--exit-layer", type=int,
                       help="layer skip: run the first E layers (default: the model's recommended exit)")
    group.add_argument("--max-new-tokens", type=int, default=128, help="tokens to generate at most")
    group.add_argument("--seed", type=int, default=0, help="random seed of the sample rule, >= 0")
    group.add_argument("--chat-template", action="store_true", help="wrap the prompt in the tokenizer's chat template")


def _add_repetition_options(group, unset: str = "off") -> None:
    """`unset`: what an option left out means (off, or what the loaded models suggest)."""
    group.add_argument("--repetition-penalty", type=float, default=None,
                       help="divide the positive logits of tokens already in the text by this and multiply the "
                            "negative ones, > 0, 1.0 = off, as Hugging Face's repetition_penalty, under every rule "
                            f"(default: {unset})")
    group.add_argument("--no-repeat-ngram-size", type=int, default=None, metavar="N",
                       help="never repeat an N-gram of the text, 0 = off, as Hugging Face's no_repeat_ngram_size, "
                            f"under every rule (default: {unset})")


def repetition_from_args(args, unset=None):
    """--repetition-penalty and --no-repeat-ngram-size, validated (SettingsError says what is allowed); an option
    left out takes its value from `unset` (a RepetitionSettings; None: off)."""
    from app.engine.settings import RepetitionSettings

    unset = unset or RepetitionSettings()
    return RepetitionSettings(unset.penalty if args.repetition_penalty is None else args.repetition_penalty,
                              unset.no_repeat_ngram if args.no_repeat_ngram_size is None else args.no_repeat_ngram_size)


def build_parser() -> CommandLineParser:
    parser = CommandLineParser(prog="spec-playground", description=__doc__, formatter_class=HelpWithDefaults)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command")
    gui = commands.add_parser("gui", help="open the window (the default)", formatter_class=HelpWithDefaults)
    _add_model_options(gui)
    run = commands.add_parser("run", help="generate headless; print the text or JSON lines",
                              formatter_class=HelpWithDefaults)
    run.add_argument("--prompt", required=True, help="the text to continue (required)")
    run.add_argument("--jsonl", action="store_true", help="one JSON object per event on stdout")
    _add_model_options(run)
    _add_execution_options(run)
    _add_decode_options(run)
    bench = commands.add_parser("bench", help="measure: methods, trees or asd (bench KIND --help for each)",
                                formatter_class=HelpWithDefaults)
    kinds = bench.add_subparsers(dest="bench_command", required=True, metavar="KIND",
                                 parser_class=CommandLineParser)
    methods = kinds.add_parser("methods", help="every method against autoregressive decoding and HF generate",
                               formatter_class=HelpWithDefaults)
    methods.add_argument("--only", action="append",
                         help="run only these methods besides ours:autoregressive; repeat for more (default: all)")
    _add_repetition_options(methods.add_argument_group("repetition controls (our methods and Hugging Face's alike)"))
    trees = kinds.add_parser("trees", help="each drafter's chain against its token trees (docs/ALGORITHMS.md §9)",
                             formatter_class=HelpWithDefaults)
    trees.add_argument("--budgets", dest="tree_budgets", type=_number_list(int),
                       help="node budgets N (default: 4,8,16,32)")
    trees.add_argument("--drafter", dest="tree_drafter", action="append", choices=DRAFTER_NAMES,
                       help="drafters to compare, repeatable (default: draft-model, eagle, medusa, prompt-lookup)")
    asd = kinds.add_parser("asd", help="sweep ASD's B, g and M for each drafter against strict greedy: speed and "
                           "fidelity, the frontier, the defaults marked", formatter_class=HelpWithDefaults)
    asd.add_argument("--budgets", type=_number_list(float), help="B values, e.g. 0,8,inf "
                     "(default: 0,1,2,4,8,16,32,inf; --quick: 0,8,inf)")
    asd.add_argument("--gates", type=_number_list(float), help="g values (default: 0.1,0.25,0.5,1; --quick: 0.25)")
    asd.add_argument("--caps", type=_number_list(int), help="M values (default: 1,2,4; --quick: 2)")
    asd.add_argument("--drafter", dest="asd_drafter", action="append", choices=DRAFTER_NAMES,
                     help="drafter to sweep; repeat for more (default: draft-model, eagle, medusa, prompt-lookup, "
                          "those available)")
    asd.add_argument("--max-prompts", type=_whole_number(1), help="only the first N prompts (default: all)")
    asd.add_argument("--max-new-tokens", type=_whole_number(1),
                     help="cut every prompt to at most N new tokens (default: each prompt's own)")
    asd.add_argument("--plot", help="also draw the frontier to this PNG (default: no picture)")
    for kind in (methods, trees, asd):
        _add_bench_options(kind)
    shot = commands.add_parser("screenshot", help="render the window after a real generation to a PNG",
                               formatter_class=HelpWithDefaults)
    shot.add_argument("path")
    shot.add_argument("--prompt", help="default: the guide's fallback-chain example")
    shot.add_argument("--size", type=_window_size, default=(1500, 950), metavar="WxH",
                      help="window size in pixels (default: 1500x950)")
    _add_model_options(shot)
    parser.commands = {"gui": gui, "run": run, "bench": bench, "screenshot": shot,
                       "bench methods": methods, "bench trees": trees, "bench asd": asd}
    return parser


def _add_bench_options(bench: argparse.ArgumentParser) -> None:
    """What every kind of bench takes: the models, how they run, the prompts, the repeats and the output."""
    bench.add_argument("--k", type=int, default=4, help="draft tokens per pass, 1 to 64")
    bench.add_argument("--repeats", type=_whole_number(1),
                       help="interleaved repeats after one warm-up (default: 3; 1 with --quick)")
    bench.add_argument("--quick", action="store_true",
                       help="a first look in about a minute: 2 prompts cut to 32 new tokens, 1 repeat, the main "
                            "methods; rough figures, not a measurement")
    bench.add_argument("--prompts", help="JSON prompt set: a list like the committed assets/bench/prompts.json (the "
                       "default), or a held-out set like tools/train/demo_training/heldout_prompts.json")
    bench.add_argument("--json", dest="json_path", help="also write the results as JSON here (default: no file)")
    bench.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    bench.add_argument("--threads", type=_whole_number(1), help="torch CPU threads (default: torch's choice)")
    bench.add_argument("--progress", action=argparse.BooleanOptionalAction,
                       help="a progress bar with the time left on stderr (default: when stderr is a terminal)")
    _add_model_options(bench)
    _add_execution_options(bench)


def _number_list(kind):
    def parse(text: str) -> list:
        try:
            values = [kind(part) for part in text.split(",") if part.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected numbers separated by commas, got {text!r}") from None
        if not values or any(v < 0 for v in values):
            raise argparse.ArgumentTypeError(f"expected numbers >= 0 separated by commas, got {text!r}")
        return values
    parse.__name__ = f"list of {kind.__name__}"
    return parse


def _window_size(text: str) -> tuple[int, int]:
    try:
        width, height = (int(part) for part in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected WIDTHxHEIGHT in pixels, e.g. 1600x1000 (got {text!r})") from None
    if width < 200 or height < 200:
        raise argparse.ArgumentTypeError(f"a window needs at least 200x200 pixels (got {text})")
    return width, height


def settings_from_args(args, summary=None):
    """The run's settings, validated by the settings dataclasses (SettingsError says what is allowed).

    Without --drafter the chain depends on the loaded models, and so do repetition options left out: with
    `summary` None the chain is left empty and the controls off, to be filled by `with_model_defaults` once
    they are loaded.
    """
    from app.engine.settings import AsdSettings, DecodeSettings, DrafterOptions, SamplingSettings

    settings = DecodeSettings(
        drafters=tuple(args.drafter or ()), k=args.k, adaptive_k=args.adaptive_k, verify=args.verify,
        sampling=SamplingSettings(args.temperature, args.top_k, args.top_p), repetition=repetition_from_args(args),
        asd=AsdSettings(args.asd_budget, args.asd_gate, args.asd_cap),
        options=DrafterOptions(layer_skip_exit=args.exit_layer),
        max_new_tokens=args.max_new_tokens, seed=args.seed, tree=args.tree,
    )
    check_tree_drafters(settings)
    return settings if summary is None else with_model_defaults(settings, args, summary)


def check_tree_drafters(settings) -> None:
    """With --tree, every drafter named must be able to branch."""
    chains_only = [name for name in settings.drafters if name not in BRANCHING_DRAFTERS]
    if settings.tree is not None and chains_only:
        raise SettingsError(f"--tree: {', '.join(chains_only)} cannot draft a tree; drafters that can: "
                            f"{', '.join(BRANCHING_DRAFTERS)}")


def with_model_defaults(settings, args, summary):
    """--drafter as given, else draft-model when one is loaded, else prompt-lookup; the repetition options as given,
    else what the models suggest."""
    settings = settings.with_changes(repetition=repetition_from_args(args, summary.suggested_repetition))
    if args.drafter:
        return settings
    return settings.with_changes(drafters=("draft-model",) if summary.draft_name is not None else ("prompt-lookup",))


def check_prompt(prompt: str) -> None:
    if not prompt.strip():
        raise SettingsError("the prompt is empty: give some text to continue with --prompt")
    try:
        prompt.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise SettingsError(f"the prompt holds characters that are not valid Unicode at position {exc.start} "
                            "(bytes in another encoding than the terminal's?)") from None


def check_model_paths(args) -> None:
    """Local folders that do not exist or hold no model (hub ids are left to the loader)."""
    from app.engine.paths import heads_folder_problem, looks_like_path, model_path_problem

    for option, name in (("--target", args.target), ("--draft-model", args.draft_model)):
        problem = name and model_path_problem(name)
        if problem:
            raise SettingsError(f"{option}: {problem}")
    problem = args.heads and heads_folder_problem(args.heads)
    if problem:
        raise SettingsError(f"--heads: {problem}")
    for name, source in drafter_checkpoints(args).items():
        if looks_like_path(source) and not Path(source).expanduser().is_dir():
            raise SettingsError(f"--{name}: drafter checkpoint folder {source!r} does not exist; check the path.")


def drafter_checkpoints(args) -> dict[str, str]:
    """The published drafter checkpoints given (--eagle ...), as load_models' `drafters`."""
    return checkpoints_from({name: getattr(args, name, None) for name in READS})


def check_device(args) -> None:
    """The device exists here and the dtype is known (imports torch, loads nothing)."""
    from app.engine.errors import ModelLoadError
    from app.engine.runtime.devices import resolve_device, resolve_dtype

    try:
        resolve_dtype(args.dtype, resolve_device(args.device))
    except ModelLoadError as exc:
        raise SettingsError(str(exc)) from None


def run_headless(args, fail=None) -> int:
    """Validate every argument, then load the models and generate. `fail(message)` reports an argument error
    (the subcommand's parser.error: one line, exit status 2)."""
    fail = fail or _fail
    try:
        settings = settings_from_args(args)
        check_prompt(args.prompt)
        check_model_paths(args)
        check_device(args)
        execution = execution_request(args)
    except SettingsError as exc:
        fail(str(exc))
    check_prompt_fits_target(args)  # before the weights load: a too-long prompt is refused in a moment
    from app.engine.engine import LocalEngine
    from app.engine.events import EndEvent, NoticeEvent, to_json_line
    from app.engine.load_request import LoadRequest

    engine = LocalEngine.load(LoadRequest(target=args.target, draft=args.draft_model, device=args.device,
                                          dtype=args.dtype, device_map=args.device_map, heads=args.heads,
                                          drafters=tuple(drafter_checkpoints(args).items()), **execution),
                              load_steps(args))
    settings = with_model_defaults(settings, args, engine.summary)
    ascii_only = not _stdout_takes_unicode()
    end = None
    # The inspector's detail goes into the JSON lines; printed text has no use for it.
    for event in engine.generate(args.prompt, settings, chat_template=args.chat_template, inspect=args.jsonl):
        if args.jsonl:
            print(to_json_line(event, ensure_ascii=ascii_only), flush=True)
        elif isinstance(event, NoticeEvent):
            print(f"warning: {event.message}", file=sys.stderr)
        end = event
    if not args.jsonl and isinstance(end, EndEvent):
        print(end.text)
    if isinstance(end, EndEvent) and end.reason == "error":
        print(f"error: {end.error}", file=sys.stderr)
        return 1
    return 0


def check_prompt_fits_target(args) -> None:
    """Tokenize the prompt with the target's tokenizer and refuse it (ContextTooLongError) when the target's
    context cannot hold it; reads no weights."""
    from app.engine.loading.context import check_prompt_before_loading
    from app.engine.loading.load import DEMO_DIR, demo_manifest

    target = args.target or str(DEMO_DIR / demo_manifest()["target"])
    check_prompt_before_loading(target, args.prompt, args.chat_template)


def _stdout_takes_unicode() -> bool:
    """Whether stdout encodes any text; if not (a legacy console code page), JSON lines escape it as \\uXXXX."""
    encoding = (getattr(sys.stdout, "encoding", None) or "ascii").lower().replace("-", "").replace("_", "")
    return encoding.startswith("utf")


def _never_fail_on_output() -> None:
    """Text a console cannot show (emoji on a legacy code page, stray surrogates) is escaped, not a crash."""
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")


def _fail(message: str) -> NoReturn:
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(2)


def run_bench(args, fail=None) -> int:
    """Validate every argument and read the prompt set, then load the models and run the benchmark."""
    from pathlib import Path

    from app.engine.settings import DecodeSettings

    fail = fail or _fail
    try:
        DecodeSettings(drafters=(), k=args.k)  # the rule K obeys in every run
        repetition = repetition_from_args(args) if args.bench_command == "methods" else None
        if args.prompts and not Path(args.prompts).expanduser().is_file():
            raise SettingsError(f"--prompts: no file {args.prompts!r}")
        check_model_paths(args)
        check_device(args)
        execution_request(args)
    except SettingsError as exc:
        fail(str(exc))
    import platform

    import torch

    from app.bench import methods as bench

    try:
        prompts = bench.load_prompts(Path(args.prompts).expanduser()) if args.prompts else bench.load_prompts()
    except (OSError, ValueError, TypeError) as exc:
        fail(f"--prompts: {args.prompts!r} is not a prompt set ({exc}); see assets/bench/prompts.json for the format")
    if not prompts:
        fail(f"--prompts: {args.prompts!r} holds no prompt")
    repeats = args.repeats or (1 if args.quick else 3)
    if args.quick:
        prompts = bench.quick_prompts(prompts)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.progress is not False:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # our bar is the one to watch
    if args.bench_command == "asd":
        return run_asd_sweep(args, prompts, fail)
    if args.bench_command == "trees":
        return run_tree_comparison(args, prompts, repeats)
    only = set(args.only or ()) or (set(bench.QUICK_METHODS) if args.quick else set())
    models = load_bench_models(args)
    with ProgressBar(args.progress) as (progress, step):
        results = bench.benchmark(models, prompts, k=args.k, repeats=repeats, only=only, progress=progress, step=step,
                                  repetition=repetition)
    if args.quick:
        print(f"quick run (--quick): {len(prompts)} prompts cut to {bench.QUICK_MAX_NEW_TOKENS} new tokens, "
              f"{repeats} repeat(s), {len(results)} methods; rough figures, run without --quick to measure")
    print(bench.markdown_table(results) if args.markdown else bench.plain_table(results))
    if args.json_path:
        demo = args.target is None
        meta = {"target": "bundled demo family" if demo else models.target_name,
                "draft": "bundled demo family" if demo else models.draft_name, "device": str(models.device),
                "dtype": str(models.dtype), "execution": models.execution.label, "k": args.k, "repeats": repeats,
                "quick": args.quick,
                "repetition": {"penalty": repetition.penalty, "no_repeat_ngram": repetition.no_repeat_ngram},
                "prompts": [p.name for p in prompts], "threads": torch.get_num_threads(),
                "machine": platform.platform(), "processor": platform.processor(),
                **bench.software_versions(models.device)}
        with open(args.json_path, "w") as out:
            out.write(bench.to_json(results, meta))
    return 0


def load_bench_models(args):
    """The benchmark's models, run as --cache and --compile say."""
    from app.engine.loading import load_models

    return load_models(args.target, args.draft_model, args.device, args.dtype, args.device_map, heads=args.heads,
                       drafters=drafter_checkpoints(args), progress=load_steps(args), **execution_request(args))


def run_tree_comparison(args, prompts, repeats: int) -> int:
    """`bench trees`: each drafter's chain against its trees (app/bench/trees.py)."""
    import json
    from dataclasses import asdict

    from app.bench import trees as tree_bench

    models = load_bench_models(args)
    with ProgressBar(args.progress) as (progress, step):
        results = tree_bench.compare(models, prompts, args.tree_drafter or tree_bench.DRAFTERS,
                                     args.tree_budgets or tree_bench.BUDGETS, k=args.k, repeats=repeats,
                                     progress=progress, step=step)
    print(tree_bench.table(results, markdown=args.markdown))
    if args.json_path:
        with open(args.json_path, "w") as out:
            json.dump({"k": args.k, "repeats": repeats, "prompts": [p.name for p in prompts],
                       "results": [asdict(r) for r in results]}, out, indent=1)
    return 0


def run_asd_sweep(args, prompts, fail) -> int:
    """`bench asd`: the sweep of app/bench/asd.py, its table, JSON and frontier picture."""
    import platform
    import time

    import torch

    from app.bench import asd as asd_sweep
    from app.bench import methods as bench
    from app.engine.settings import AsdSettings

    quick = args.quick
    budgets = args.budgets or (asd_sweep.QUICK_BUDGETS if quick else asd_sweep.BUDGETS)
    gates = args.gates or (asd_sweep.QUICK_GATES if quick else asd_sweep.GATES)
    caps = args.caps or (asd_sweep.QUICK_CAPS if quick else asd_sweep.CAPS)
    try:
        for b in budgets:
            AsdSettings(b, gates[0], caps[0])
        points = asd_sweep.grid(budgets, gates, caps)
    except SettingsError as exc:
        fail(str(exc))
    repeats = args.repeats or (1 if quick else 3)
    if quick:
        prompts = bench.quick_prompts(prompts)
    if args.max_prompts:
        prompts = prompts[: args.max_prompts]
    if args.max_new_tokens:
        prompts = bench.quick_prompts(prompts, len(prompts), args.max_new_tokens)
    torch.set_num_threads(args.threads or 1)  # one thread: the sweep compares rules, not thread scaling
    models = load_bench_models(args)
    started = time.perf_counter()
    with ProgressBar(args.progress) as (progress, step):
        try:
            result = asd_sweep.sweep(models, prompts, points, k=args.k, repeats=repeats, drafters=args.asd_drafter,
                                     progress=progress, step=step)
        except ValueError as exc:
            fail(str(exc))
    demo = args.target is None
    result.meta = {"target": "bundled demo family" if demo else models.target_name,
                   "draft": "bundled demo family" if demo else models.draft_name, "device": str(models.device),
                   "dtype": str(models.dtype), "k": args.k, "repeats": repeats, "quick": quick,
                   "budgets": [b if b != float("inf") else "inf" for b in budgets], "gates": list(gates),
                   "caps": list(caps), "greedy_every": asd_sweep.GREEDY_EVERY,
                   "prompts": [p.name for p in prompts], "max_new_tokens": [p.max_new_tokens for p in prompts],
                   "threads": torch.get_num_threads(), "seconds": round(time.perf_counter() - started, 1),
                   "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
                   "machine": platform.platform(), "processor": platform.processor(),
                   **bench.software_versions(models.device)}
    if quick:
        print(f"quick run (--quick): {len(prompts)} prompts cut to {bench.QUICK_MAX_NEW_TOKENS} new tokens, "
              f"{repeats} repeat(s), {len(points)} points; rough figures, run without --quick to measure")
    for strict in result.strict:
        print(f"strict greedy {strict.drafter}: {strict.tokens_per_s:.1f} tokens/s, "
              f"{strict.tokens_per_pass:.2f} tokens/pass")
    print(asd_sweep.table(result, markdown=args.markdown))
    if args.json_path:
        Path(args.json_path).write_text(asd_sweep.to_json(result))
    if args.plot:
        import json

        from app.asd_plot import save_frontier_png

        save_frontier_png(json.loads(asd_sweep.to_json(result)), args.plot)
    return 0


class ProgressBar:
    """A tqdm bar on stderr over the benchmark's generations, with the time left; `shown` None = only when
    stderr is a terminal."""

    def __init__(self, shown: bool | None) -> None:
        from tqdm import tqdm

        self.bar = tqdm(total=None, desc="bench", unit="run", file=sys.stderr,
                        disable=None if shown is None else not shown,
                        dynamic_ncols=True, bar_format="{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} runs "
                                                       "[{elapsed}<{remaining}{postfix}]")

    def __enter__(self):
        return self.progress, self.step

    def __exit__(self, *exc_info) -> None:
        self.bar.close()

    def progress(self, message: str) -> None:
        self.bar.set_description_str(message)

    def step(self, done: int, total: int, method: str) -> None:
        if self.bar.total != total:
            self.bar.total = total
        self.bar.set_postfix_str(method, refresh=False)
        self.bar.update(done - self.bar.n)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0].startswith("-") and argv[0] not in ("-h", "--help", "--version"):
        argv = ["gui", *argv]
    args, unknown = parser.parse_known_args(argv)
    command = args.command or "gui"
    if unknown:  # named by the subcommand's parser, whose --help lists what it takes
        named = f"bench {args.bench_command}" if args.command == "bench" else args.command
        (parser.commands.get(named) or parser).error(f"unrecognized arguments: {' '.join(unknown)}")
    _never_fail_on_output()
    try:
        if command == "run":
            return run_headless(args, parser.commands["run"].error)
        if command == "bench":
            return run_bench(args, parser.commands[f"bench {args.bench_command}"].error)
        if command == "screenshot":
            try:
                check_model_paths(args)
            except SettingsError as exc:
                parser.commands["screenshot"].error(str(exc))
            from app.launch import render_screenshot

            render_screenshot(args.path, prompt=args.prompt, target=args.target, draft=args.draft_model,
                              size=args.size)
            return 0
        from app.engine.remote import EngineProcessStarter  # neither torch nor Qt

        engines = EngineProcessStarter()  # first: the engine imports torch while the window imports Qt and starts
        from app.launch import run_gui

        return run_gui(sys.argv[:1], target=getattr(args, "target", None), draft=getattr(args, "draft_model", None),
                       device=getattr(args, "device", None), dtype=getattr(args, "dtype", None), engines=engines)
    except Exception as exc:
        from app.engine.errors import EngineError

        if isinstance(exc, EngineError | SettingsError):
            print(f"error: {exc}", file=sys.stderr)
            return 2
        raise
