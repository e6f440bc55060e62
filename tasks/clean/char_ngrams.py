"""The text model the spam classifier and its resemblance gate share: TF-IDF over character 1-3-grams inside word
boundaries (no segmentation, so Chinese and English alike; sublinear counts, so a long text is not judged by its
length) and a class-balanced logistic regression. scikit-learn is imported only when a model is made."""
from __future__ import annotations


def char_ngram_classifier():
    """An unfitted scikit-learn pipeline; fit(texts, labels), then predict_proba."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline

    return make_pipeline(
        TfidfVectorizer(analyzer="char_wb", ngram_range=(1, 3), sublinear_tf=True, min_df=2, lowercase=True),
        LogisticRegression(C=4.0, max_iter=3000, class_weight="balanced"))
