"""The quote-marking benchmark on a small Posts.xml: both kinds of page timed, and a text that differs beyond the
marks is caught."""
import sys

from benchmarks import html_quotes

POSTS = """<?xml version="1.0" encoding="utf-8"?>
<posts>
  <row Id="1" PostTypeId="1" Title="Ale or lager?" Body="&lt;p&gt;Is there a difference in how they are made?&lt;/p&gt;" />
  <row Id="2" PostTypeId="2" ParentId="1" Score="1" Body="&lt;blockquote&gt;&lt;p&gt;Is there a difference?&lt;/p&gt;&lt;/blockquote&gt;&lt;p&gt;The yeast, mostly: ale yeast works warm, lager yeast cold.&lt;/p&gt;" />
  <row Id="3" PostTypeId="1" Title="Cask or keg?" Body="&lt;p&gt;Which keeps longer once it is tapped?&lt;/p&gt;" />
</posts>
"""


def run(tmp_path, monkeypatch, capsys) -> tuple[int, str]:
    posts = tmp_path / html_quotes.POSTS
    posts.parent.mkdir(parents=True)
    posts.write_text(POSTS, encoding="utf-8")
    monkeypatch.setattr(sys, "argv", ["html_quotes.py", "--data", str(tmp_path), "--repeats", "1"])
    return html_quotes.main(), capsys.readouterr().out


def test_pages_with_and_without_a_quote_are_timed_and_no_text_differs(tmp_path, monkeypatch, capsys):
    code, out = run(tmp_path, monkeypatch, capsys)
    pages = {line[:16].strip(): int(line[16:].split()[0]) for line in out.splitlines() if line.startswith("with")}
    assert pages == {"without a quote": 1, "with a quote": 1}
    assert "differs beyond the marks and runs of blank lines: 0" in out


def test_a_text_changed_beyond_the_marks_is_counted_and_fails(tmp_path, monkeypatch, capsys):
    marked = html_quotes.html_text
    monkeypatch.setattr(html_quotes, "html_text", lambda page, main_content: marked(page, main_content) + " extra")
    code, out = run(tmp_path, monkeypatch, capsys)
    assert code == 1 and "differs beyond the marks and runs of blank lines: 2" in out and "TARGET MISSED" in out


def test_unmarked_takes_off_every_depth_and_folds_blank_runs():
    assert html_quotes.unmarked("a\n\n\n> > b\n> c\n \nd") == "a\n\nb\nc\n\nd"
