"""One registry for CLI flags: a flag `run` and `sweep` both take is declared once, in cli/flags.py, and
reads the same in both commands' help (issue 14). Only sweep's list-valued forms (flags.SWEEP_LISTS) have
their own declaration, and their help is run's help plus how to give the list."""

from __future__ import annotations

import typing

import typer

from servelab.cli import flags
from servelab.cli.main import app
from servelab.cli.run_cmd import run
from servelab.cli.sweep_cmd import sweep


def _options(command: str) -> dict[str, typing.Any]:
    """--name -> the click option of ``servelab COMMAND``, as the help shows it."""
    cmd = typer.main.get_command(app).commands[command]  # type: ignore[attr-defined]
    return {o: p for p in cmd.params if getattr(p, "param_type_name", "") == "option"
            for o in [*p.opts, *p.secondary_opts]}


def _hints(fn: typing.Callable[..., object]) -> dict[str, object]:
    return typing.get_type_hints(fn, include_extras=True)


def test_a_flag_run_and_sweep_share_reads_the_same_in_both_helps():
    run_opts, sweep_opts = _options("run"), _options("sweep")
    shared = sorted(set(run_opts) & set(sweep_opts) - {"--help", "-h"})
    # the shared flags by name (hand-listed: a flag dropped from either command shows up here)
    assert shared == sorted([
        "--target", "--model", "--api", "--concurrency", "--rate", "--profile", "--gpu-hour-usd", "--arrival",
        "--burstiness", "--requests", "--duration", "--warmup", "--input-tokens", "--output-tokens",
        "--ignore-eos", "--stream", "--no-stream", "--api-key-env", "--slo-ttft-ms", "--slo-itl-ms",
        "--slo-e2e-ms", "--seed", "--out", "--name", "--config", "--json", "--report", "--no-report", "--ray",
    ])
    for name in shared:
        r, s = run_opts[name], sweep_opts[name]
        if name in flags.SWEEP_LISTS:
            assert s.help.startswith(r.help + " "), (name, r.help, s.help)
            continue
        assert (s.help, s.metavar, s.show_default) == (r.help, r.metavar, r.show_default), name


def test_sweep_declares_no_run_flag_a_second_time():
    run_hints, sweep_hints = _hints(run), _hints(sweep)
    registry = [v for k, v in vars(flags).items() if k[:1].isupper()]
    common = sorted(set(run_hints) & set(sweep_hints) - {"return"})
    assert len(common) == 27, common
    for param in common:
        s = sweep_hints[param]
        assert any(s == a for a in registry), f"sweep's --{param} is declared in sweep_cmd, not cli/flags.py"
        if not any(s == a for a in flags.SWEEP_LISTS.values()):
            assert s == run_hints[param], f"sweep's --{param} is not run's declaration"
    # the list forms are sweep's target, concurrency and rate
    used = [sweep_hints[p] for p in ("target", "concurrency", "rate")]
    assert used == list(flags.SWEEP_LISTS.values())


def test_the_list_forms_keep_their_names_and_take_lists():
    sweep_opts = _options("sweep")
    assert sweep_opts["--target"].multiple  # --target A --target B sweeps two targets
    assert sweep_opts["--concurrency"].metavar == "LEVELS" and sweep_opts["--rate"].metavar == "LEVELS"
    assert sweep_opts["--concurrency"].show_default == "1,4,16,64,256"


def _option_info(hint: object) -> typing.Any:
    return next((m for m in getattr(hint, "__metadata__", ()) if hasattr(m, "param_decls")), None)


def _option_name(param: str, info: typing.Any) -> str:
    decls = [d for part in info.param_decls or () for d in part.split("/") if d.startswith("--")]
    return decls[0] if decls else "--" + param.replace("_", "-")


def test_no_command_spells_a_shared_flag_again():
    # A flag declared inline with a shared flag's name and help is a second copy of it (accuracy's --api,
    # --api-key-env and --header were): it must be the cli/flags.py declaration.
    shared = {}
    for attr, ann in vars(flags).items():
        info = _option_info(ann)
        if attr[:1].isupper() and info is not None and ann not in flags.SWEEP_LISTS.values():
            shared[info.help] = ann
    commands = [*app.registered_commands]
    commands += [c for g in app.registered_groups for c in g.typer_instance.registered_commands]
    copies = []
    for cmd in commands:
        for param, hint in _hints(cmd.callback).items():
            info = _option_info(hint)
            if info is None or info.help not in shared or hint == shared[info.help]:
                continue
            if _option_name(param, info) == _option_name(param, _option_info(shared[info.help])):
                copies.append(f"{cmd.name} {_option_name(param, info)}")
    assert not copies, copies
