"""``benchmarks/run.py`` (``make bench``) writes under ``build/bench`` by default and touches the
tracked ``benchmarks/results/latest.md`` only with ``--publish``; run here on a tiny fake
section (the real benchmarks take minutes)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from benchmarks import run

ROOT = Path(__file__).resolve().parent.parent


def fake_sections(tmp_path: Path) -> list[tuple[str, str, dict[str, str]]]:
    (tmp_path / "mods").mkdir()
    (tmp_path / "mods" / "fake_bench.py").write_text(
        "import sys\n"
        "print('| size | ms |')\n"
        "print('|---|---|')\n"
        "print('| 3 |', 1 + ('--quick' in sys.argv), '|')\n"
    )
    (tmp_path / "mods" / "broken_bench.py").write_text("raise SystemExit(3)\n")
    return [("Fake", "fake_bench", {"PYTHONPATH": str(tmp_path / "mods")})]


def test_default_output_is_untracked_build_bench():
    args = run.parse_args([])
    assert args.output == ROOT / "build" / "bench" and not args.publish
    assert run.PUBLISHED == ROOT / "benchmarks" / "results" / "latest.md"
    ignored = subprocess.run(
        ["git", "check-ignore", "-q", str(args.output / "latest.md")], cwd=ROOT, check=False
    )
    assert ignored.returncode == 0, "build/bench/latest.md must be ignored by git"


def test_a_run_writes_only_its_output_folder(tmp_path):
    sections = fake_sections(tmp_path)
    published = tmp_path / "published" / "latest.md"
    code = run.main(["--output", str(tmp_path / "out"), "--quick"], sections=sections, published=published)
    assert code == 0
    text = (tmp_path / "out" / "latest.md").read_text()
    assert "### Fake\n\n| size | ms |\n|---|---|\n| 3 | 2 |\n" in text
    assert "(--quick)" in text.splitlines()[0]
    assert not published.exists()


def test_publish_copies_the_results_on_purpose(tmp_path):
    sections = fake_sections(tmp_path)
    published = tmp_path / "published" / "latest.md"
    assert (
        run.main(["--output", str(tmp_path / "out"), "--publish"], sections=sections, published=published)
        == 0
    )
    assert published.read_text() == (tmp_path / "out" / "latest.md").read_text()
    assert "| 3 | 1 |" in published.read_text()


def test_a_failed_section_is_reported_and_written(tmp_path):
    sections = fake_sections(tmp_path)
    sections.append(("Broken", "broken_bench", {"PYTHONPATH": str(tmp_path / "mods")}))
    code = run.main(["--output", str(tmp_path / "out")], sections=sections, published=tmp_path / "p.md")
    assert code == 1
    text = (tmp_path / "out" / "latest.md").read_text()
    assert "### Broken\n\nFAILED (exit 3)" in text and "### Fake" in text


def test_the_script_documents_its_options():
    out = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "run.py"), "--help"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert "--publish" in out and "--output" in out and "build/bench" in out
