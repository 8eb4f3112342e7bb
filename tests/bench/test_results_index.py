"""bench/ a user can find their way in: at most 16 scripts at the top, each listed in bench/README.md
with its latest report; probes under bench/probes/; every report in its folder, indexed, cited by a
page, and every report a page cites there."""

from __future__ import annotations

import re

from bench.lib.results_index import (GIT_COMMIT, GIT_MARK, INDEX, RESULTS, cited_by, cites, folder_of, matches,
                                     pages, render, reports)
from tests.conftest import REPO

BENCH = REPO / "bench"


def test_the_index_is_the_scripts_output():
    written = INDEX.read_text(encoding="utf-8")
    assert GIT_MARK.sub(GIT_COMMIT, written) == render(use_git=False), (
        "bench/results/README.md is out of date: run python -m bench.lib.results_index")


def test_every_report_a_page_cites_exists():
    names = [path.relative_to(RESULTS).as_posix() for path in reports()]
    missing = [(page.relative_to(REPO).as_posix(), cite) for page in pages() for cite in cites(page)
               if not matches(cite, names)]
    assert not missing, missing


def test_no_report_is_orphaned():
    """A report no page cites goes (git keeps it)."""
    orphans = [name for name, citing in cited_by().items() if not citing]
    assert not orphans, orphans


def test_each_report_lies_in_its_folder():
    assert [path.name for path in RESULTS.iterdir() if path.is_file()] == ["README.md"]
    strays = [path.relative_to(RESULTS).as_posix() for path in reports() if path.parent.name != folder_of(path.name)]
    assert not strays, strays


def test_the_top_of_bench_holds_the_benchmarks_its_readme_lists():
    readme = (BENCH / "README.md").read_text(encoding="utf-8")
    scripts = sorted(path for path in BENCH.iterdir() if path.suffix in (".py", ".sh") and path.name != "__init__.py")
    assert len(scripts) <= 16, [path.name for path in scripts]
    for script in scripts:
        assert f"`{script.name}`" in readme, f"bench/README.md does not list {script.name}"
        if script.suffix == ".py":
            assert 'if __name__ == "__main__":' in script.read_text(encoding="utf-8"), f"{script.name} runs nothing"
    for probe in sorted((BENCH / "probes").glob("*.py")):
        assert probe.name == "__init__.py" or probe.name in readme, f"bench/README.md does not list probes/{probe.name}"


def test_every_script_the_pages_name_exists():
    """Commands in the docs keep working: each bench/ path they name is there."""
    named = set()
    for page in [*pages(), REPO / "bench" / "gpu_session.sh"]:
        named |= {(page.relative_to(REPO).as_posix(), path) for path in
                  re.findall(r"\bbench/[\w/]+\.(?:py|sh)\b", page.read_text(encoding="utf-8"))}
    missing = sorted((page, path) for page, path in named if not (REPO / path).is_file())
    assert not missing, missing
