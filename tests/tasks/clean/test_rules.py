from pretrain.config import CleanConfig, SourceConfig
from tasks.clean.channel import detect_channel
from tasks.clean.features import DocFeatures
from tasks.clean.lexicon import Lexicon, builtin_lexicon_paths
from tasks.clean.normalize import normalize_text
from tasks.clean.rules import Doc, build_rules, first_failure

CFG = CleanConfig(sources=[SourceConfig(path="x")])
RULES = build_rules(CFG, Lexicon.from_paths(builtin_lexicon_paths()))


def judge(text: str, hint=None) -> tuple[str, str | None]:
    text = normalize_text(text, keep_indentation=hint == "code")
    feats = DocFeatures(text)
    channel = detect_channel(feats, hint)
    return channel, first_failure(RULES, Doc(text, channel, feats))


def test_normalize():
    assert normalize_text("a\u200b b\r\n\r\n\r\n\r\nc\x00  d\u3000e") == "a b\n\nc d e"
    assert normalize_text("def f():\r\n    return 1  \n", keep_indentation=True) == "def f():\n    return 1"


def test_channels():
    assert judge("今天天气很好，我们一起去公园散步，然后在湖边的茶馆里喝茶聊天，一直坐到太阳落山。")[0] == "zh"
    assert judge("The committee met on Tuesday to review the budget for the new library wing and agreed.")[0] == "en"
    code = "import os\n\ndef main():\n    for x in range(3):\n        print(x)\n    return 0\n"
    assert judge(code)[0] == "code"


def test_clean_prose_is_kept():
    assert judge("A good recipe for bread needs only flour, water, salt and yeast, but the method matters more.")[1] is None


def test_dirty_and_garbage_are_rejected_with_reasons():
    assert judge("网上赌博平台真人荷官在线发牌，百家乐、六合彩、时时彩全天开放！首存送彩金，加微信领取")[1] == "dirty_lexicon"
    assert judge("Online casino bonus with free spins! Sports betting jackpot, bet now and claim your prize.")[1] == "dirty_lexicon"
    assert judge("$$$ ### @@@ !!! *** ~~~ ^^^ %%% &&& $$$ ### @@@ !!! *** ~~~ ^^^ hello there")[1] in ("too_many_symbols", "unsupported_language")
    assert judge("short")[1] == "too_short"
    assert judge("\n".join(["Buy now at the best price today."] * 10))[1] == "repeated_lines"


def test_single_mention_is_not_dirty():
    text = ("The city council debated a proposal to license a casino near the harbour, but most residents who "
            "spoke at the meeting were more worried about traffic and the loss of the old fish market.")
    assert judge(text)[1] is None


def test_minified_code_rejected():
    assert judge("var a=1;" * 300 + "\nfunction f(){return 1;}\n}\n", hint="code")[1] == "code_line_too_long"


def test_lexicon_word_boundaries():
    lex = Lexicon(["porn", "赌场"])
    assert lex.hits("pornography and porn") == ["porn"]
    assert lex.hits("他去了赌场。") == ["赌场"]
