// Command kafka-dev runs a small Kafka wire-protocol broker for the inbox tests
// and examples, so that they can talk to "Kafka" without Docker, a JVM or an
// Apache Kafka installation.
//
// It wraps kfake from franz-go (github.com/twmb/franz-go/pkg/kfake), an
// in-memory Go implementation of the Kafka protocol: produce and fetch,
// consumer groups with rebalances and offset commits, several brokers, and
// optionally a data directory that survives restarts. Watermill's Kafka
// Pub/Sub (watermill-kafka, built on Sarama) connects to it over TCP exactly as
// it would to a real cluster. It is a development and test tool only: it is NOT
// Apache Kafka and must not be used in production.
//
// Brokers listen on 127.0.0.1 only. Topics are created automatically on first
// use, with -partitions partitions.
//
// # Running it
//
// This directory is its own Go module (so that franz-go stays out of the
// library's go.mod), so `go run ./cmd/kafka-dev` from the repository root does
// not work. Instead run, from the repository root:
//
//	(cd cmd/kafka-dev && go run . -ports 9092)
//
// or build a binary once and run that:
//
//	go build -C cmd/kafka-dev -o /tmp/kafka-dev .
//	/tmp/kafka-dev -ports 9092
//
// scripts/kafka-dev.sh does the build, start-in-background and wait for you
// (and `scripts/kafka-dev.sh stop` stops it).
//
// # Flags
//
//	-ports 9092               comma-separated ports, one broker per port; 0 picks a random free port
//	                          (e.g. -ports 9092,9093,9094 for three brokers, -ports 0 for one random)
//	-partitions 4             partitions of auto-created topics
//	-min-session-timeout 1s   smallest consumer-group session timeout accepted (Kafka's and kfake's
//	                          default is 6s; Sarama retries silently when its session is below it)
//	-data-dir ""              persist topics, offsets and groups in this directory (default: memory only)
//	-log-level warn           none, error, warn, info or debug (logs go to stderr)
//
// Once every broker listens, it prints exactly one line to stdout,
//
//	READY 127.0.0.1:9092
//
// with the addresses comma-separated, then runs until SIGINT or SIGTERM, closes
// the cluster (flushing -data-dir) and exits 0.
//
// # Client settings for tests
//
// With Sarama (watermill-kafka) consumer groups, tests should set
// Consumer.Offsets.Initial = sarama.OffsetOldest (a new group starts at the
// newest offset otherwise), Consumer.MaxWaitTime = 50ms (synchronous offset
// commits wait behind the long-poll fetch, 500ms by default), and a short
// Consumer.Group.Session.Timeout (e.g. 2s, at least -min-session-timeout)
// with Heartbeat.Interval 500ms so that a crashed member is replaced quickly.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "kafka-dev:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		portsFlag  = flag.String("ports", "9092", "comma-separated ports, one broker per port; 0 = random free port")
		partitions = flag.Int("partitions", 4, "default number of partitions for auto-created topics")
		minSession = flag.Duration("min-session-timeout", time.Second, "minimum consumer-group session timeout the brokers accept (kfake default 6s)")
		dataDir    = flag.String("data-dir", "", "directory to persist cluster state in across restarts (default: in memory only)")
		logLevel   = flag.String("log-level", "warn", "broker log level: none, error, warn, info, debug (to stderr)")
	)
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(),
			"Usage: kafka-dev [flags]\n\nA Kafka wire-protocol broker (franz-go kfake) for tests and examples. Not for production.\n\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %q", flag.Args())
	}

	ports, err := parsePorts(*portsFlag)
	if err != nil {
		return err
	}
	if *partitions < 1 {
		return fmt.Errorf("-partitions must be at least 1, got %d", *partitions)
	}
	if *minSession < 0 {
		return fmt.Errorf("-min-session-timeout must not be negative, got %s", *minSession)
	}
	level, err := parseLogLevel(*logLevel)
	if err != nil {
		return err
	}

	opts := []kfake.Opt{
		kfake.Ports(ports...),
		kfake.NumBrokers(len(ports)),
		kfake.AllowAutoTopicCreation(),
		kfake.DefaultNumPartitions(*partitions),
		kfake.WithLogger(kfake.BasicLogger(os.Stderr, level)),
	}
	if *minSession > 0 {
		opts = append(opts, kfake.GroupMinSessionTimeout(*minSession))
	}
	if *dataDir != "" {
		opts = append(opts, kfake.DataDir(*dataDir))
	}

	// Subscribe before listening so a signal sent right after READY is not lost.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)

	cluster, err := kfake.NewCluster(opts...)
	if err != nil {
		return fmt.Errorf("starting cluster: %w", err)
	}

	out := bufio.NewWriter(os.Stdout)
	fmt.Fprintf(out, "READY %s\n", strings.Join(cluster.ListenAddrs(), ","))
	if err := out.Flush(); err != nil {
		cluster.Close()
		return fmt.Errorf("writing READY line: %w", err)
	}
	fmt.Fprintf(os.Stderr, "kafka-dev: %d broker(s) on %s, %d partitions per auto-created topic (not for production)\n",
		len(ports), strings.Join(cluster.ListenAddrs(), ","), *partitions)

	sig := <-sigs
	fmt.Fprintf(os.Stderr, "kafka-dev: %s, shutting down\n", sig)
	signal.Stop(sigs)
	cluster.Close()
	return nil
}

func parsePorts(s string) ([]int, error) {
	var ports []int
	seen := map[int]bool{}
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		p, err := strconv.Atoi(f)
		if err != nil || p < 0 || p > 65535 {
			return nil, fmt.Errorf("-ports: invalid port %q", f)
		}
		if p != 0 && seen[p] {
			return nil, fmt.Errorf("-ports: port %d given twice", p)
		}
		seen[p] = true
		ports = append(ports, p)
	}
	if len(ports) == 0 {
		return nil, fmt.Errorf("-ports: need at least one port")
	}
	return ports, nil
}

func parseLogLevel(s string) (kfake.LogLevel, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "none", "off":
		return kfake.LogLevelNone, nil
	case "error", "err":
		return kfake.LogLevelError, nil
	case "warn", "warning":
		return kfake.LogLevelWarn, nil
	case "info":
		return kfake.LogLevelInfo, nil
	case "debug":
		return kfake.LogLevelDebug, nil
	}
	return 0, fmt.Errorf("-log-level: unknown level %q (want none, error, warn, info or debug)", s)
}
