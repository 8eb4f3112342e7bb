"""bench/results/README.md, the index of the reports: each one's question, card, commit, date and
the pages that cite it, read from the reports' own headers and the pages.

    python -m bench.lib.results_index          # writes bench/results/README.md

A page is README.md, bench/README.md, a page under docs/ or a folder's notes (`bench/results/<folder>/
README.md`: the research its reports answer, beside them); a report is cited by its path
(`bench/results/<folder>/<name>`, or a glob such as `bench/results/http/e2e-gpu-minilm-k*.md`), or
by its file name alone where no page has that name.
tests/bench/test_results_index.py checks that the index is this script's output, that every
report a page cites exists and that every report is cited by a page (git keeps the rest).
"""

from __future__ import annotations

import fnmatch
import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "bench" / "results"
INDEX = RESULTS / "README.md"
# Which folder a report goes in, by the start of its name: the first that matches.
FOLDERS = (("fp8", ("fp8",)), ("cpu", ("cpu-", "soak-cpu-")), ("http", ("e2e-", "bulk-", "mixed-", "rerank-", "asgi", "http-")),
           ("gpu", ("",)))
CITE = re.compile(r"bench/results/([\w*][\w./*-]*[\w*])")
BARE = re.compile(r"(?<![\w/.-])([\w.-]+\.(?:md|txt|json))(?![\w-])")
HEAD_LINES = 15
# A folder's notes: a page, not a report.
NOTES = "README.md"


def folder_of(name: str) -> str:
    return next(folder for folder, starts in FOLDERS if name.startswith(starts))


def reports() -> list[Path]:
    return sorted(path for path in RESULTS.glob("*/*") if path.is_file() and path.name != NOTES)


def pages() -> list[Path]:
    return [REPO / "README.md", REPO / "bench" / "README.md", *sorted((REPO / "docs").rglob("*.md")),
            *sorted(RESULTS.glob(f"*/{NOTES}"))]


def cites(page: Path) -> list[str]:
    """The report paths a page names (relative to bench/results/), globs as written; the index and
    a folder's notes are pages, not reports."""
    text = page.read_text(encoding="utf-8") if page.is_file() else ""
    return [cite for cite in (match.group(1).rstrip(".") for match in CITE.finditer(text)) if Path(cite).name != NOTES]


def matches(cite: str, names: list[str]) -> list[str]:
    return [name for name in names if fnmatch.fnmatchcase(name, cite)] if "*" in cite else [cite] if cite in names else []


def cited_by() -> dict[str, list[str]]:
    """Each report's citing pages (paths relative to the repository), in page order. A page cites a
    report by its path, or by its bare file name where no page of docs/ has that name too."""
    names = [path.relative_to(RESULTS).as_posix() for path in reports()]
    doc_names = {page.name for page in pages()}
    found = {name: [] for name in names}
    for page in pages():
        text = page.read_text(encoding="utf-8") if page.is_file() else ""
        named = {name for cite in cites(page) for name in matches(cite, names)}
        words = set(BARE.findall(text))
        named |= {name for name in names if Path(name).name in words and Path(name).name not in doc_names}
        label = page.relative_to(REPO).as_posix()
        for name in sorted(named, key=names.index):
            found[name].append(label)
    return found


def _head(path: Path) -> list[str]:
    if path.suffix != ".md":
        return []
    return path.read_text(encoding="utf-8", errors="replace").splitlines()[:HEAD_LINES]


def question(path: Path) -> str:
    title = next((line[2:].strip() for line in _head(path) if line.startswith("# ")), "")
    return title or f"the data behind the report of the same name ({path.suffix[1:]})"


def card(path: Path) -> str:
    head = "\n".join(_head(path))
    gpus = sorted(set(re.findall(r"NVIDIA (H100|H200|A100|L4|L40S)", head)))
    if gpus:
        return ", ".join(gpus)
    cores = re.search(r"(\d+) cores(?: \(([^)]*)\))?", head)
    if cores:
        return f"CPU, {cores.group(1)} cores" + (f" ({cores.group(2)})" if cores.group(2) else "")
    return "-"


def commit(path: Path, use_git: bool = True) -> str:
    """The commit the report names, else the last one that changed its content (from git, marked so;
    `use_git=False` leaves it out, for a check that must not depend on the history)."""
    found = re.search(r"commit:? `?([0-9a-f]{7,40})\b", "\n".join(_head(path)))
    if found:
        return found.group(1)[:7]
    if not use_git:
        return GIT_COMMIT
    done = subprocess.run(["git", "log", "-1", "--follow", "--diff-filter=AM", "--format=%h", "--abbrev=7", "--",
                           str(path.relative_to(REPO))], cwd=REPO, capture_output=True, text=True)
    return f"{done.stdout.strip()} (git)" if done.returncode == 0 and done.stdout.strip() else GIT_COMMIT


GIT_COMMIT = "(git)"
GIT_MARK = re.compile(r"[0-9a-f]{7} \(git\)")


def date(path: Path) -> str:
    found = re.search(r"\b(20\d\d-\d\d-\d\d)\b", "\n".join(_head(path)))
    return found.group(1) if found else "-"


def _args(path: Path) -> str:
    """The report's command without the interpreter, the script and its output and tokenizer paths."""
    found = re.search(r"command: `([^`]*)`", "\n".join(_head(path)))
    if not found:
        return ""
    words = found.group(1).split()
    words = words[next((i + 1 for i, word in enumerate(words) if word.endswith(".py")), 0):]
    kept, skip = [], False
    for word in words:
        if skip:
            skip = False
        elif word in ("--out", "--tokenizer"):
            skip = True
        elif not word.startswith(("--out=", "--tokenizer=")):
            kept.append(word)
    return " ".join(kept)


def _note(path: Path) -> str:
    """The report's note line: what sets it apart from another run of the same command."""
    found = re.search(r"^- note: (.*)$", "\n".join(_head(path)), re.MULTILINE)
    return found.group(1).strip() if found else ""


def render(use_git: bool = True) -> str:
    citing = cited_by()
    titles = [question(path) for path in reports()]
    lines = [
        "# The benchmark reports",
        "",
        "Each report starts with the command that wrote it, the machine and the date; bench/README.md says",
        "which benchmark writes which. Grouped by what they measure: `http/` (the server through HTTP),",
        "`gpu/` (the engine on a GPU), `cpu/` (the CPU paths) and `fp8/` (FP8 on Hopper). A report is kept",
        "while a page cites it; git keeps the earlier ones. Written by `python -m bench.lib.results_index`",
        "(tests/bench/test_results_index.py checks it): question (with the run's flags, and its note, where",
        "the same benchmark wrote several), card, commit (the one the report names, else the last that changed the",
        "report, from git), date, the pages that cite it. A folder's README.md holds the research its",
        "reports answer, beside them; the pages under docs/ say what a user does and link to it.",
    ]
    for folder, _ in FOLDERS:
        rows = [path for path in reports() if path.parent.name == folder]
        if not rows:
            continue
        lines += ["", f"## {folder}/", ""]
        if (RESULTS / folder / NOTES).is_file():
            lines += [f"What they found: [{folder}/{NOTES}]({folder}/{NOTES}).", ""]
        lines += ["| report | question | card | commit | date | cited by |", "|---|---|---|---|---|---|"]
        for path in rows:
            name = path.relative_to(RESULTS).as_posix()
            pages_citing = ", ".join(citing[name]) or "-"
            ask = question(path)
            if titles.count(ask) > 1 and _args(path):  # a variant of a run: its flags tell it apart
                ask += f" (`{_args(path)}`)"
            if titles.count(question(path)) > 1 and _note(path):  # where the flags are the same, its note does
                ask += f": {_note(path)}"
            ask = ask.replace("|", "\\|")
            lines.append(f"| [{path.name}]({name}) | {ask} | {card(path)} | {commit(path, use_git)} | {date(path)} "
                         f"| {pages_citing} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    INDEX.write_text(render(), encoding="utf-8")
    print(f"wrote {INDEX.relative_to(REPO)}: {len(reports())} reports")
