"""The dirty-filter benchmark's data: copies of rows already read never count as unseen, and a file in --extra DIR
that is not the published one stops the benchmark instead of giving other figures."""
import json

import pytest

from benchmarks._quality_data import Copies, extra_labeled_sets, labeled_sets, without_copies
from tests.conftest import CORPORA, need_shared


def test_rows_that_copy_a_row_already_read_exactly_or_nearly_are_dropped_and_counted():
    shared = labeled_sets(need_shared(CORPORA / "dirty"))
    read = [text for _, text in shared["zh_sms_labeled"][:200]]
    unseen = [(False, text) for _, text in shared["zh_sms_labeled"][200:260]]
    edited = [(True, text + "，回复TD退订") for text in read[:20] if len(text) > 40]
    rows = unseen + [(False, read[0])] + edited + [unseen[0]]
    kept = without_copies(rows, Copies(read))
    assert len(kept.rows) + kept.exact_copies + kept.near_copies == len(rows)  # every row accounted for
    assert all(r in unseen for r in kept.rows) and unseen[0] in kept.rows  # no copy kept, the first of a pair is
    assert kept.exact_copies >= 2  # a row read before, and a repeat of a kept row
    assert kept.near_copies >= len(edited) > 0  # a long message with a few characters added is still that message


def test_a_labeled_set_in_the_extra_folder_must_be_the_published_file(tmp_path):
    shared = labeled_sets(need_shared(CORPORA / "dirty"))
    assert extra_labeled_sets(tmp_path, shared) == {}  # absent: the set is left out
    (tmp_path / "zh_sms_10k_content.json").write_text(json.dumps(["中奖了"]), encoding="utf-8")
    (tmp_path / "zh_sms_10k_label.json").write_text(json.dumps(["1"]), encoding="utf-8")
    with pytest.raises(SystemExit, match="zh_sms_10k_content.json is not the file .* save https://raw.githubusercontent"
                                         ".com/ZPdesu/Spam-Message-Classifier-sklearn/.*/train_content.json there"):
        extra_labeled_sets(tmp_path, shared)
