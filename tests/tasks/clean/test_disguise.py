"""Spam's disguises folded away for the dirty rule's matching: look-alikes, compatibility forms, separators."""
import pytest

from pretrain.config import DirtySettings
from tasks.clean.disguise import unmask
from tasks.clean.rules.dirty import DirtyRule
from tests.tasks.clean.test_spam_model import judge, sms_rows


@pytest.mark.parametrize("disguised,plain", [
    ("色❤单❤身", "色单身"),                      # emoji between the characters of a word
    ("电话❤138 love❤you ok❤", "电话138 loveyou ok"),  # emoji anywhere
    ("赌.博 加-微-信", "赌博加微信"),              # ASCII marks, and the space between two CJK words
    ("赌\u200b博", "赌博"),                        # zero-width space
    ("𝐜𝐚𝐬𝐢𝐧𝐨 𝐛𝐨𝐧𝐮𝐬", "casino bonus"),          # mathematical bold
    ("ｗｅｃｈａｔ：８８８ ㎡", "wechat：888 ㎡"),    # full-width letters and digits, not punctuation or units
    ("ⓑⓔⓣ ①②③", "bet 123"),                       # circled
    ("саsіnо 加ѕех群", "casino 加sex群"),         # Cyrillic look-alikes, in a Latin word or in Chinese text
    ("c.a.s.i.n.o or c a s i n o", "casino or casino"),  # a word spelled out
])
def test_disguises_fold_to_the_plain_word(disguised, plain):
    assert unmask(disguised) == plain


@pytest.mark.parametrize("ordinary", [
    "他说，我们走吧。",              # CJK punctuation keeps clauses apart (NFKC makes it ASCII, after the separators)
    "他说, 我们走; 你呢?",           # and so do ASCII clause marks in mixed-width text
    "россия и греция",              # Cyrillic words with letters of their own stay Cyrillic
    "the u.s.a. has a, b and c",    # three letters are an abbreviation, not a spelled word
])
def test_ordinary_text_keeps_its_words_apart(ordinary):
    folded = unmask(ordinary)
    assert folded.replace("，", ",").replace("。", ".") == ordinary.replace("，", ",").replace("。", ".")


def disguised(text: str) -> str:
    """Emoji between CJK characters, full-width Latin letters and digits: the chat spam disguise."""
    out = []
    for ch in text:
        if "\u4e00" <= ch <= "\u9fff":
            out.append(ch + "❤")
        elif ch.isascii() and ch.isalnum():
            out.append(chr(ord(ch) + 0xFEE0))
        else:
            out.append(ch)
    return "".join(out)


def test_real_spam_the_lists_catch_is_still_caught_in_disguise_and_only_with_unmask():
    zh, _ = sms_rows()
    seeing, blind = DirtyRule(DirtySettings()), DirtyRule(DirtySettings(unmask=False))
    caught = [t for spam, t in zh[0::2][:3000] if spam and judge(blind, t) is not None][:20]  # tune rows only
    assert len(caught) == 20
    assert all(judge(seeing, disguised(t)) is not None for t in caught)
    missed = sum(judge(blind, disguised(t)) is None for t in caught)
    assert missed >= 15  # the disguise beats plain matching: what unmask is for
    assert "❤" in disguised(caught[0]) and judge(seeing, caught[0]) is not None
