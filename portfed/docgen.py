"""The generated parts of ``docs/``: written by a command, so they cannot drift from the code.

``python -m portfed.docgen`` (``make docs``) rewrites every generated block of the pages of ``docs/`` (the
guides, ``docs/*.md``, and the measured reports, ``docs/reports/*.md``: :func:`pages`); with
``--check`` it writes nothing and exits 1 naming each block that differs from what its command
produces now.  A block is delimited by two HTML comments that name its command::

    <!-- BEGIN GENERATED: supervised configs/supervised/fedplus_synthetic.yaml -->
    …
    <!-- END GENERATED -->

Commands:

* ``config-reference``: the reference of the experiment configs, read from their pydantic models
  (every key, its type and default, each section's docstring) and from :class:`AgentConfig`'s
  documented attributes;
* ``compare CONFIG``: Table 1 of ``portfed run CONFIG`` (``table1.md``);
* ``supervised CONFIG``: the table of ``portfed supervised run CONFIG`` (``table.md``).

Runs go to ``--runs DIR`` (default ``runs/docs``); a supervised run stores each finished run there,
so a second ``make docs`` reuses them.  A supervised table is written with the machine's float platform
in a comment above it (``<!-- float platform: … -->``, :func:`float_platform`): its training amplifies
the round-off of the BLAS kernels and SIMD paths, so its numbers are exact on that platform only, and
the tests compare them there.  ``--only WORD`` limits the work to the blocks whose command
contains ``WORD`` (the tests check the cheap ones this way).
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import re
import sys
import typing
from collections.abc import Iterator
from pathlib import Path

from pydantic import BaseModel

ROOT = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"(?:<!-- float platform: (?P<platform>[^>]*?) -->\n)?"
                   r"(?P<begin><!-- BEGIN GENERATED: (?P<command>[^>]*?) -->\n)(?P<body>.*?)(?P<end><!-- END GENERATED -->)",
                   re.S)


def pages() -> list[Path]:
    """The markdown pages of ``docs/``: the guides (``docs/*.md``), then the reports (``docs/reports/*.md``)."""
    docs = ROOT / "docs"
    return sorted(docs.glob("*.md")) + sorted((docs / "reports").glob("*.md"))


def blocks(text: str) -> Iterator[tuple[str, str]]:
    """``(command, body)`` of every generated block of a markdown text."""
    for match in BLOCK.finditer(text):
        yield match["command"].strip(), match["body"]


def platforms(text: str) -> dict[str, str]:
    """The float platform recorded above each generated block that has one, by command."""
    return {match["command"].strip(): match["platform"] for match in BLOCK.finditer(text) if match["platform"]}


def float_platform() -> str:
    """What decides a supervised table's round-off on this machine: numpy's BLAS library and its kernel
    family (threadpoolctl), and the widest SIMD numpy's own loops dispatch to, e.g. ``openblas Haswell;
    numpy AVX2``."""
    from numpy._core._multiarray_umath import __cpu_features__ as features
    from threadpoolctl import threadpool_info

    # numpy's own BLAS (the one its matmul calls): which other libraries (scipy's, torch's) are listed
    # depends on what the process imported before
    blas = dict.fromkeys(f"{info['internal_api']} {info.get('architecture')}" for info in threadpool_info()
                         if info.get("user_api") == "blas" and "numpy" in Path(info["filepath"]).parts[-2])
    simd = next((name for name in ("AVX512F", "AVX2", "ASIMD") if features.get(name)), "baseline")
    return f"{', '.join(blas) or 'no BLAS'}; numpy {simd}"


def _type_name(annotation: object) -> str:
    """``list[str] \\| None``: the annotation without module paths, its bars escaped for a table."""
    text = str(annotation) if not isinstance(annotation, type) else annotation.__name__
    text = re.sub(r"\b(?:\w+\.)+(\w+)", r"\1", text).replace("NoneType", "None")
    return text.replace("|", "\\|")


def _markdown(docstring: str) -> str:
    """A docstring as one markdown paragraph: Sphinx roles and double backticks become code spans."""
    text = re.sub(r":\w+:`~?([^`]+)`", r"`\1`", inspect.cleandoc(docstring)).replace("``", "`")
    return " ".join(text.split()).replace("|", "\\|")


def _default(field) -> str:
    if field.default_factory is not None:
        value = field.default_factory()
    elif field.is_required():
        return "required"
    else:
        value = field.default
    if isinstance(value, BaseModel):
        return "(section)"
    return f"`{value!r}`" if value not in (None, [], {}) else f"`{value}`"


def _section(model: type[BaseModel], key: str, seen: set[type]) -> list[str]:
    """Markdown of one pydantic section and, after it, of every section it holds."""
    lines = [f"### `{key}`", "", _markdown(model.__doc__ or ""), "", "| key | type | default |", "|---|---|---|"]
    nested = []
    for name, field in model.model_fields.items():
        lines.append(f"| `{name}` | `{_type_name(field.annotation)}` | {_default(field)} |")
        inner = [a for a in (field.annotation, *typing.get_args(field.annotation))
                 if isinstance(a, type) and issubclass(a, BaseModel)]
        for sub in typing.get_args(field.annotation):  # list[MarketSection]
            inner += [a for a in typing.get_args(sub) if isinstance(a, type) and issubclass(a, BaseModel)]
        nested += [(f"{key}.{name}" if key else name, cls) for cls in inner if cls not in seen]
        seen.update(cls for _, cls in nested)
    lines.append("")
    for sub_key, cls in nested:
        lines += _section(cls, sub_key, seen)
    return lines


def _agent_section() -> list[str]:
    from portfed.agents import AgentConfig

    described = dict(re.findall(r"^ {8}(\w+): (.*?)(?=^ {8}\w+: |\Z)", AgentConfig.__doc__ or "", re.M | re.S))
    lines = ["### `agent`", "", "The EIIE agent (`portfed.agents.AgentConfig`; the same keys in every experiment).",
             "", "| key | type | default | meaning |", "|---|---|---|---|"]
    for field in dataclasses.fields(AgentConfig):
        meaning = _markdown(described.get(field.name, ""))
        lines.append(f"| `{field.name}` | `{_type_name(field.type)}` | `{field.default!r}` | {meaning} |")
    return lines + [""]


def config_reference() -> str:
    """The markdown reference of the experiment configs (``single_party`` and ``federated``)."""
    from portfed.experiment.config import FederatedConfig, SinglePartyConfig

    lines = []
    for title, model in (("`experiment: federated`", FederatedConfig), ("`experiment: single_party`", SinglePartyConfig)):
        lines += [f"## {title}", ""]
        lines += _section(model, "", set())
        lines += _agent_section()
    return "\n".join(lines).replace("### ``\n", "### (top level)\n")


def _compare_table(config: str, runs: Path) -> str:
    from portfed.evaluation import metrics_table_markdown
    from portfed.experiment.config import load_config
    from portfed.experiment.studies import compare

    result = compare(load_config(ROOT / config), runs / Path(config).stem, progress=False)
    return f"`portfed run {config}`:\n\n{metrics_table_markdown(result.table)}"


def _supervised_table(config: str, runs: Path) -> str:
    import os

    from portfed.supervised.config import load_supervised_config
    from portfed.supervised.report import cell_rows, markdown
    from portfed.supervised.runner import Runner

    loaded = load_supervised_config(ROOT / config)
    cells, descriptions = Runner(loaded, runs / Path(config).stem, resume=True, jobs=os.cpu_count() or 1,
                                 progress=False).run()
    table = markdown(loaded, cell_rows(loaded, cells), descriptions, None)  # no wall time: it varies
    return f"`portfed supervised run {config}`:\n\n{table}"


def produce(command: str, runs: Path) -> str:
    """The body of a generated block: what ``command`` produces now."""
    word, _, argument = command.partition(" ")
    if word == "config-reference":
        text = config_reference()
    elif word == "compare":
        text = _compare_table(argument, runs)
    elif word == "supervised":
        text = _supervised_table(argument, runs)
    else:
        raise ValueError(f"unknown generated-block command {command!r}; known: config-reference, compare, supervised")
    return text.strip() + "\n"


def regenerate(path: Path, runs: Path, only: str | None = None, check: bool = False) -> list[str]:
    """Rewrite (or with ``check`` only compare) the generated blocks of ``path``; the stale commands."""
    text = path.read_text()
    stale = []

    def replace(match: re.Match[str]) -> str:
        command = match["command"].strip()
        if only is not None and only not in command:
            return match[0]
        body = produce(command, runs)
        platform = float_platform() if command.startswith("supervised ") else None
        if body != match["body"] or platform != match["platform"]:
            stale.append(f"{path.relative_to(ROOT)}: {command}")
        comment = "" if platform is None else f"<!-- float platform: {platform} -->\n"
        return comment + match["begin"] + body + match["end"]

    new = BLOCK.sub(replace, text)
    if not check and new != text:
        from portfed._io import atomic_write_text

        atomic_write_text(path, new)
    return stale


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m portfed.docgen", description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a block is stale")
    parser.add_argument("--only", help="only the blocks whose command contains this word")
    parser.add_argument("--runs", type=Path, default=Path("runs/docs"), help="where the commands' runs go")
    args = parser.parse_args(argv)
    stale = []
    for path in pages():
        stale += regenerate(path, args.runs, args.only, args.check)
    for line in stale:
        print(("stale: " if args.check else "rewritten: ") + line)
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
