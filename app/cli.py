"""Command line: `gui` (default), headless `run`, `bench` and `screenshot`.

    python -m app                       open the window
    python -m app run --prompt "..."    print the text, or JSON lines with --jsonl
    python -m app bench                 compare every method with autoregressive and HF generate
    python -m app screenshot PATH       render the window after a real generation

Options before any subcommand belong to `gui`: `python main.py --target FOLDER` opens the window on FOLDER.
"""

from __future__ import annotations

import argparse
import sys

from app import __version__
from app.engine.drafters.registry import DRAFTER_NAMES, HEAD_FAMILIES
from app.engine.settings import NO_DRAFTER

DRAFTER_CHOICES = (*DRAFTER_NAMES, NO_DRAFTER)


def _add_model_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("models")
    group.add_argument("--target", help="hub id or folder of the target model (default: the bundled demo family)")
    group.add_argument("--draft-model", help="hub id or folder of a draft model sharing the target's tokenizer")
    group.add_argument("--device", default="auto", help="auto (cuda > mps > cpu), cpu, cuda, cuda:N or mps")
    group.add_argument("--dtype", default="auto", help="auto, float32, float16 or bfloat16")
    group.add_argument("--device-map", choices=["auto"], help="spread a large target over devices (accelerate)")
    group.add_argument("--heads", help=f"folder of trained heads ({', '.join(HEAD_FAMILIES)}) for this target; "
                                       "the demo target's heads load by themselves")


def _add_decode_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("decoding")
    group.add_argument("--drafter", action="append", choices=DRAFTER_CHOICES,
                       help="drafter; repeat to form a fallback chain in the order given (default: draft-model "
                            "when one is loaded, else prompt-lookup)")
    group.add_argument("--verify", choices=["greedy", "sample", "asd"], default="greedy")
    group.add_argument("--k", type=int, default=4, help="draft tokens per pass")
    group.add_argument("--adaptive-k", action="store_true", help="+2 after a fully accepted block, -1 otherwise")
    group.add_argument("--temperature", type=float, default=1.0)
    group.add_argument("--top-k", type=int, default=0)
    group.add_argument("--top-p", type=float, default=1.0)
    group.add_argument("--asd-budget", type=float, default=8.0, help="ASD request budget B")
    group.add_argument("--asd-gate", type=float, default=0.25, help="ASD gate g")
    group.add_argument("--asd-cap", type=int, default=2, help="ASD block cap M")
    group.add_argument("--exit-layer", type=int, help="layer skip: run the first E layers")
    group.add_argument("--max-new-tokens", type=int, default=128)
    group.add_argument("--seed", type=int, default=0)
    group.add_argument("--chat-template", action="store_true", help="wrap the prompt in the tokenizer's chat template")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="spec-playground", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command")
    gui = commands.add_parser("gui", help="open the window (the default)")
    _add_model_options(gui)
    run = commands.add_parser("run", help="generate headless; print the text or JSON lines")
    run.add_argument("--prompt", required=True)
    run.add_argument("--jsonl", action="store_true", help="one JSON object per event on stdout")
    _add_model_options(run)
    _add_decode_options(run)
    bench = commands.add_parser("bench", help="benchmark against autoregressive decoding and HF generate")
    bench.add_argument("--k", type=int, default=4)
    bench.add_argument("--repeats", type=int, default=3, help="interleaved repeats after one warm-up")
    bench.add_argument("--prompts", help="JSON prompt set (default: the committed assets/bench/prompts.json)")
    bench.add_argument("--only", action="append", help="run only these methods (besides ours:autoregressive)")
    bench.add_argument("--json", dest="json_path", help="also write the results as JSON here")
    bench.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    bench.add_argument("--threads", type=int, help="torch CPU threads")
    _add_model_options(bench)
    shot = commands.add_parser("screenshot", help="render the window after a real generation to a PNG")
    shot.add_argument("path")
    shot.add_argument("--prompt", help="default: the guide's fallback-chain example")
    shot.add_argument("--size", type=_window_size, default=(1500, 950), metavar="WxH",
                      help="window size in pixels (default: 1500x950)")
    _add_model_options(shot)
    return parser


def _window_size(text: str) -> tuple[int, int]:
    try:
        width, height = (int(part) for part in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected WIDTHxHEIGHT in pixels, e.g. 1600x1000 (got {text!r})") from None
    if width < 200 or height < 200:
        raise argparse.ArgumentTypeError(f"a window needs at least 200x200 pixels (got {text})")
    return width, height


def settings_from_args(args, summary):
    from app.engine.settings import AsdSettings, DecodeSettings, DrafterOptions, SamplingSettings

    drafters = tuple(args.drafter) if args.drafter else (
        ("draft-model",) if summary.draft_name is not None else ("prompt-lookup",))
    return DecodeSettings(
        drafters=drafters, k=args.k, adaptive_k=args.adaptive_k, verify=args.verify,
        sampling=SamplingSettings(args.temperature, args.top_k, args.top_p),
        asd=AsdSettings(args.asd_budget, args.asd_gate, args.asd_cap),
        options=DrafterOptions(layer_skip_exit=args.exit_layer),
        max_new_tokens=args.max_new_tokens, seed=args.seed,
    )


def run_headless(args) -> int:
    from app.engine.engine import LocalEngine
    from app.engine.events import EndEvent, NoticeEvent, to_json_line

    engine = LocalEngine.load(dict(target=args.target, draft=args.draft_model, device=args.device, dtype=args.dtype,
                                   device_map=args.device_map, heads=args.heads))
    settings = settings_from_args(args, engine.summary)
    ascii_only = not _stdout_takes_unicode()
    end = None
    for event in engine.generate(args.prompt, settings, chat_template=args.chat_template):
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


def _stdout_takes_unicode() -> bool:
    """Whether stdout encodes any text; if not (a legacy console code page), JSON lines escape it as \\uXXXX."""
    encoding = (getattr(sys.stdout, "encoding", None) or "ascii").lower().replace("-", "").replace("_", "")
    return encoding.startswith("utf")


def _never_fail_on_output() -> None:
    """Text a console cannot show (emoji on a legacy code page, stray surrogates) is escaped, not a crash."""
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")


def run_bench(args) -> int:
    import platform

    import torch

    from app.engine import bench
    from app.engine.loading import load_models

    if args.threads:
        torch.set_num_threads(args.threads)
    models = load_models(args.target, args.draft_model, args.device, args.dtype, args.device_map, heads=args.heads)
    prompts = bench.load_prompts(args.prompts) if args.prompts else bench.load_prompts()
    results = bench.benchmark(models, prompts, k=args.k, repeats=args.repeats, only=set(args.only or ()),
                              progress=lambda message: print(message, file=sys.stderr, flush=True))
    print(bench.markdown_table(results) if args.markdown else bench.plain_table(results))
    if args.json_path:
        demo = args.target is None
        meta = {"target": "bundled demo family" if demo else models.target_name,
                "draft": "bundled demo family" if demo else models.draft_name, "device": str(models.device),
                "dtype": str(models.dtype), "k": args.k, "repeats": args.repeats, "threads": torch.get_num_threads(),
                "machine": platform.platform(), "processor": platform.processor(), "torch": torch.__version__}
        with open(args.json_path, "w") as out:
            out.write(bench.to_json(results, meta))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0].startswith("-") and argv[0] not in ("-h", "--help", "--version"):
        argv = ["gui", *argv]
    args = parser.parse_args(argv)
    _never_fail_on_output()
    command = args.command or "gui"
    try:
        if command == "run":
            return run_headless(args)
        if command == "bench":
            return run_bench(args)
        if command == "screenshot":
            from app.launch import render_screenshot

            render_screenshot(args.path, prompt=args.prompt, target=args.target, draft=args.draft_model,
                              size=args.size)
            return 0
        from app.launch import run_gui

        return run_gui(sys.argv[:1], target=getattr(args, "target", None), draft=getattr(args, "draft_model", None),
                       device=getattr(args, "device", None), dtype=getattr(args, "dtype", None))
    except Exception as exc:
        from app.engine.errors import EngineError
        from app.engine.settings import SettingsError

        if isinstance(exc, EngineError | SettingsError):
            print(f"error: {exc}", file=sys.stderr)
            return 2
        raise
