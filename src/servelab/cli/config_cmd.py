"""`servelab config init FILE` (a commented starting file) and `servelab config doc` (docs/config.md).

Both are generated from the pydantic models, so every key is listed with its default, the flag that sets
it and its description; a test keeps docs/config.md equal to `servelab config doc`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from servelab.errors import ConfigError

app = typer.Typer(
    help="Config files: write a commented starting file, print every key.",
    no_args_is_help=True,
    add_completion=False,
)

# Flags that set keys without a FLAG_PATHS entry (they need a little translation in cli/options.py).
_EXTRA_FLAGS = {"target.headers": ["--header"], "workload.profile": ["--profile"],
                "cost.model.gpu_hour_usd": ["--gpu-hour-usd"], "cost.model.gpus": ["--gpus"],
                "target.allow_over_context": ["--allow-over-context"], "mix": ["--mix"]}
# `servelab replay`'s own flags, which set keys of the replay workload (kind: replay) only.
_REPLAY_FLAGS = {
    "workload.path": "TRACE (argument)",
    "workload.format": "--format",
    "workload.speed": "--speed",
    "workload.rate": "--rate",
    "workload.start_s": "--start",
    "workload.duration_s": "--duration",
    "workload.sample": "--sample",
    "workload.max_requests": "--max-requests",
    "workload.options": "--option",
    "workload.ignore_eos": "--no-ignore-eos",
}
# Sections whose inner keys are documented elsewhere (agent sessions: docs/profiles.md).
_NOT_WALKED = {"workload.session"}


def _flags_by_path() -> dict[str, list[str]]:
    from servelab.cli.options import FLAG_PATHS

    out: dict[str, list[str]] = {}
    for flag, path in FLAG_PATHS.items():
        out.setdefault(path, []).append("--" + flag.replace("_", "-"))
    for path, flags in _EXTRA_FLAGS.items():
        out.setdefault(path, []).extend(f for f in flags if f not in out.get(path, []))
    return out


def _variants(annotation: Any) -> list[type[BaseModel]]:
    from servelab.config.suggest import _models_in

    return list(dict.fromkeys(_models_in(annotation)))


def _list_items(annotation: Any) -> list[type[BaseModel]]:
    """The section model of a ``list[Model] | None`` field (e.g. ``mix``), else []."""
    import typing

    for a in (annotation, *typing.get_args(annotation)):
        if typing.get_origin(a) is list:
            return _variants(typing.get_args(a)[0])
    return []


def _type_words(annotation: Any) -> str:
    text = str(annotation).replace("typing.", "").replace("NoneType", "None")
    if "Distribution" in text or "Fixed" in text:
        return "tokens: a number or a distribution"
    for a, b in (("<class '", ""), ("'>", ""), ("servelab.config.", "")):
        text = text.replace(a, b)
    return text.split("[Annotated")[0] if len(text) < 80 else text[:77] + "..."


def _default(info: Any) -> str:
    if info.default is not PydanticUndefined:
        d = info.default
        return (
            "required"
            if d is Ellipsis
            else ("none" if d is None else str(d).lower() if isinstance(d, bool) else str(d))
        )
    if info.default_factory is not None:
        try:
            v = info.default_factory()
        except TypeError:
            return "-"
        if isinstance(v, BaseModel):
            dump = v.model_dump(mode="json")
            if dump.get("kind") == "fixed" and "value" in dump:
                return f"{dump['value']:g}"
            return "defaults below" if len(str(dump)) > 40 else str(dump)
        return str(v)
    return "required"


def rows(model: type[BaseModel] = None, prefix: str = "", depth: int = 0) -> list[dict[str, str]]:  # type: ignore[assignment]
    """One row per key: {key, type, default, flags, description}, nested sections after their parent."""
    from servelab.config import RunConfig

    model = model or RunConfig
    flags = _flags_by_path()
    out = []
    for name, info in model.model_fields.items():
        path = f"{prefix}{name}"
        out.append({"key": path, "type": _type_words(info.annotation), "default": _default(info),
                    "flags": ", ".join(flags.get(path, [])), "description": (info.description or "").strip()})
        subs = _variants(info.annotation)
        items = _list_items(info.annotation)
        if items:  # a list of sections (mix): each item's keys as KEY[].FIELD
            out += rows(items[0], f"{path}[].", depth + 1)
        if path in _NOT_WALKED or depth > 2 or any("kind" in s.model_fields and path.endswith(
                ("input_tokens", "output_tokens")) for s in subs):
            continue
        for sub in subs:
            kind = sub.model_fields.get("kind")
            tag = f" (kind: {kind.default})" if kind is not None and len(subs) > 1 else ""
            inner = rows(sub, f"{path}.", depth + 1)
            if tag:
                for r in inner:
                    r["description"] = f"[{path}{tag}] {r['description']}"
            if kind is not None and kind.default == "replay":
                for r in inner:
                    if r["key"] in _REPLAY_FLAGS:
                        r["flags"] = f"replay {_REPLAY_FLAGS[r['key']]}"
            out += inner
    first: dict[tuple[str, str], dict[str, Any]] = {}  # each (key, description) once, where it first appears
    for r in out:
        first.setdefault((r["key"], r["description"]), r)
    return list(first.values())


def render_doc() -> str:
    lines = [
        "# Configuration keys",
        "",
        "Every key `servelab run`, `replay` and `sweep` read from a YAML file (`--config run.yaml`), with "
        "its "
        "default and the flag that sets it. Flags beat the file; the file beats the defaults. A key written "
        "where it does not belong exits with code 2 and a did-you-mean (`concurrency` -> "
        "`load.concurrency`). `servelab config init run.yaml` writes a commented starting file.",
        "",
        "This page is generated: `servelab config doc > docs/config.md` (a test keeps it up to date). Agent "
        "session steps (`workload.session`) are described in `docs/profiles.md`; length distributions "
        "(`input_tokens`, `output_tokens`) take a number or `{kind: fixed|uniform|normal|lognormal|"
        "exponential|empirical, ...}`.",
        "",
    ]
    section = None
    all_rows = rows()
    parents = {r["key"].split(".")[0] for r in all_rows if "." in r["key"]}
    all_rows.sort(key=lambda r: r["key"].split(".")[0] not in parents)  # stable: sections, then plain keys
    for r in all_rows:
        top = r["key"].split(".")[0]
        top = top if top in parents else "other top-level keys"
        if top != section:
            section = top
            title = f"`{top}`" if top in parents else top
            lines += ["", f"## {title}", "", "| key | default | flag | description |", "|---|---|---|---|"]
        desc = r["description"].replace("|", "\\|").replace("\n", " ")
        lines.append(f"| `{r['key']}` | {r['default'].replace('|', '/')} | {r['flags'] or '-'} | {desc} |")
    return "\n".join(lines) + "\n"


STARTER = """\
# servelab run --config {name}
# Every key: docs/config.md (or `servelab config doc`). Flags beat this file; this file beats the defaults.

target:
  url: sim:llama-3.1-8b@1xh100   # or http://127.0.0.1:8000/v1 (any OpenAI-compatible server)
  # model: my-model              # default: the first model the server lists
  # api_key_env: OPENAI_API_KEY  # the NAME of the variable holding the key (the key is never stored)
  api: chat                      # chat or completions
  stream: true

workload:
  kind: requests                 # requests | agent (with profile: coding-agent) | replay
  input_tokens: 1024             # or {{kind: lognormal, median: 1024, sigma: 0.5}}
  output_tokens: 256
  ignore_eos: false              # true forces every response to output_tokens

load:
  concurrency: 16                # closed loop: users; or rate: 10 (open loop, requests/s)
  # rate: 10
  # arrival: poisson             # poisson | gamma | constant (open loop)

limits:
  requests: 200                  # or duration_s: 60
  warmup_requests: 0

slo:
  # ttft_ms: 500                 # goodput counts requests meeting every SLO given
  # tpot_ms: 50
  percentile: 99

seed: 0
out: runs
"""


@app.command("init")
def init(
    path: Annotated[str, typer.Argument(help="File to write (refuses to overwrite).")] = "run.yaml",
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing file.")] = False,
) -> None:
    """Write a commented starting config file (it validates as written)."""
    p = Path(path)
    if p.exists() and not force:
        raise ConfigError(f"{p} exists", hint="pass --force to overwrite it, or another file name")
    p.write_text(STARTER.format(name=p.name), encoding="utf-8")
    typer.echo(f"wrote {p}: edit it, then `servelab run --config {p}`")


@app.command("doc")
def doc() -> None:
    """Print every config key with its default, flag and description (docs/config.md)."""
    typer.echo(render_doc(), nl=False)
