"""The genre benchmark's readers cut documents where the genre does: a law's chapters, a page's sections, a file,
an abstract under its title, a forum question with its answers, a medicine book's sections, a run of paragraphs,
a court opinion's pages."""
from benchmarks._genre_data import (markdown_split, paragraph_runs, pubmed_abstracts, stack_exchange_threads,
                                    tcm_book_sections, text_files, zh_law_chapters)

LAW = """中华人民共和国示例法
目录
第一章 总则
第二章 管理
第一节 一般规定
第二节 特别规定
第三章 附则
第一章 总则
第一条 为了规范示例活动，制定本法。
第二章 管理
第一节 一般规定
第二条 国家对示例活动实行统一管理。
第三章 附则
第三条 本法自公布之日起施行。
"""


def test_a_law_is_cut_into_its_chapters_and_its_table_of_contents_is_not_one(tmp_path):
    (tmp_path / "law.txt").write_text(LAW, encoding="utf-8")
    chapters = [text for _, text in zh_law_chapters([tmp_path / "law.txt"])]
    assert [c.split("\n")[0] for c in chapters] == ["第一章 总则", "第二章 管理", "第三章 附则"]
    assert all("第" in c and "条" in c for c in chapters)


def test_a_comment_inside_a_fenced_code_block_does_not_start_a_section():
    page = "# Launch\nRun it on every node:\n```bash\n# hostfile\nworker-1 slots=8\n```\n## Next\nMore text."
    assert markdown_split(page) == ["# Launch\nRun it on every node:\n```bash\n# hostfile\nworker-1 slots=8\n```",
                                    "## Next\nMore text."]


def test_an_article_file_is_read_as_utf8_or_as_the_latin1_it_was_published_in(tmp_path):
    """The BBC set's copy converted part of its files to UTF-8; the rest are Latin-1 (a pound sign is byte 0xA3)."""
    (tmp_path / "001.txt").write_bytes("Profits up\n\nSales rose to £2.89bn.\n".encode("utf-8"))
    (tmp_path / "002.txt").write_bytes("Windfall\n\nMembers share £42m.\n".encode("latin-1"))
    docs = list(text_files([tmp_path / "001.txt", tmp_path / "002.txt"]))
    assert [text for _, text in docs] == ["Profits up\n\nSales rose to £2.89bn.", "Windfall\n\nMembers share £42m."]
    assert docs[0][0] != docs[1][0]  # each file its own unit: tune and held-out never share an article


def test_an_abstract_is_read_under_its_title_and_a_row_without_one_is_left_out(tmp_path):
    (tmp_path / "pubmed.csv").write_text(
        "PMID,Title,Abstract,Authors,Publication Date,DOI\n"
        '1,Sleep and memory.,"We studied 50 students. Sleep helped, as expected.",A B,2020-01-01,10.1/x\n'
        "2,A title with no abstract.,,C D,2020-01-02,10.1/y\n", encoding="utf-8")
    assert list(pubmed_abstracts([tmp_path / "pubmed.csv"])) == [
        ("1", "Sleep and memory.\n\nWe studied 50 students. Sleep helped, as expected.")]


POSTS = """<?xml version="1.0" encoding="utf-8"?>
<posts>
  <row Id="1" PostTypeId="1" Title="Ale or lager?" Body="&lt;p&gt;Is there a difference in how they are made?&lt;/p&gt;" />
  <row Id="2" PostTypeId="2" ParentId="1" Score="1" Body="&lt;blockquote&gt;&lt;p&gt;Is there a difference?&lt;/p&gt;&lt;/blockquote&gt;&lt;p&gt;The yeast, mostly.&lt;/p&gt;" />
  <row Id="3" PostTypeId="2" ParentId="1" Score="7" Body="&lt;p&gt;Ale yeast works warm:&lt;/p&gt;&lt;ul&gt;&lt;li&gt;10-25 C&lt;/li&gt;&lt;/ul&gt;" />
  <row Id="4" PostTypeId="1" Title="Unanswered &amp; alone" Body="&lt;p&gt;Anyone?&lt;/p&gt;" />
</posts>
"""


def test_a_forum_thread_is_its_question_then_its_answers_best_first_as_text(tmp_path):
    """Stack Exchange's Posts.xml keeps each post's HTML; a thread reads as its page's text would: the title, the
    question, then the answers by score, with no tag or entity left; a quote reads "> " as the clean stage's WARC
    reader writes it."""
    (tmp_path / "Posts.xml").write_text(POSTS, encoding="utf-8")
    threads = dict(stack_exchange_threads([tmp_path / "Posts.xml"]))
    assert list(threads) == ["1", "4"]
    page = threads["1"]
    assert page.index("Ale or lager?") < page.index("Is there a difference") < page.index("Ale yeast works warm") \
        < page.index("The yeast, mostly.")
    assert "10-25 C" in page and "<" not in page and "&" not in page
    assert "\n> Is there a difference?\n" in page
    assert threads["4"].startswith("Unanswered & alone")


TCM_BOOK = """<篇名>示例本草
书名：示例本草
作者：某人  
朝代：清  



<目录>

<篇名>丹砂

内容：\\x《御览》卷九百八十五\\x 
味甘，微寒。主身体五脏百病，养精神，安魂魄，益气明 
目。\\p05-a1.bmp 

久服通神明，不老。 



<目录>玉石类

<篇名>云母

属性：味甘，平。 
"""


def test_a_medicine_book_is_cut_into_its_sections_with_wrapped_lines_joined(tmp_path):
    """The collection wraps lines at a fixed width: a sentence cut across lines reads whole again; a blank line
    still parts paragraphs; the book's card, category lines and the collection's marks are not text."""
    (tmp_path / "001-示例本草.txt").write_bytes(TCM_BOOK.encode("gb18030"))
    docs = list(tcm_book_sections([tmp_path / "001-示例本草.txt"]))
    assert docs == [("001-示例本草.txt", "丹砂\n内容：《御览》卷九百八十五味甘，微寒。主身体五脏百病，养精神，安魂魄，益气明目。\n"
                                        "久服通神明，不老。"),
                    ("001-示例本草.txt", "云母\n属性：味甘，平。")]


def test_a_text_file_is_cut_every_n_paragraphs_the_file_its_unit(tmp_path):
    (tmp_path / "doc.txt").write_text("A1. One.\n\nTwo.\n\n\n\nThree.\n\nFour.\n\nFive.", encoding="utf-8")
    docs = list(paragraph_runs(2)([tmp_path / "doc.txt"]))
    assert docs == [("doc.txt", "A1. One.\n\nTwo."), ("doc.txt", "Three.\n\nFour."), ("doc.txt", "Five.")]


def test_a_source_leaves_out_the_files_its_exclude_glob_names(tmp_path):
    """The Chinese textbook keeps the English chapter it was translated from beside each one: read alternately,
    every original fell into the held-out half."""
    from benchmarks._genre_data import Source, digest, markdown_sections

    for name in ("a.md", "a_origin.md", "b.md", "b_origin.md"):
        (tmp_path / "chapter_x").mkdir(exist_ok=True)
        (tmp_path / "chapter_x" / name).write_text(f"# {name}\nText.\n", encoding="utf-8")
    kept = Source("zh book", "zh", True, "repo@commit", ".", "chapter_*/*.md", None, markdown_sections,
                  exclude="*_origin.md")
    every = Source("zh book", "zh", True, "repo@commit", ".", "chapter_*/*.md", None, markdown_sections)
    assert [f.name for f in kept.files(tmp_path)] == ["a.md", "b.md"]
    assert len(every.files(tmp_path)) == 4
    assert digest(kept.files(tmp_path), tmp_path) != digest(every.files(tmp_path), tmp_path)


def test_a_court_opinion_is_cut_into_its_pages_each_case_read_once(tmp_path):
    """CourtListener's text of a slip opinion parts its pages with form feeds; the collection cites a case from two
    search topics, and a case read twice would sit on both sides of the tune/held-out split. A case whose text is
    HTML is read through the clean stage's HTML extractor: no tag is left."""
    import json

    from benchmarks._genre_data import court_opinion_pages

    cases = {1: (7, "Syllabus\nHeld: one.\f2   A v. B\n\nthe Court held.\f\f"), 2: (8, "Page one.\fPage two."),
             10: (7, "Syllabus\nHeld: one."),
             3: (9, '<pre class="inline">Cited in </pre><span class="citation">5 U. S. 1</span><pre>, as held.'
                    "\fNext page.</pre>")}
    for topic, (case_id, text) in cases.items():
        (tmp_path / f"{topic}.json").write_text(json.dumps({"case_id": case_id, "plain_text": text}), encoding="utf-8")
    docs = list(court_opinion_pages(sorted(tmp_path.glob("*.json"))))  # sorted as text: 1, 10, 2, 3
    assert [unit for unit, _ in docs] == ["7", "7", "8", "8", "9", "9"]
    assert [text for _, text in docs][:4] == ["Syllabus\nHeld: one.", "2   A v. B\n\nthe Court held.", "Page one.",
                                              "Page two."]
    assert "5 U. S. 1" in docs[4][1] and "<" not in docs[4][1] + docs[5][1] and docs[5][1].strip() == "Next page."
