#!/usr/bin/env bash
# Lays out the public files the genre benchmark reads (benchmarks/_genre_data.py) under DEST, each repository at
# the commit the benchmark pins, as `<owner>+<name>/<path>`; genre_keep.py checks every source by hash.
#
#   bash benchmarks/get_genre_data.sh DEST [MIRRORS]
#
# MIRRORS: a folder of bare clones as `<owner>+<name>/repo` (read instead of cloning from GitHub when present).
# Only text files are extracted (.txt .csv .md .xml, and .json where a source is JSON); files a mirror lacks are
# skipped and then fail the hash check.
set -euo pipefail
dest=${1:?usage: get_genre_data.sh DEST [MIRRORS]}
mirrors=${2:-}
mkdir -p "$dest"

extract() {  # repo commit paths...   (KEEP: a regex the paths must match, DROP: one they must not, when set;
             #                       EXTS: the extensions extracted, a regex, text files by default)
  local repo=$1 commit=$2 name=${1/\//+} git_dir keep=${KEEP:-} drop=${DROP:-} exts=${EXTS:-txt|csv|md|xml}
  shift 2
  git_dir=$mirrors/$name/repo
  if [[ -z "$mirrors" || ! -d "$git_dir" ]]; then
    git_dir=$dest/.clones/$name.git
    [[ -d "$git_dir" ]] || git clone --quiet --bare --filter=blob:none "https://github.com/$repo" "$git_dir"
  fi
  git -c core.quotepath=false --git-dir="$git_dir" ls-tree -r --name-only "$commit" -- "$@" |
    while IFS= read -r path; do
      [[ -z "$keep" || "$path" =~ $keep ]] || continue
      [[ -z "$drop" || ! "$path" =~ $drop ]] || continue
      [[ "$path" =~ [.]($exts)$ ]] || continue
      mkdir -p "$dest/$name/$(dirname "$path")"
      git --git-dir="$git_dir" show "$commit:$path" >"$dest/$name/$path" 2>/dev/null ||
        { rm -f "$dest/$name/$path"; echo "not in $git_dir: $path" >&2; }
    done
  echo "$repo@$commit -> $dest/$name"
}

extract DiamonWoo/Laosheng.top 960d764c2764edb3314e225cd500a5144b8d56c4 falv/flk.npc
extract Werneror/Poetry 4cfe49c .
extract stdlib-js/datasets-spam-assassin 1b84d49ab4b28092ead009b3ceeb67ae525289d1 data
extract deepspeedai/DeepSpeed edaa7221267243c7be7fb49c5d5f5c4fb97b4641 blogs docs/_tutorials
extract zhangbiqiong/sanguoyanyi 054f22a1397ad29561ae9f998785780feaecc510 三国演义.txt
extract karpathy/char-rnn 6f9487a6fe5b420b7ca9afb0d7c078e37c1d1b4e data/tinyshakespeare
extract dejanbatanjac/bbc-article-classify-bert 8265dc84e88b82b87ce7f5b2df5bbbb1159ae922 bbc
extract Matteo-Malve/RAGMedAssist-INLPT-WS2023 d599652b130e6462fb3d60fcedf4c13ad819980a project/data/pubmed_data.csv
extract kevswanberg/beer_tentrr 9573647bff33c61bdce2f07a9000a4098fd3074d Posts.xml
# every twentieth book of the collection (005, 025, ... 685): its 700 books are 157 MB
KEEP='^[0-9][02468]5-[^/]*[.]txt$' extract xiaopangxia/TCM-Ancient-Books db0155dc7c42b9c6b3736896661f317c7110038f .
# the books' chapters (English and Chinese editions), Markdown with TeX math (its notebooks' code in fenced blocks)
KEEP='^chapter_[^/]*/[^/]*[.]md$' extract d2l-ai/d2l-en 23d7a5aecceee57d1292c56e90cce307f183bb0a .
KEEP='^chapter_[^/]*/[^/]*[.]md$' DROP='_origin[.]md$' extract d2l-ai/d2l-zh e6b18ccea71451a55fcd861d7b96fddf2587b09a .
extract Accord-Project/accord-nlp ac1cc17f0231d37289d2eec5fe2874d0730b7c7d data/lm/uk_building_codes/txt_processed
# US Supreme Court opinions (2016-2017) as CourtListener gives them: a JSON file a search topic, 50 cases twice
EXTS=json extract ielab/ussc-caselaw-collection a3061eef368c3edf075b2f832eb0607eb7d03724 airs2017-collection/topic
