#!/usr/bin/env bash
# Plots throughput against workers, with and without the inbox, per database flavour,
# from the summary CSV of cmd/inbox-load (gnuplot; Debian package gnuplot-nox).
#
#   scripts/plot-bench.sh docs/bench/workers.csv docs/bench/workers.png
set -euo pipefail
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
  plots+="'$data' index $i using 1:2 with linespoints lc $c dt 2 pt 6 title '$f plain tx', "
  plots+="'$data' index $i using 1:3 with linespoints lc $c dt 1 pt 7 title '$f with inbox', "
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
set title "One-UPDATE handler: messages/s vs workers (2 shared cores, default durability)"
set xlabel "concurrent workers"
set ylabel "messages per second"
plot ${plots%, }
set title "Inbox throughput / plain-transaction throughput (paired, median of repeats)"
set ylabel "ratio"
set yrange [0.5:1.05]
set key bottom right
plot ${ratios%, }
unset multiplot
GP
echo "wrote $out"
