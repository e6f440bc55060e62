"""Channel tagging: zh / en / code, from script ratios, code signals and py3langid."""
from __future__ import annotations

import re
from functools import lru_cache

from tasks.clean.features import DocFeatures

# markup is no language: HTML tags and entities, a Markdown link's or image's target, a bare URL
_MARKUP = re.compile(r"<[^<>\n]{1,300}>|&[a-z]+;|\]\([^()\s]*\)|https?://\S+")


@lru_cache(maxsize=1)
def _langid():
    # The model ships inside the wheel; loading it once per process costs ~1 s.
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    return LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)


def detect_channel(feats: DocFeatures, hint: str | None = None) -> str:
    if hint:
        return hint
    if feats.code_line_ratio >= 0.3 and len(feats.lines) >= 3:
        return "code"
    feats = without_markup(feats)
    if feats.cjk_ratio >= 0.2:
        return "zh"
    lang, _ = _langid().classify(feats.text[:2000])
    if lang == "en":
        return "en"
    if lang in ("zh", "ja") and feats.cjk_ratio > 0.05:
        return "zh"
    return "other"


def without_markup(feats: DocFeatures) -> DocFeatures:
    """The features of the text the reader sees: a Chinese page whose HTML and link targets outweigh its
    characters is still Chinese, and so is one whose fenced code or citation block outweighs them."""
    text = feats.text
    if "```" in text or "~~~" in text:
        prose = feats.prose_text
        text = prose if prose.strip() else text
    if "<" not in text and "](" not in text and "://" not in text and "&" not in text:
        return feats if text is feats.text else DocFeatures(text)
    return DocFeatures(_MARKUP.sub(" ", text))
