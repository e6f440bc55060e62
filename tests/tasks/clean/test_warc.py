import gzip

from pretrain.config import SourceConfig
from tasks.clean.readers import iter_source

HTML = ("<html><head><title>t</title><style>p {color: red}</style><script>var x = 1;</script></head>"
        "<body><p>Hello world, this is a page about rivers.</p><p>第二段是中文。</p></body></html>").encode("gbk")


def record(rtype: str, uri: str, body: bytes, content_type: str) -> bytes:
    head = (f"WARC/1.0\r\nWARC-Type: {rtype}\r\nWARC-Record-ID: <urn:uuid:{rtype}-{len(body)}>\r\n"
            f"WARC-Target-URI: {uri}\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n\r\n").encode()
    return head + body + b"\r\n\r\n"


def http(body: bytes, content_type: str) -> bytes:
    return f"HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body


RECORDS = [
    record("warcinfo", "", b"software: test\r\n", "application/warc-fields"),
    record("request", "http://a.example/", b"GET / HTTP/1.1\r\n\r\n", "application/http; msgtype=request"),
    record("response", "http://a.example/", http(HTML, "text/html; charset=gbk"), "application/http; msgtype=response"),
    record("response", "http://a.example/logo.png", http(b"\x89PNG\r\n\x1a\n....", "image/png"),
           "application/http; msgtype=response"),
    record("conversion", "http://b.example/", "plain WET text\n第二行".encode(), "text/plain"),
]


def read(path):
    unreadable = []
    return list(iter_source(SourceConfig(path=str(path)), unreadable)), unreadable


def test_warc_html_text_extracted_and_non_text_rejected_not_dropped(tmp_path):
    path = tmp_path / "crawl.warc"
    path.write_bytes(b"".join(RECORDS))
    docs, unreadable = read(path)
    assert unreadable == []
    assert [d.doc_id for d in docs] == ["<urn:uuid:warcinfo-16>", "http://a.example/", "http://a.example/",
                                        "http://a.example/logo.png", "http://b.example/"]
    info, request, page, image, wet = docs
    assert (info.problem, request.problem) == ("warc_warcinfo_record", "warc_request_record")  # accounted, not text
    assert info.text == request.text == ""
    assert "Hello world, this is a page about rivers." in page.text and "第二段是中文。" in page.text  # gbk decoded
    assert "color" not in page.text and "var x" not in page.text and page.problem is None
    assert image.problem == "warc_payload_not_text" and image.text == ""
    assert wet.text == "plain WET text\n第二行"


def test_gzipped_warc_per_record_members_and_wet_suffix(tmp_path):
    (tmp_path / "a.warc.gz").write_bytes(b"".join(gzip.compress(r) for r in RECORDS))
    (tmp_path / "b.warc.wet.gz").write_bytes(gzip.compress(RECORDS[-1]))
    docs, unreadable = read(tmp_path / "*.gz")
    assert unreadable == [] and len(docs) == 6 and docs[-1].text == "plain WET text\n第二行"


def test_truncated_warc_is_reported_by_name(tmp_path):
    data = b"".join(gzip.compress(r) for r in RECORDS)
    (tmp_path / "cut.warc.gz").write_bytes(data[:-40])
    (tmp_path / "cut.warc").write_bytes(b"".join(RECORDS)[:-30])
    for name in ("cut.warc.gz", "cut.warc"):
        docs, unreadable = read(tmp_path / name)
        assert len(unreadable) == 1 and unreadable[0].path.endswith(name), name
        assert unreadable[0].docs_read_before_error == len(docs) < len(RECORDS)  # the last record is cut


def wget_resource(uri: str, body: bytes) -> bytes:
    return record("resource", uri, body, "text/plain")


def test_a_crawlers_own_records_and_error_pages_are_rejected_with_a_reason(tmp_path):
    """wget --warc-file keeps its arguments, manifest and log as resource records under metadata:// URIs, and
    writes metadata records; a redirect's body is not a page. None of them may become a document's text."""
    redirect = (b"HTTP/1.1 301 Moved Permanently\r\nLocation: https://a.example/\r\nContent-Type: text/html\r\n"
                b"Content-Length: 20\r\n\r\n<html>Moved</html>\r\n")
    path = tmp_path / "wget.warc"
    path.write_bytes(b"".join([
        RECORDS[0],
        wget_resource("metadata://gnu.org/software/wget/warc/wget_arguments.txt", b'"--warc-file=x" "http://a.example/"'),
        record("metadata", "http://a.example/", b"outlink: http://c.example/ E a/@href\r\n", "application/warc-fields"),
        record("response", "http://a.example/old", redirect, "application/http; msgtype=response"),
        RECORDS[2],
        wget_resource("metadata://gnu.org/software/wget/warc/wget.log", b"2026-12-01 saved [1234/1234]\n"),
        wget_resource("file:///srv/docs/readme.txt", "a file kept as a resource: real text".encode()),
    ]))
    docs, unreadable = read(path)
    assert unreadable == []
    assert [d.problem for d in docs] == ["warc_warcinfo_record", "warc_metadata_record", "warc_metadata_record",
                                         "warc_http_not_ok", None, "warc_metadata_record", None]
    assert docs[-1].text == "a file kept as a resource: real text" and all(d.text == "" for d in docs if d.problem)


QUESTION = ("Can a porter be brewed with smoked malt without tasting like a campfire?")
THREAD = f"""<html><body><h1>Smoked malt in a porter</h1>
<p>{QUESTION}</p>
<p>I brewed a robust porter last winter and liked it, but the recipe I have now swaps a third of the base malt for
beech-smoked malt. The brewer who gave it to me says the smoke fades after a month in the bottle. I would like to
know whether that is true before I buy ten kilos of it.</p>
<hr>
<blockquote><p>{QUESTION}</p></blockquote>
<p>Yes, and a third of the grist is about where the smoke starts to lead. Start with a tenth of the grist and
taste the beer after three weeks. Beech-smoked malt is milder than peat-smoked malt, which you should keep out of
a porter altogether. The smoke does fade with time, but the roast of the porter hides it sooner than the bottle
does.</p>
</body></html>"""


def test_a_forum_answer_quoting_the_question_is_a_quote_and_the_thread_is_kept(tmp_path):
    """An answer that quotes the question reads "> " as a quoted e-mail reply does; as plain lines the page repeats
    a line, which FineWeb's duplicate-character rule takes for boilerplate and removes the thread."""
    from pretrain.config import CleanConfig
    from tasks.clean.judge import Cleaner
    from tasks.clean.readers import RawDoc
    from tasks.clean.warc import html_text

    path = tmp_path / "forum.warc"
    path.write_bytes(record("response", "http://forum.example/q/1",
                            http(THREAD.encode(), "text/html; charset=utf-8"), "application/http; msgtype=response"))
    (page,), _ = read(path)
    assert f"\n> {QUESTION}\n" in page.text and page.text.count(QUESTION) == 2
    cleaner = Cleaner(CleanConfig(sources=[{"path": str(path)}], dedup={"exact": False, "near": False}))
    assert cleaner.judge(page).failure is None
    unquoted = RawDoc("unquoted", page.text.replace(f"> {QUESTION}", QUESTION), "forum", None)
    assert cleaner.judge(unquoted).failure.reason == "fineweb_char_dup_ratio"
    assert html_text(THREAD, main_content=False) == html_text(THREAD, main_content=True)


def test_nested_quotes_and_preformatted_lines_keep_their_depth():
    from tasks.clean.warc import QUOTE_MARK, html_text

    text = html_text(f"<p>Top {QUOTE_MARK}line&#xE000;&#57344;.</p><blockquote><p>Outer.</p><blockquote><p>Inner <b>bold</b>.</p>"
                     "</blockquote><pre>first\nsecond</pre></blockquote><p>After.</p>", main_content=False)
    assert text.split("\n") == ["Top line.", "", "> Outer.", "", "> > Inner bold.", "", "> first", "> second",
                                "", "After."]


def test_an_images_alternative_text_is_not_part_of_the_paragraph_it_sits_in():
    """Stack Exchange's editor writes "enter image description here" as the alt text of every picture; inside a
    paragraph it left the paragraph without its end, which C4 then removed."""
    from pretrain.config import RulesConfig
    from tasks.clean.rules.english import c4_filter_lines
    from tasks.clean.warc import html_text

    paragraph = ("<p>I have always enjoyed a gin and tonic, and there is a whole slew of new gins now. "
                 "<img src=\"gins.png\" alt=\"enter image description here\"></p>")
    for page in (paragraph, paragraph + "<blockquote><p>A quote.</p></blockquote>"):
        text = html_text(f"<html><body>{page}</body></html>", main_content=False)
        assert "enter image description" not in text
        kept, removed = c4_filter_lines(text, RulesConfig().c4)
        assert kept.startswith("I have always enjoyed") and removed["no_terminal_punct"] == 0
