"""What the genre benchmark counts apart as short: the rules' own length minimums, judged on the text as read."""
from benchmarks._genre_data import Source
from benchmarks.genre_keep import load_genre, under_length_minimum
from pretrain.config import RulesConfig

ZH_PROSE = ("清晨的菜市场总是最热闹的地方。卖豆腐的阿姨把刚做好的豆腐摆在木板上，冒着淡淡的热气；隔壁的鱼摊老板一边吆喝，"
            "一边熟练地刮着鳞片。")
# a blog's section as the Markdown splitter cuts it: a heading and its pictures, 13 Chinese characters
ZH_HEADING_AND_IMAGES = ("# DeepSpeed-FastGen：通过 MII 和 DeepSpeed-Inference 实现 LLM 高吞吐量文本生成\n\n"
                         "<div align=\"center\">\n <img src=\"../assets/images/fastgen-hero-light.png\" width=\"850px\">\n"
                         " <img src=\"../assets/images/fastgen-hero-dark.png\" width=\"850px\">\n</div>")
EN_MAIL = ("Is there a way to look for a particular file or directory in hundreds of zip files? Something like zgrep "
           "but for the file name instead of a word. Thanks, Justin.")


def test_the_rules_minimums_decide_what_is_short():
    rules = RulesConfig()
    assert under_length_minimum(ZH_HEADING_AND_IMAGES, rules)  # 13 CJK characters: under chinese.min_cjk_chars
    assert not under_length_minimum(ZH_PROSE, rules)
    assert under_length_minimum(EN_MAIL, rules)  # 29 words, 3 sentences
    assert not under_length_minimum(" ".join([EN_MAIL] * 2), rules)  # 58 words, 6 sentences
    assert not under_length_minimum(ZH_HEADING_AND_IMAGES, RulesConfig(chinese={"min_cjk_chars": 10}))
    # as the rules count: a fenced code block is a sentence toward C4's 5 and its words count toward Gopher's 50
    code = "\n```\n" + "\n".join(f"unzip -l archive_{k}.zip | grep -n report_{k}" for k in range(6)) + "\n```\nIt works."
    assert not under_length_minimum(EN_MAIL + code, rules)
    assert under_length_minimum(EN_MAIL + "\nIt works.", rules)


def test_tune_scoring_reads_the_tune_rows_of_the_labeled_sets(tmp_path):
    from benchmarks.genre_keep import labeled_halves
    from tests.conftest import CORPORA, need_shared

    examples, tune, held = labeled_halves(tmp_path, need_shared(CORPORA))
    assert examples and set(examples) == set(tune) == set(held)
    for name in tune:
        assert examples[name] == tune[name]
        # the halves share no message: looking at the tune figures shows nothing of the held-out rows
        assert not {text for _, text in tune[name]} & {text for _, text in held[name]}


def test_on_the_tune_halves_the_classifier_never_judges_its_own_examples():
    from benchmarks.genre_keep import classifier_judges

    texts = {"zh law": ["..."], "en_sms spam": ["win"], "en_sms ham": ["hi"], "SpamAssassin ham": ["re:"]}
    examples = {"en_sms": [(True, "win"), (False, "hi")]}
    # its examples in the corpus it samples would tell its gate that the corpus looks like them
    assert set(classifier_judges(texts, examples, "tune")) == {"zh law", "SpamAssassin ham"}
    assert classifier_judges(texts, examples, "held-out") == texts


def test_the_curated_run_judges_its_sources_with_their_own_rules(tmp_path):
    from benchmarks.genre_keep import CURATED, CURATED_RULES, judged
    from tests.tasks.clean.test_stage import LIST_MAIL

    texts = {"en e-mail (ham)": [LIST_MAIL]}
    assert judged(texts, tmp_path, None)[0] == {"en e-mail (ham)": {0: "gopher_quality/gopher_short_doc"}}
    removed, kept_chars = judged(texts, tmp_path, None, "clean-own-rules", CURATED_RULES)
    assert removed == {"en e-mail (ham)": {}} and kept_chars["en e-mail (ham)"][0] > 0.9 * len(LIST_MAIL)
    assert "en e-mail (ham)".startswith(CURATED) and not "en e-mail spam vs ham (SpamAssassin) ham".startswith(CURATED)


def test_a_genre_whose_reader_lacks_its_package_is_left_out_with_the_fix(tmp_path):
    """The forum threads need resiliparse (the 'warc' extra): without it that genre is named with the install
    command, and the other genres still run."""
    (tmp_path / "Posts.xml").write_text("<posts />", encoding="utf-8")

    def needs_a_package(files):
        raise ImportError("forum threads are HTML: pip install 'pretrain-pipeline[warc]' (resiliparse)")
        yield

    source = Source("en forum (test)", "en", True, "test", "Posts.xml", "", None, needs_a_package)
    assert load_genre(source, tmp_path, tmp_path) == \
        "not read: forum threads are HTML: pip install 'pretrain-pipeline[warc]' (resiliparse)"


def test_show_removed_lists_the_rules_removals_then_what_only_the_classifier_removed(capsys):
    from benchmarks.genre_keep import SHORT, show_removed

    texts = {"zh news": ["促销 广告", "短", "新闻 正文", "彩票 开奖"]}
    plain = {"zh news": {0: "dirty/dirty_content", 1: SHORT}}
    with_classifier = {"zh news": {0: "dirty/dirty_content", 1: SHORT, 3: "dirty/dirty_content"}}
    show_removed(texts, plain, with_classifier, limit=5)
    lines = capsys.readouterr().out.splitlines()
    assert lines == ["  [zh news] dirty/dirty_content: 促销 广告", "  [zh news] dirty with the classifier: 彩票 开奖"]
