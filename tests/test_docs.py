"""The documentation holds together: every relative link resolves (to a file, a folder or a heading), the
README stays a landing page that starts with the two commands, the generated pages are what the code
generates, and the pages for drafter authors document only the public modules. No SGLang needed."""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
from pathlib import Path
from types import ModuleType
from typing import Dict, Iterator, List, Tuple

import pytest

from test_layers import PUBLIC

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
BENCHMARKS = ROOT / "benchmarks" / "README.md"
PAGES = sorted([README, ROOT / "CHANGELOG.md", *(ROOT / "benchmarks").rglob("*.md"), *ROOT.glob("tools/gpu/**/README.md"),
                *(ROOT / "docs").rglob("*.md")])
"""Every Markdown page of the repository's documentation."""
FOR_AUTHORS = [README, *sorted((ROOT / "docs" / "authors").rglob("*.md"))]
"""Pages a drafter author reads as the API's documentation."""
README_LIMIT = 10 * 1024
BENCHMARKS_LIMIT = 15 * 1024

FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.M | re.S)
INLINE_CODE = re.compile(r"`[^`\n]+`")
LINK = re.compile(r"\[[^\]\n]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t]*#*[ \t]*$", re.M)


def _prose(text: str) -> str:
    """``text`` without code blocks and inline code (links there are not links)."""
    return INLINE_CODE.sub("", FENCE.sub("", text))


def anchors(text: str) -> set:
    """The heading anchors GitHub makes for a page: lower case, punctuation but ``-`` and ``_`` dropped,
    spaces as ``-``, ``-1``, ``-2``, ... for repeats."""
    seen: Dict[str, int] = {}
    found = set()
    for heading in HEADING.findall(FENCE.sub("", text)):
        heading = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading: its text
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def links(page: Path) -> Iterator[str]:
    for target in LINK.findall(_prose(page.read_text())):
        if not re.match(r"[a-z][a-z0-9+.-]*:", target):  # not http:, https:, mailto:
            yield target


def _page_links() -> List[Tuple[str, str]]:
    return [(str(page.relative_to(ROOT)), target) for page in PAGES for target in links(page)]


def test_the_documentation_has_links_to_check():
    assert len(PAGES) > 15 and len(_page_links()) > 50


@pytest.mark.parametrize("page,target", _page_links())
def test_every_relative_link_resolves(page, target):
    path, _, anchor = target.partition("#")
    found = (ROOT / page).parent / path if path else ROOT / page
    assert found.exists(), f"{page}: link to {target}: {found.relative_to(ROOT) if ROOT in found.parents else found} does not exist"
    if anchor:
        assert found.is_file() and found.suffix == ".md", f"{page}: link to {target}: an anchor in a non-page"
        assert anchor in anchors(found.read_text()), f"{page}: link to {target}: no such heading in {path or page}"


def test_the_anchor_rule_is_githubs():
    assert anchors("# The CLI\n## `check` and `doctor`\n## trtllm_mha on SM90/SM120 (0.5.21+)\n## The CLI\n") == \
        {"the-cli", "check-and-doctor", "trtllm_mha-on-sm90sm120-0521", "the-cli-1"}


def test_a_broken_link_is_found(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("See [this](missing.md) and `[not a link](nowhere.md)`.\n```\n[nor](here.md)\n```\n")
    assert list(links(page)) == ["missing.md"]


def test_the_readme_is_a_landing_page_that_starts_with_the_two_commands():
    text = README.read_text()
    assert len(text.encode()) <= README_LIMIT, f"README.md is {len(text.encode())} bytes; the rest belongs in docs/"
    head, fence, rest = text.partition("```bash\n")
    assert fence and "\n#" not in head.split("\n", 1)[1], "the README's first section is the two commands"
    commands = [line.split()[0] for line in rest.split("```", 1)[0].splitlines()]
    assert commands == ["examples/quickstart.sh", "tests/run.sh"]
    assert all(os.access(ROOT / command, os.X_OK) for command in commands)


def test_the_benchmarks_readme_is_a_landing_page():
    """benchmarks/README.md answers each question in a table of its current figures; the runs' history is in
    benchmarks/results/HISTORY.md, how each benchmark measures in benchmarks/METHODS.md."""
    text = BENCHMARKS.read_text()
    assert len(text.encode()) <= BENCHMARKS_LIMIT, f"benchmarks/README.md is {len(text.encode())} bytes; history belongs beside the results"
    assert {"what-a-smaller-verify-width-is-worth", "dflash_block-against-native-dflash", "plugins-against-plain-decoding-and-ngram",
            "widths-by-acceptance-against-static-widths", "start-up-startuppy"} <= anchors(text)
    assert "results/HISTORY.md" in set(links(BENCHMARKS)) and "METHODS.md" in set(links(BENCHMARKS))


def _load_generator():
    spec = importlib.util.spec_from_file_location("reference_pages", ROOT / "tools" / "reference_pages.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_generated_pages_are_what_the_code_generates():
    """docs/operators/cli.md (from the CLI's parser) and docs/reference/capabilities.md's table (from
    CAPABILITIES); `python tools/reference_pages.py` rewrites them."""
    generator = _load_generator()
    assert set(generator.PAGES) >= {ROOT / "docs" / "operators" / "cli.md", ROOT / "docs" / "reference" / "capabilities.md"}
    assert [p.relative_to(ROOT) for p in generator.stale()] == []


def test_the_cli_page_names_every_command_and_option():
    page = (ROOT / "docs" / "operators" / "cli.md").read_text()
    from sglang_spec_plugins import cli

    for name, sub in cli.build_parser()._subparsers._group_actions[0].choices.items():
        assert f"## `sglang-spec-plugins {name}`" in page
        for action in sub._actions:
            assert all(option in page for option in action.option_strings)


def test_the_capabilities_page_shows_every_capability_and_its_meaning():
    from sglang_spec_plugins.capabilities import CAPABILITIES

    page = (ROOT / "docs" / "reference" / "capabilities.md").read_text()
    for name, capability in CAPABILITIES.items():
        assert f"| `{name}` | {capability.since} | {capability.default} | {capability.meaning} |" in page


DOTTED = re.compile(r"\bsglang_spec_plugins(?:\.[A-Za-z_]\w*)+")
IMPORT = re.compile(r"^[ \t]*(?:from[ \t]+(sglang_spec_plugins[\w.]*)[ \t]+import[ \t]+(?:\(([\w\s,]+)\)|([\w \t,]+))"
                    r"|import[ \t]+(sglang_spec_plugins[\w.]*))", re.M)


def undocumented_api(text: str) -> List[str]:
    """The names ``text`` shows as this package's API that no public module offers: an import of a
    non-public module, an imported name the module lacks, or a dotted name like
    ``sglang_spec_plugins.engine.algorithm`` in code."""
    problems = []
    code = "\n".join(m.group(0) for m in FENCE.finditer(text))
    for from_module, parenthesized, names, plain in IMPORT.findall(code):
        module, names = from_module or plain, parenthesized or names
        if module not in PUBLIC:
            problems.append(f"imports {module}")
            continue
        offered = importlib.import_module(module)
        problems += [f"imports {name} from {module}" for name in re.split(r"[\s,]+", names.strip())
                     if name and not hasattr(offered, name)]
    for dotted in set(DOTTED.findall(code + "\n" + "\n".join(INLINE_CODE.findall(text)))):
        parts = dotted.split(".")
        module = max((".".join(parts[:i]) for i in range(1, len(parts) + 1) if ".".join(parts[:i]) in PUBLIC), key=len)
        value = importlib.import_module(module)
        for attr in parts[len(module.split(".")):]:
            value = getattr(value, attr, None)
            if isinstance(value, ModuleType) and value.__name__ not in PUBLIC:
                value = None  # a submodule that is not public, even if it is imported
        if value is None:
            problems.append(f"names {dotted}")
    return sorted(problems)


@pytest.mark.parametrize("page", FOR_AUTHORS, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_pages_for_authors_document_only_the_public_modules(page):
    assert undocumented_api(page.read_text()) == []


def test_a_private_module_in_a_page_for_authors_is_found():
    text = ("```python\nfrom sglang_spec_plugins.engine.algorithm import StepWidths\n"
            "from sglang_spec_plugins.worker import StepWidths, schedule_for\n```\n"
            "and `sglang_spec_plugins.patches.widths_by_batch_size.schedule_for(runner)`\n")
    assert undocumented_api(text) == ["imports schedule_for from sglang_spec_plugins.worker",
                                      "imports sglang_spec_plugins.engine.algorithm",
                                      "names sglang_spec_plugins.engine.algorithm",
                                      "names sglang_spec_plugins.patches.widths_by_batch_size.schedule_for"]
