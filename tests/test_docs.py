"""The docs cannot go stale: generated blocks equal what their commands produce now; the README's
Python example and config run as written; no link leaves the repository and every local link resolves."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from portfed.docgen import ROOT, blocks, config_reference, float_platform, pages, platforms, produce

DOCS = pages()
README = (ROOT / "README.md").read_text()
LINK = re.compile(r"\]\(<?([^)>\s]+)>?(?:\s+\"[^\"]*\")?\)")  # ](target), ](<target>), ](target "title")


def anchors(page: Path) -> set[str]:
    """The anchors of a markdown page's headings as GitHub makes them: lower case, punctuation dropped,
    spaces as hyphens, ``-1``, ``-2`` … for repeated headings (fenced code is not a heading)."""
    found, seen, fenced = set(), {}, False
    for line in page.read_text().splitlines():
        fenced ^= line.startswith("```")
        heading = re.match(r"#{1,6}\s+(.*)", line)
        if heading and not fenced:
            slug = re.sub(r"[^\w\- ]", "", heading[1].strip().lower()).replace(" ", "-")
            found.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
            seen[slug] = seen.get(slug, 0) + 1
    return found


def broken_links(path: Path) -> list[str]:
    """The local targets of ``path``'s markdown links (``[text](target)``, images too) that do not exist,
    relative to ``path``'s folder, or whose ``#anchor`` names no heading of the markdown page; web
    addresses are not checked."""
    broken = []
    for target in LINK.findall(path.read_text()):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        file, _, anchor = target.partition("#")
        page = path.parent / file if file else path
        if not page.exists() or (anchor and page.suffix == ".md" and anchor not in anchors(page)):
            broken.append(target)
    return broken


def _block(command: str) -> str:
    found = [body for path in DOCS for cmd, body in blocks(path.read_text()) if cmd == command]
    assert len(found) == 1, f"{command!r}: {len(found)} generated blocks"
    return found[0]


def test_the_config_reference_is_what_the_models_say():
    assert _block("config-reference") == config_reference().strip() + "\n", "run `make docs`"


def test_the_tiny_table_is_what_a_run_produces_now(tmp_path):
    assert _block("compare configs/tiny.yaml") == produce("compare configs/tiny.yaml", tmp_path), "run `make docs`"


# In every CI run, as the docs issue asks of the cheap tables (about 20-40 s each on 2 cores): in its second
# stage, `make test-extended`, so that `make test` stays under 10 minutes.
@pytest.mark.extended
@pytest.mark.parametrize("config", ["configs/supervised/fedplus_synthetic.yaml",
                                    "configs/supervised/fedplus_synthetic_p003.yaml"])
def test_the_synthetic_benchmark_tables_are_what_a_run_produces_now(tmp_path, config):
    command = f"supervised {config}"
    recorded = {c: p for path in DOCS for c, p in platforms(path.read_text()).items()}.get(command)
    assert recorded is not None, f"{command}: no float platform recorded above the block; run `make docs`"
    if recorded != float_platform():
        pytest.skip(f"{command} was generated on '{recorded}', this machine is '{float_platform()}': training "
                    "amplifies their different round-off, so the numbers are exact there only (`make docs` here)")
    assert _block(command) == produce(command, tmp_path), "run `make docs`"


def test_a_stale_block_is_reported_and_rewritten(tmp_path, monkeypatch):
    import portfed.docgen as docgen

    page = tmp_path / "docs" / "reports" / "page.md"  # a report's blocks too, not only the guides'
    page.parent.mkdir(parents=True)
    page.write_text("intro\n<!-- BEGIN GENERATED: config-reference -->\nold\n<!-- END GENERATED -->\nend\n")
    monkeypatch.setattr(docgen, "ROOT", tmp_path)
    monkeypatch.setattr(docgen, "config_reference", lambda: "new")
    assert docgen.main(["--check"]) == 1
    assert "old" in page.read_text()  # --check writes nothing
    assert docgen.main([]) == 0
    assert page.read_text() == "intro\n<!-- BEGIN GENERATED: config-reference -->\nnew\n<!-- END GENERATED -->\nend\n"
    assert docgen.main(["--check"]) == 0


def test_no_link_leaves_the_repository_and_every_link_resolves():
    assert {p.parent.name for p in DOCS} == {"docs", "reports"}  # the guides and the reports are both checked
    for path in [ROOT / "README.md", *DOCS]:
        text = path.read_text()
        assert "../shared" not in text and "DESIGN.md" not in text and "SUPERVISED.md" not in text, path
        assert broken_links(path) == [], f"{path.relative_to(ROOT)}: broken links"


def test_the_link_check_finds_a_missing_file_and_a_report_image_path(tmp_path):
    (tmp_path / "img").mkdir()
    (tmp_path / "img" / "fig.png").write_bytes(b"")
    (tmp_path / "reports").mkdir()
    report = tmp_path / "reports" / "r.md"
    (tmp_path / "guide.md").write_text("# A guide: how to\n```\n# not a heading\n```\n## Part\n## Part\n")
    report.write_text("# Top\n[guide](../guide.md#part-1) [web](https://example.org/x) [here](#top)\n"
                      "![moved without its path](img/fig.png) ![kept](../img/fig.png) [gone](old.md \"title\")\n"
                      "[a](../guide.md#a-guide-how-to) [b](../guide.md#not-a-heading) [c](#nowhere) [d](../guide.md#part-2)\n")
    assert broken_links(report) == ["img/fig.png", "old.md", "../guide.md#not-a-heading", "#nowhere", "../guide.md#part-2"]


DOCS_PATH = re.compile(r"\bdocs/[\w./-]*?\.(?:md|png)\b")


def docs_paths_named(root: Path) -> dict[str, list[str]]:
    """``docs/….md`` / ``.png`` paths named in the code, configs, benchmarks, examples, notebooks and tests
    under ``root`` (docstrings, comments, CLI help, error messages): path → the files naming it."""
    named: dict[str, list[str]] = {}
    folders = ("portfed", "benchmarks", "examples", "notebooks", "tests", "configs", "flower_app")
    files = [root / "Makefile", *(f for d in folders for f in sorted((root / d).rglob("*")) if f.is_file())]
    for file in files:
        if file.suffix in {".py", ".yaml", ".yml", ".sh", ".toml", ".ipynb", ".c", ".h", ""} and file.exists():
            for path in DOCS_PATH.findall(file.read_text(errors="replace")):
                named.setdefault(path, []).append(str(file.relative_to(root)))
    return named


def test_every_docs_path_named_in_the_code_exists():
    named = docs_paths_named(ROOT)
    assert "docs/reports/reproduction.md" in named  # the scan reaches docstrings and configs
    missing = {path: files for path, files in named.items() if not (ROOT / path).exists()}
    assert missing == {}, "docs paths that name no file (moved pages?)"


def test_the_docs_path_scan_finds_a_moved_page(tmp_path):
    (tmp_path / "portfed").mkdir()
    (tmp_path / "Makefile").write_text("# make docs writes docs/configs.md\n")
    moved = "docs/" + "old_page.md"  # spelt in two pieces so that this file names no missing page itself
    (tmp_path / "portfed" / "m.py").write_text(f'raise ValueError("see {moved}, Device")\n')
    assert docs_paths_named(tmp_path) == {"docs/configs.md": ["Makefile"], moved: ["portfed/m.py"]}


def test_every_page_of_docs_is_in_the_index():
    index = (ROOT / "docs" / "README.md").read_text()
    linked = {(ROOT / "docs" / target.split("#")[0]).resolve() for target in LINK.findall(index)}
    missing = [str(p.relative_to(ROOT)) for p in DOCS if p.name != "README.md" and p.resolve() not in linked]
    assert missing == [], "docs/README.md does not list these pages"


def test_readme_starts_with_the_two_commands():
    first = README.split("```bash\n", 1)[1].split("```", 1)[0].splitlines()
    assert [line.split()[:2] for line in first] == [["make", "run"], ["make", "test"]]


def _fenced(language: str, after: str) -> str:
    section = README.split(after, 1)[1]
    return section.split(f"```{language}\n", 1)[1].split("```", 1)[0]


def test_readme_own_prices_config_loads_from_its_directory(tmp_path):
    from portfed.experiment.config import load_config
    from portfed.experiment.party import party_table

    folder = tmp_path / "my_run"
    folder.mkdir()
    (folder / "config.yaml").write_text(_fenced("yaml", "## Your own prices"))
    rng = np.random.default_rng(0)
    closes = pd.DataFrame(100 * np.exp(np.cumsum(rng.normal(0, 0.01, (300, 3)), axis=0)),
                          index=pd.bdate_range("2019-01-01", periods=300), columns=["AAPL", "MSFT", "IBM"])
    closes.iloc[100, 1] = np.nan  # one missing price: max_ffill fills it
    closes.to_csv(folder / "prices.csv", index_label="date")
    table = party_table(load_config(folder / "config.yaml"))
    assert table["tickers"].tolist() == ["AAPL MSFT", "MSFT IBM", "AAPL IBM"]
    assert yaml.safe_load((folder / "config.yaml").read_text())["data"]["source"] == "prices.csv"


def test_readme_python_example_runs(capsys):
    exec(compile(_fenced("python", "## Python API"), "README.md", "exec"), {"__name__": "readme"})
    assert "held-out portfolio value:" in capsys.readouterr().out
