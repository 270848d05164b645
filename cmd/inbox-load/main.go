// Command inbox-load measures what the inbox costs against its baseline: a handler doing
// one UPDATE (or three statements) with the inbox and in a plain transaction, in turns
// (A/B/A/B) in one process, for each database flavour, durability and worker count. It
// writes one CSV row per round and a summary CSV of the medians, which
// scripts/plot-bench.sh plots.
//
//	go run ./cmd/inbox-load -flavours pgx,sqlpg,mariadb -workers 1,2,4,8,16 \
//	    -rounds 5 -duration 2s -out docs/bench/rounds.csv -summary docs/bench/summary.csv
//
// DSNs come from INBOX_POSTGRES_DSN, INBOX_MARIADB_DSN and INBOX_MYSQL_DSN (defaults: the
// local test databases; MySQL has none). Relaxed durability on MariaDB and MySQL sets
// innodb_flush_log_at_trx_commit=2 globally for the run and restores it after.
package main

import (
	"context"
	"encoding/csv"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/watermill-inbox/inbox/internal/benchload"
)

func main() {
	flavours := flag.String("flavours", "pgx,sqlpg,mariadb", "store flavours: pgx, sqlpg, mariadb, mysql, sqlite (a new file in INBOX_SQLITE_DIR or the temporary directory)")
	workers := flag.String("workers", "1,8", "worker counts")
	durabilities := flag.String("durability", "default", "default, relaxed, or both comma-separated")
	stmts := flag.Int("stmts", 1, "statements per handler: 1 (UPDATE) or 3 (UPDATE, INSERT, SELECT)")
	rounds := flag.Int("rounds", 3, "A/B rounds per setting (mode rounds), or repeats (mode paired)")
	duration := flag.Duration("duration", 2*time.Second, "length of each side of a round (mode rounds), or of each repeat (mode paired)")
	mode := flag.String("mode", "paired", "paired: every worker alternates plain and inbox op by op; rounds: A/B/A/B rounds of -duration")
	out := flag.String("out", "", "CSV of every round (default stdout)")
	summary := flag.String("summary", "", "CSV of the medians per setting")
	compare := flag.String("compare", "plain:inbox", "baseline:candidate among plain, plainrc (plain asking for READ COMMITTED explicitly), inbox, unfolded (the store without its shortcut: pgx, mariadb, mysql), brin and noindex (pgx: the inbox table's processed_at index as BRIN, or none), sessioniso (mariadb, mysql: MySQLConfig.SessionIsolation), handwritten (sqlite, pgx: the inbox's statements written by hand, the floor; on sqlite over one connection), handwrittenpool (the same over the pool of 20), handwrittenfp (pgx: handwritten with the 32-byte fingerprint the middleware stores), middleware (the handler behind Inbox.Middleware, the default Config), middlewarefp and middlewarenofp (the same with PayloadFingerprint, and with NoFingerprint), offsets (offset mode, one message at a time), and per op of -batch messages singles (one inbox transaction each), batch (Inbox.ProcessBatch), offsetbatch (Inbox.ProcessOffsets, records of one partition) and plainbatch (the batch in a plain transaction)")
	batchSize := flag.Int("batch", 100, "messages per op of singles, batch and plainbatch")
	index := flag.String("index", "btree", "the inbox table's processed_at index, replaced by hand after the schema is created (PostgreSQL): btree (as created), brin or none")
	flag.Parse()

	var w io.Writer = os.Stdout
	if *out != "" {
		f, err := os.Create(*out)
		if err != nil {
			log.Fatal(err)
		}
		defer f.Close()
		w = f
	}
	rows := csv.NewWriter(w)
	_ = rows.Write([]string{"flavour", "durability", "stmts", "workers", "round", "plain_per_s", "inbox_per_s", "ratio"})
	sum := [][]string{{"flavour", "durability", "stmts", "workers", "plain_per_s", "inbox_per_s", "ratio", "ratio_min", "ratio_max"}}

	ctx := context.Background()
	for _, flavour := range strings.Split(*flavours, ",") {
		for _, durability := range strings.Split(*durabilities, ",") {
			pool, db, closeFn, err := benchload.Open(ctx, flavour, durability == "relaxed")
			if err != nil {
				log.Fatalf("%s: %v", flavour, err)
			}
			suffix := fmt.Sprintf("load_%d", time.Now().UnixNano()%1e9)
			tgt, err := benchload.NewTarget(ctx, flavour, pool, db, *stmts, suffix, "")
			if err != nil {
				if tgt != nil {
					_ = tgt.Drop(ctx, true)
				}
				closeFn()
				log.Fatalf("%s: %v", flavour, err)
			}
			if err := tgt.ProcessedAtIndex(ctx, *index); err != nil {
				_ = tgt.Drop(ctx, true)
				closeFn()
				log.Fatalf("-index: %v", err)
			}
			ops := map[string]benchload.Op{"plain": tgt.Baseline, "plainrc": tgt.BaselineRC, "inbox": tgt.WithInbox, "unfolded": tgt.WithUnfolded, "handwritten": tgt.HandWritten, "handwrittenpool": tgt.HandWrittenPool, "handwrittenfp": tgt.HandWrittenFP, "offsets": tgt.WithOffsets}
			if ops["middleware"], ops["middlewarefp"], ops["middlewarenofp"], err = tgt.MiddlewareOps(); err != nil {
				log.Fatal(err)
			}
			ops["singles"], ops["batch"], ops["plainbatch"] = tgt.BatchOps(*batchSize)
			ops["offsetbatch"] = tgt.WithOffsetBatch(*batchSize)
			baseName, candName, _ := strings.Cut(*compare, ":")
			for _, v := range []string{baseName, candName} {
				if v == "brin" || v == "noindex" || v == "sessioniso" {
					if ops[v], err = tgt.Variant(ctx, v); err != nil {
						log.Fatal(err)
					}
				}
			}
			base, cand := ops[baseName], ops[candName]
			if base == nil || cand == nil {
				log.Fatalf("-compare %q: use baseline:candidate among plain, plainrc, inbox, unfolded, brin, noindex, sessioniso, handwritten, handwrittenpool, handwrittenfp, middleware, middlewarefp, middlewarenofp, offsets, singles, batch, offsetbatch, plainbatch", *compare)
			}
			for _, ws := range strings.Split(*workers, ",") {
				n, err := strconv.Atoi(ws)
				if err != nil {
					log.Fatalf("-workers: %v", err)
				}
				var ab benchload.AB
				if *mode == "paired" {
					for range *rounds {
						r, err := benchload.Paired(ctx, n, 0, *duration, base, cand)
						if err != nil {
							log.Fatalf("%s/%s/%d: %v", flavour, durability, n, err)
						}
						ab.RatesA = append(ab.RatesA, r.A.Rate())
						ab.RatesB = append(ab.RatesB, r.B.Rate())
						ab.Ratios = append(ab.Ratios, r.Ratio())
					}
				} else if ab, err = benchload.Compare(ctx, *rounds, n, 0, *duration, base, cand); err != nil {
					log.Fatalf("%s/%s/%d: %v", flavour, durability, n, err)
				}
				for r, ratio := range ab.Ratios {
					_ = rows.Write([]string{flavour, durability, strconv.Itoa(*stmts), ws, strconv.Itoa(r + 1), f1(ab.RatesA[r]), f1(ab.RatesB[r]), f3(ratio)})
				}
				plain, inb := benchload.Median(ab.RatesA), benchload.Median(ab.RatesB)
				lo, hi := minMax(ab.Ratios)
				sum = append(sum, []string{flavour, durability, strconv.Itoa(*stmts), ws, f1(plain), f1(inb), f3(benchload.Median(ab.Ratios)), f3(lo), f3(hi)})
				log.Printf("%-8s %-8s stmts=%d workers=%-2s plain %8.1f/s inbox %8.1f/s ratio %.3f (rounds %.3f..%.3f)",
					flavour, durability, *stmts, ws, plain, inb, benchload.Median(ab.Ratios), lo, hi)
				rows.Flush()
			}
			_ = tgt.Drop(ctx, true)
			closeFn()
		}
	}
	rows.Flush()
	if *summary != "" {
		f, err := os.Create(*summary)
		if err != nil {
			log.Fatal(err)
		}
		cw := csv.NewWriter(f)
		_ = cw.WriteAll(sum)
		if err := f.Close(); err != nil {
			log.Fatal(err)
		}
	}
}

func f1(x float64) string { return strconv.FormatFloat(x, 'f', 1, 64) }
func f3(x float64) string { return strconv.FormatFloat(x, 'f', 3, 64) }

func minMax(xs []float64) (lo, hi float64) {
	for i, x := range xs {
		if i == 0 || x < lo {
			lo = x
		}
		if i == 0 || x > hi {
			hi = x
		}
	}
	return lo, hi
}
