"""The dirty-filter benchmark's data: copies of rows already read never count as unseen, and a file in --extra DIR
that is not the published one stops the benchmark instead of giving other figures."""
import json

import pytest

from benchmarks._quality_data import Copies, extra_labeled_sets, fewclue_corpora, fewclue_row, labeled_sets, without_copies
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


def test_fewclue_records_of_every_task_give_their_label_as_genre_and_unlabeled_files_a_genre_of_their_own():
    # the record shapes of the four tasks' files, as published
    assert fewclue_row({"label": 10, "label_des": "社区服务", "sentence": "小区生活必备软件", "id": 221}) == \
        ("社区服务", "小区生活必备软件")
    assert fewclue_row({"label": 100, "label_desc": "news_story", "sentence": "农村依然很重视土葬", "keywords": ""}) == \
        ("news_story", "农村依然很重视土葬")
    assert fewclue_row({"id": 59, "sentence": "还不错", "label": "Positive"}) == ("Positive", "还不错")
    assert fewclue_row({"content": "塔中地区是塔里木盆地的重点勘探区域", "label": "地质学/地质资源与地质工程", "id": 1}) == \
        ("地质学/地质资源与地质工程", "塔中地区是塔里木盆地的重点勘探区域")
    assert fewclue_row({"id": "0", "sentence": "加长3.4米"}) == ("unlabeled", "加长3.4米")


def test_a_fewclue_task_needs_all_its_published_files(tmp_path):
    assert fewclue_corpora(tmp_path) == {}  # none there: every task is left out
    line = json.dumps({"label": 10, "label_des": "社区服务", "sentence": "小区生活必备软件"}, ensure_ascii=False)
    (tmp_path / "fewclue_iflytek_train_few_all.json").write_text(line + "\n", encoding="utf-8")
    with pytest.raises(SystemExit, match="fewclue_iflytek_train_few_all.json is not the file .* save "
                                         "https://raw.githubusercontent.com/CLUEbenchmark/FewCLUE/.*/datasets/iflytek/"
                                         "train_few_all.json there"):
        fewclue_corpora(tmp_path)
