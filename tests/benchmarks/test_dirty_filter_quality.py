"""The dirty-filter benchmark's genre report: which misses a genre's size cannot explain."""
from benchmarks.dirty_filter_quality import genre_rows


def test_many_genres_print_only_their_misses_and_count_those_beyond_the_interval(capsys):
    hits = {f"genre {i}": [False] * 30 for i in range(20)}
    hits["karaoke"] = [True] + [False] * 8   # 1 of 9: 11%, but its 95% interval reaches down to 2%
    hits["loans"] = [True] * 6 + [False] * 44  # 6 of 50: 12%, interval 5.6-23.8%
    genre_rows(hits, "built-in")
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines[:2]] == ["karaoke", "loans"]
    assert "20 of 22 genres met (9-50 docs a genre, median 30)" in lines[2]
    assert lines[2].endswith("1 missed beyond the 95% CI (its low end over 4%)")
    assert len(lines) == 3
