#!/usr/bin/env bash
# Plots throughput against workers, with and without the inbox, per database flavour,
# from the summary CSV of cmd/inbox-load (gnuplot; Debian package gnuplot-nox).
#
#   scripts/plot-bench.sh docs/bench/workers.csv docs/bench/workers.png
#
# For a summary of another -compare, name its sides and titles in the environment:
#   BASE="100 single messages" CAND="batch of 100" TITLE="..." RATIO_TITLE="..." \
#     YLABEL="ops per second" RATIO_RANGE="0:80" scripts/plot-bench.sh docs/bench/batch-singles.csv docs/bench/batch-singles.png
set -euo pipefail
base="${BASE:-plain tx}"
cand="${CAND:-with inbox}"
title="${TITLE:-One-UPDATE handler: messages/s vs workers (2 shared cores, default durability)}"
ratio_title="${RATIO_TITLE:-Inbox throughput / plain-transaction throughput (paired, median of repeats)}"
ratio_range="${RATIO_RANGE:-0.5:1.05}"
ylabel="${YLABEL:-messages per second}"
in="${1:-docs/bench/workers.csv}"
out="${2:-docs/bench/workers.png}"
command -v gnuplot >/dev/null || { echo "gnuplot not found: apt-get install gnuplot-nox" >&2; exit 1; }

# One data block per flavour (durability "default"), separated by two blank lines, as
# gnuplot's "index" wants: workers, plain, inbox (messages/s), median ratio.
data=$(mktemp)
trap 'rm -f "$data"' EXIT
flavours=$(awk -F, 'NR > 1 && $2 == "default" { print $1 }' "$in" | awk '!seen[$0]++')
for f in $flavours; do
  echo "# $f"
  awk -F, -v f="$f" 'NR > 1 && $1 == f && $2 == "default" { print $4, $5, $6, $7 }' "$in" | sort -n
  printf '\n\n'
done > "$data"

plots=""
ratios=""
i=0
colors=(1 2 3 4 6 7)
for f in $flavours; do
  c=${colors[$i]}
  plots+="'$data' index $i using 1:2 with linespoints lc $c dt 2 pt 6 title '$f $base', "
  plots+="'$data' index $i using 1:3 with linespoints lc $c dt 1 pt 7 title '$f $cand', "
  ratios+="'$data' index $i using 1:4 with linespoints lc $c dt 1 pt 7 title '$f', "
  i=$((i + 1))
done

gnuplot <<GP
set terminal pngcairo size 900,900 font ",11"
set output "$out"
set multiplot layout 2,1
set logscale x 2
set xrange [0.85:19]
set xtics ("1" 1, "2" 2, "4" 4, "8" 8, "16" 16)
set grid
set key top left
set title "$title"
set xlabel "concurrent workers"
set ylabel "$ylabel"
plot ${plots%, }
set title "$ratio_title"
set ylabel "ratio"
set yrange [$ratio_range]
set key bottom right
plot ${ratios%, }
unset multiplot
GP
echo "wrote $out"
