"""A run of a PDF's paragraphs counts as a diagram's labels by the share of its paragraphs that are labels."""
from benchmarks.pdf_text_removals import label_share


def test_a_short_fragment_without_a_sentence_end_is_a_label_and_a_short_sentence_or_list_item_is_not():
    run = "\n\n".join(["Fd", "7.5m max.", "Fire doorset (minimum E 30)", "See para 2.10",
                       "The door should be self-closing.", "a.  safely; and",
                       "Every door to a habitable room has a minimum clear opening width."])
    # labels: "Fd", "See para 2.10", and a short list item without a sentence end ("a.  safely; and"): the measure
    # cannot tell it from a label; "7.5m max." ends as a sentence does, "Fire doorset (minimum E 30)" has 5 words
    assert label_share(run) == 3 / 7


def test_a_run_of_prose_has_no_labels_and_an_empty_run_counts_as_none():
    assert label_share("1.14  The principal private entrance should comply with all of the following.\n\n"
                       "a.  The door has a minimum clear opening width of 775mm.") == 0
    assert label_share("") == 0
