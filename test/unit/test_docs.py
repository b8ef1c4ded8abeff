"""The README and docs/ are read by people who follow their links and copy what they quote: every relative link must
lead to a file (and heading) that exists, every `make` target must be one the Makefile has, and every `kubectl`
command must use a real verb and name files of this repository that exist. A page moved, a heading renamed or a
target dropped then fails here instead of in a reader's shell.

The checks are plain functions of the repository root, so `test_the_checks_find_*` can prove on a made-up repository
that each of them fails on what it is meant to catch."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote

import pytest

REPO = Path(__file__).resolve().parents[2]

# kubectl's commands (`kubectl help`, 1.32 to 1.37): a quoted command with another first word is a typo or made up.
KUBECTL_VERBS = frozenset(
    {
        "alpha", "annotate", "api-resources", "api-versions", "apply", "attach", "auth", "autoscale", "certificate",
        "cluster-info", "completion", "config", "cordon", "cp", "create", "debug", "delete", "describe", "diff",
        "drain", "edit", "events", "exec", "explain", "expose", "get", "kustomize", "label", "logs", "patch",
        "plugin", "port-forward", "proxy", "replace", "rollout", "run", "scale", "set", "taint", "top", "uncordon",
        "version", "wait",
    }
)  # fmt: skip
# The verbs whose -f/--filename names manifests (for `logs` and others -f means something else) or take -k.
KUBECTL_FILE_VERBS = frozenset(
    {"annotate", "apply", "create", "delete", "describe", "diff", "edit", "get", "label", "patch", "replace", "wait"}
)
# kubectl's global flags that take their value as the next word: `kubectl -n team-a get pods`.
KUBECTL_VALUED_FLAGS = frozenset({"-n", "--namespace", "--context", "--kubeconfig", "-s", "--server", "--cluster"})
FILE_FLAGS = {"-f": "-f", "--filename": "-f", "-k": "-k", "--kustomize": "-k"}
# Tokens that end one shell command and start the next; `<` and `>` stay in words (`<cluster>-login-0`).
SEPARATORS = frozenset({"&&", "||", "|", ";", "(", ")", "&", ";;"})

FENCE = re.compile(r"^\s*(`{3,}|~{3,})")
HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
CODE_SPAN = re.compile(r"(`+)(.+?)(?<!`)\1(?!`)", re.DOTALL)
INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^()\s<>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE_LINK = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)", re.MULTILINE)
EXTERNAL = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*:|//)")
MAKE_RULE = re.compile(r"^([A-Za-z0-9][\w./-]*(?:[ \t]+[A-Za-z0-9][\w./-]*)*)[ \t]*::?(?!=)")


@dataclass
class Page:
    """A markdown page split the way a reader sees it: prose (where links are), code (what gets copied into a
    shell), headings (what anchors point at)."""

    path: Path
    prose: list[str] = field(default_factory=list)  # paragraphs outside code, code spans blanked
    code: list[str] = field(default_factory=list)  # each code block line (continuations joined) and code span
    headings: list[str] = field(default_factory=list)


def doc_pages(repo: Path) -> list[Path]:
    """The README and every page under docs/: what a reader of the repository reads as its documentation."""
    return [repo / "README.md", *sorted((repo / "docs").rglob("*.md"))]


def parse(path: Path) -> Page:
    """Fenced blocks go to `code` line by line (a line ending in a backslash joined with the next, as the shell
    does), code spans of each paragraph to `code` whole (a span may wrap: its whitespace is normalised), and the
    paragraphs themselves, spans blanked, to `prose`, so a link quoted in code is not taken for a link."""
    page = Page(path)
    fence: str | None = None
    continued = ""  # a code line that ended in a backslash, waiting for the rest of its command
    paragraph: list[str] = []

    def end_paragraph() -> None:
        text = "\n".join(paragraph)
        paragraph.clear()
        page.code.extend(" ".join(m.group(2).split()) for m in CODE_SPAN.finditer(text))
        page.prose.append(CODE_SPAN.sub(lambda m: " " * len(m.group(0)), text))

    for line in path.read_text().splitlines():
        marker = FENCE.match(line)
        if fence is not None:
            if marker and marker.group(1)[0] == fence[0] and len(marker.group(1)) >= len(fence):
                fence = None
                page.code.append(continued)
                continued = ""
            elif line.rstrip().endswith("\\"):
                continued += line.rstrip()[:-1] + " "
            else:
                page.code.append(continued + line)
                continued = ""
            continue
        if marker:
            end_paragraph()
            fence = marker.group(1)
            continue
        if heading := HEADING.match(line):
            end_paragraph()
            page.headings.append(heading.group(2))
        elif line.strip():
            paragraph.append(line)
        else:
            end_paragraph()
    end_paragraph()
    page.code = [snippet.strip() for snippet in page.code if snippet.strip()]
    return page


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: the text of links and code kept, lower-cased, every character that is not a
    letter, digit, underscore, hyphen or space dropped, spaces made hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = re.sub(r"<[^>]+>", "", text).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Page) -> set[str]:
    """Every anchor GitHub gives the page's headings; a repeated heading gets -1, -2, ... in order."""
    seen: dict[str, int] = {}
    result = set()
    for heading in page.headings:
        base = slug(heading)
        count = seen.get(base, 0)
        seen[base] = count + 1
        result.add(base if count == 0 else f"{base}-{count}")
    return result


def link_errors(repo: Path, path: Path) -> list[str]:
    """Each relative link of the page whose file is missing (or outside the repository), or whose #anchor names no
    heading of the markdown page it points at."""
    page = parse(path)
    errors = []
    for paragraph in page.prose:
        targets = [m.group(1) for m in INLINE_LINK.finditer(paragraph)]
        targets += [m.group(1) for m in REFERENCE_LINK.finditer(paragraph)]
        for target in targets:
            if not target or EXTERNAL.match(target):
                continue
            file_part, _, anchor = target.partition("#")
            resolved = (path.parent / unquote(file_part)).resolve() if file_part else path.resolve()
            if not resolved.is_relative_to(repo.resolve()):
                errors.append(f"{target}: outside the repository")
            elif not resolved.exists():
                errors.append(f"{target}: no such file")
            elif anchor and resolved.suffix == ".md" and anchor not in anchors(parse(resolved)):
                errors.append(f"{target}: no heading with anchor #{anchor} in {resolved.relative_to(repo.resolve())}")
    return errors


def commands(snippet: str) -> list[list[str]]:
    """The shell commands of a code snippet, each as its words: comments dropped, split at `&&`, `|`, `;` and
    parentheses (so `$(kubectl get ...)` is a command too), leading `VAR=value` assignments dropped."""
    lexer = shlex.shlex(snippet, posix=True, punctuation_chars="();&|")
    lexer.whitespace_split = True
    try:
        tokens = list(lexer)
    except ValueError:  # an unbalanced quote: prose in code, or a fragment; its words are still worth a look
        tokens = snippet.split()
    result: list[list[str]] = [[]]
    for token in tokens:
        if token in SEPARATORS or token == "$":
            result.append([])
        elif result[-1] or not re.match(r"^\w+=", token):
            result[-1].append(token)
    return [words for words in result if words]


def makefile_targets(repo: Path) -> set[str]:
    """The targets the Makefile has rules for (not variables: `X := ...`, `X ?= ...`)."""
    targets: set[str] = set()
    for line in (repo / "Makefile").read_text().splitlines():
        if rule := MAKE_RULE.match(line):
            targets.update(rule.group(1).split())
    return targets


def make_errors(repo: Path, path: Path) -> list[str]:
    """Each `make TARGET` quoted in code whose target the Makefile does not have. Options and `VAR=value`
    arguments are not targets; `make` alone names none."""
    targets = makefile_targets(repo)
    errors = []
    for snippet in parse(path).code:
        for words in commands(snippet):
            if words[0] != "make":
                continue
            for word in words[1:]:
                if word.startswith("-") or "=" in word:
                    continue
                if word not in targets:
                    errors.append(f"`{snippet}`: the Makefile has no target {word!r}")
    return errors


def repo_path_missing(repo: Path, argument: str) -> bool:
    """Whether a path argument is one of this repository's (relative, no variable or placeholder) and missing."""
    if (
        argument == "-"
        or EXTERNAL.match(argument)
        or argument.startswith(("/", "~", "$"))
        or re.search(r"[<>$*]", argument)
    ):
        return False
    return not (repo / argument).exists()


def kubectl_errors(repo: Path, path: Path) -> list[str]:
    """Each `kubectl` command quoted in code whose verb kubectl does not have, or whose -f/-k (or `kustomize`)
    path is relative to the repository and missing."""
    errors = []
    for snippet in parse(path).code:
        for words in commands(snippet):
            if words[0] != "kubectl" or len(words) == 1:
                continue
            rest = words[1:]
            while rest and rest[0].startswith("-"):  # global flags before the verb
                rest = rest[2:] if rest[0] in KUBECTL_VALUED_FLAGS else rest[1:]
            if not rest:
                continue
            verb, args = rest[0], rest[1:]
            if verb not in KUBECTL_VERBS:
                errors.append(f"`{snippet}`: kubectl has no command {verb!r}")
                continue
            paths = []
            if verb == "kustomize":
                paths += [arg for arg in args[:1] if not arg.startswith("-")]
            if verb in KUBECTL_FILE_VERBS:
                for i, arg in enumerate(args):
                    flag, eq, value = arg.partition("=")
                    if flag in FILE_FLAGS:
                        paths += [value] if eq else args[i + 1 : i + 2]
            errors += [
                f"`{snippet}`: {p} does not exist in the repository" for p in paths if repo_path_missing(repo, p)
            ]
    return errors


PAGES = [path.relative_to(REPO).as_posix() for path in doc_pages(REPO)]


def test_the_docs_are_found() -> None:
    """The checks below are only as good as the pages they see: the README and the main pages must be among them."""
    assert {"README.md", "docs/README.md", "docs/concepts.md", "docs/operations.md", "docs/testing.md"} <= set(PAGES)


@pytest.mark.parametrize("page", PAGES)
def test_every_relative_link_resolves(page: str) -> None:
    assert link_errors(REPO, REPO / page) == []


@pytest.mark.parametrize("page", PAGES)
def test_every_quoted_make_target_exists(page: str) -> None:
    assert make_errors(REPO, REPO / page) == []


@pytest.mark.parametrize("page", PAGES)
def test_every_quoted_kubectl_command_is_real(page: str) -> None:
    assert kubectl_errors(REPO, REPO / page) == []


def test_the_readme_keeps_the_two_commands_and_scaling() -> None:
    """The README's promise: two set-up commands, an install with Helm and with kustomize, and scaling to copy."""
    code = parse(REPO / "README.md").code
    assert "make run" in " ".join(code) and "make test" in " ".join(code)
    assert any(c.startswith("helm install slurmctl charts/slurmctl") for c in code)
    assert any(c.startswith("kubectl apply --server-side -k config/default") for c in code)
    assert any(c.startswith("kubectl edit slurmcluster") for c in code)
    assert any(c.startswith("kubectl patch slurmcluster") and "/spec/workers/0/size" in c for c in code)


@pytest.mark.parametrize(
    ("heading", "anchor"),
    [
        ("Slurm's REST API", "slurms-rest-api"),
        ("On-demand nodes (elastic worker groups)", "on-demand-nodes-elastic-worker-groups"),
        ("Evictions, cordons and `kubectl drain`", "evictions-cordons-and-kubectl-drain"),
        ("A [linked](x.md) heading_with_underscore", "a-linked-heading_with_underscore"),
        ("Slurm 26.05 (issue 25, item 3)", "slurm-2605-issue-25-item-3"),
    ],
)
def test_slug_is_githubs(heading: str, anchor: str) -> None:
    assert slug(heading) == anchor


@pytest.fixture
def fake_repo(tmp_path: Path) -> Path:
    """A repository with one rule (`run`), one sample and a page that links to itself and to the README."""
    (tmp_path / "Makefile").write_text("VENV ?= .venv\nrun: setup\n\thack/run.sh\nsetup:\n")
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "sample.yaml").write_text("kind: SlurmCluster\n")
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text("# Top\n\n## A section\n\n## A section\n")
    return tmp_path


def write_page(repo: Path, text: str) -> Path:
    page = repo / "docs" / "page.md"
    page.write_text(text)
    return page


def test_the_checks_pass_what_is_right(fake_repo: Path) -> None:
    page = write_page(
        fake_repo,
        "# Page\n\nSee [the top](../README.md#a-section-1), [here](#page), [a sample](../config/sample.yaml),\n"
        "[the\nsite](https://example.com/nothing.md) and `[not a link](missing.md)`.\n\n"
        "```sh\nVENV=x make run setup -j2   # [comment](missing.md)\nkubectl -n a apply --server-side \\\n"
        "  -f config/sample.yaml && kubectl get slurm\n```\n\n"
        "`make`, `make\nrun`, `kubectl logs -f pod`, `kubectl apply -f -`, `kubectl apply -f <file>`.\n",
    )
    assert link_errors(fake_repo, page) == []
    assert make_errors(fake_repo, page) == []
    assert kubectl_errors(fake_repo, page) == []


def test_the_checks_find_a_missing_file_or_anchor(fake_repo: Path) -> None:
    page = write_page(
        fake_repo,
        "# Page\n\n[gone](moved.md), [no heading](../README.md#a-section-2), [self](#nowhere),\n"
        "[outside](../../etc/passwd), [ref]\n\n[ref]: ../config/missing.yaml\n",
    )
    assert link_errors(fake_repo, page) == [
        "moved.md: no such file",
        "../README.md#a-section-2: no heading with anchor #a-section-2 in README.md",
        "#nowhere: no heading with anchor #nowhere in docs/page.md",
        "../../etc/passwd: outside the repository",
        "../config/missing.yaml: no such file",
    ]


def test_the_checks_find_a_missing_make_target(fake_repo: Path) -> None:
    page = write_page(fake_repo, "Run `make tset` or:\n\n```sh\nmake run && VENV=x make e2e\n```\n")
    assert make_errors(fake_repo, page) == [
        "`make tset`: the Makefile has no target 'tset'",
        "`make run && VENV=x make e2e`: the Makefile has no target 'e2e'",
    ]


def test_the_checks_find_a_made_up_kubectl_verb_or_a_missing_file(fake_repo: Path) -> None:
    page = write_page(
        fake_repo,
        "`kubectl scale-up slurmcluster x`\n\n```sh\nkubectl apply --server-side -k config/gone\n"
        "kubectl kustomize config/none\nkubectl delete --filename=config/sample.yml\n```\n",
    )
    assert kubectl_errors(fake_repo, page) == [
        "`kubectl scale-up slurmcluster x`: kubectl has no command 'scale-up'",
        "`kubectl apply --server-side -k config/gone`: config/gone does not exist in the repository",
        "`kubectl kustomize config/none`: config/none does not exist in the repository",
        "`kubectl delete --filename=config/sample.yml`: config/sample.yml does not exist in the repository",
    ]
