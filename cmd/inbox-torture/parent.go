package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// delivery is one copy of one message.
type delivery struct{ msg, copy int }

// proc is a worker slot: the current process (generation gen) in it.
type proc struct {
	slot, gen int
	cmd       *exec.Cmd
	stdin     io.WriteCloser
	alive     bool
	ready     bool
	inflight  map[delivery]bool // direct transport: handed to it, not reported yet
}

type event struct {
	slot, gen int
	line      string
	exited    bool
	restart   bool
}

// counts are what the run did.
type counts struct {
	processed, duplicates, waited, failedInjected, failedDB, contended int
	crashes, kills, restarts, skipped                                  int
	terminations                                                       atomic.Int64
}

type parent struct {
	o         options
	db        database
	events    chan event
	done      chan struct{}
	procs     []*proc
	handled   [][]bool
	remaining int
	pending   []delivery
	stopping  bool
	healed    heal
	c         counts
	exe       string
	// deadLetters counts the dead-letter topic's records per message (-transport kgo).
	deadLetters map[string]int
}

// runParent runs the whole scenario and reports whether the ledger came out right.
func runParent(ctx context.Context, o options) (bool, error) {
	exe, err := os.Executable()
	if err != nil {
		return false, err
	}
	db, err := openDatabase(ctx, o, false)
	if err != nil {
		return false, err
	}
	defer db.close()
	if !o.keep {
		defer func() { _ = db.drop(context.WithoutCancel(ctx)) }()
	}
	if err := db.setup(ctx, o.accounts); err != nil {
		return false, fmt.Errorf("creating the tables of run %s: %w", o.run, err)
	}
	if o.transport != "direct" {
		if !o.keep {
			defer dropTransport(o)
		}
		start := time.Now()
		if err := publish(ctx, o); err != nil {
			return false, fmt.Errorf("publishing through %s: %w", o.transport, err)
		}
		o.logf("published %d messages × %d copies through %s in %v", o.messages, o.copies, o.transport, time.Since(start).Round(time.Millisecond))
	}

	p := &parent{o: o, db: db, exe: exe, events: make(chan event, 1024), done: make(chan struct{})}
	p.handled = make([][]bool, o.messages)
	for i := range p.handled {
		p.handled[i] = make([]bool, o.copies)
		for c := range o.copies {
			p.pending = append(p.pending, delivery{i, c})
		}
	}
	p.remaining = o.messages * o.copies
	if o.transport != "direct" {
		p.pending = nil
	}

	start := time.Now()
	for slot := range o.workers {
		p.procs = append(p.procs, &proc{slot: slot})
		if err := p.start(slot); err != nil {
			return false, err
		}
	}
	stopTerminator := p.terminator(ctx)
	finished := p.loop(stopTerminator)
	wall := time.Since(start)
	stopTerminator()
	p.stopAll()

	// Wait for the server to drop the killed workers' connections, so every transaction
	// they left open has rolled back before the check.
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if n, err := db.workerConns(ctx); err == nil && n == 0 {
			break
		}
	}
	state, err := db.ledger(ctx)
	if err != nil {
		return false, fmt.Errorf("reading the ledger: %w", err)
	}
	problems := check(o, state)
	if t, ok := db.(*tenants); ok { // each tenant's ledger holds its messages, exactly
		if problems, err = checkTenants(ctx, o, t); err != nil {
			return false, fmt.Errorf("reading the tenants' ledgers: %w", err)
		}
	}
	if o.transport == "kgo" {
		got, err := deadLetters(ctx, o)
		if err != nil {
			return false, fmt.Errorf("reading the dead-letter topic: %w", err)
		}
		p.deadLetters = got
		problems = append(problems, checkDeadLetters(o, got)...)
	}
	if !finished {
		problems = append([]string{fmt.Sprintf("%d of %d deliveries not handled (-duration %v passed, or interrupted)", p.remaining, o.messages*o.copies, o.duration)}, problems...)
	}
	p.print(wall, state, problems)
	return len(problems) == 0, nil
}

func (o options) logf(format string, args ...any) {
	if !o.quiet {
		fmt.Fprintf(os.Stderr, "inbox-torture: "+format+"\n", args...)
	}
}

// workerArgs are the flags a worker process gets.
func (p *parent) workerArgs(slot int) []string {
	o := p.o
	return []string{"-worker", "-slot", strconv.Itoa(slot), "-db", o.db, "-dsn", o.dsn, "-transport", o.transport, "-mode", o.mode, "-run", o.run,
		"-workers", strconv.Itoa(o.workers), "-messages", strconv.Itoa(o.messages), "-copies", strconv.Itoa(o.copies),
		"-accounts", strconv.Itoa(o.accounts), "-concurrency", strconv.Itoa(o.concurrency),
		"-fail-rate", strconv.FormatFloat(o.failRate, 'g', -1, 64), "-crash-rate", strconv.FormatFloat(o.crashRate, 'g', -1, 64),
		"-handler-delay", o.handlerDelay.String(), "-kafka-brokers", o.brokers, "-amqp-url", o.amqpURL,
		"-nats-url", o.natsURL, "-redis-url", o.redisURL, "-tenants", strconv.Itoa(o.tenants), "-poison", strconv.Itoa(o.poison)}
}

// start starts a new process in slot.
func (p *parent) start(slot int) error {
	w := p.procs[slot]
	w.gen++
	cmd := exec.Command(p.exe, p.workerArgs(slot)...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting a worker: %w", err)
	}
	w.cmd, w.stdin, w.alive, w.ready, w.inflight = cmd, stdin, true, false, map[delivery]bool{}
	gen := w.gen
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			p.o.logf("worker %d (pid %d): %s", slot, cmd.Process.Pid, sc.Text())
		}
	}()
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			p.send(event{slot: slot, gen: gen, line: sc.Text()})
		}
		_ = cmd.Wait()
		p.send(event{slot: slot, gen: gen, exited: true})
	}()
	return nil
}

func (p *parent) send(ev event) {
	select {
	case p.events <- ev:
	case <-p.done:
	}
}

// terminator terminates a worker database connection about every -terminate-every.
func (p *parent) terminator(ctx context.Context) (stop func()) {
	if p.o.terminateEvery <= 0 {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		for {
			select {
			case <-time.After(jitter(p.o.terminateEvery)):
			case <-ctx.Done():
				return
			}
			if ok, err := p.db.terminate(ctx); err == nil && ok {
				p.c.terminations.Add(1)
			} else if err != nil && ctx.Err() == nil {
				p.o.logf("terminating a worker connection: %v", err)
			}
		}
	}()
	return func() { cancel(); <-finished }
}

// jitter returns d ± 50%.
func jitter(d time.Duration) time.Duration {
	return d/2 + rand.N(d)
}

// heal records when -faults-for stopped the faults, and how many deliveries were left.
type heal struct {
	at   time.Time
	left int
	took time.Duration // from then to the end of the loop
}

// loop runs until every delivery was handled (true) or the deadline passed (false).
// After -faults-for it stops killing workers and calls stopTerminator.
func (p *parent) loop(stopTerminator func()) bool {
	deadline := time.After(p.o.duration)
	var kill, faultsOver <-chan time.Time
	if p.o.killEvery > 0 {
		kill = time.After(jitter(p.o.killEvery))
	}
	if p.o.faultsFor > 0 {
		faultsOver = time.After(p.o.faultsFor)
	}
	defer func() {
		if !p.healed.at.IsZero() {
			p.healed.took = time.Since(p.healed.at)
		}
	}()
	progress := time.NewTicker(5 * time.Second)
	defer progress.Stop()
	// inboxkgo in offset mode seeks to the offsets in the database: a batch committed
	// there by a worker killed before it reported is never delivered again. The
	// database says when every record is past.
	var stored <-chan time.Time
	if p.o.transport == "kgo" && p.o.mode == "offsets" {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		stored = t.C
	}
	interrupted := make(chan os.Signal, 1) // Ctrl-C stops early, and still checks
	signal.Notify(interrupted, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(interrupted)
	for p.remaining > 0 {
		select {
		case ev := <-p.events:
			p.handle(ev)
		case <-kill:
			p.killRandom()
			kill = time.After(jitter(p.o.killEvery))
		case <-faultsOver:
			kill, faultsOver = nil, nil
			stopTerminator()
			p.healed = heal{at: time.Now(), left: p.remaining}
			p.o.logf("-faults-for %v passed: no more kills or terminations; %d deliveries left", p.o.faultsFor, p.remaining)
		case <-stored:
			if s, err := p.db.ledger(context.Background()); err == nil && s.offsets >= int64(p.o.messages*p.o.copies) {
				p.remaining = 0
				return true
			}
		case <-progress.C:
			p.o.logf("%d deliveries left; processed %d, duplicates %d, failures %d+%d, kills %d+%d, terminations %d",
				p.remaining, p.c.processed, p.c.duplicates, p.c.failedInjected, p.c.failedDB, p.c.kills, p.c.crashes, p.c.terminations.Load())
		case <-deadline:
			return false
		case <-interrupted:
			p.o.logf("interrupted: stopping the workers and checking the ledger")
			return false
		}
	}
	return true
}

func (p *parent) handle(ev event) {
	w := p.procs[ev.slot]
	if ev.restart {
		if !p.stopping {
			p.c.restarts++
			if err := p.start(ev.slot); err != nil {
				p.o.logf("restarting worker %d: %v", ev.slot, err)
			}
		}
		return
	}
	if ev.gen != w.gen {
		return
	}
	if ev.exited {
		w.alive, w.ready = false, false
		for d := range w.inflight {
			p.pending = append(p.pending, d) // lost with the process: hand it again
		}
		w.inflight = nil
		if !p.stopping {
			time.AfterFunc(100*time.Millisecond, func() { p.send(event{slot: ev.slot, restart: true}) })
		}
		p.dispatch()
		return
	}
	verb, rest, _ := strings.Cut(ev.line, " ")
	if verb == "waited" {
		p.c.waited++
		return
	}
	if verb == "ready" {
		w.ready = true
		p.dispatch()
		return
	}
	fields := strings.Fields(rest)
	if len(fields) < 2 {
		p.o.logf("worker %d: unexpected line %q", ev.slot, ev.line)
		return
	}
	i, err1 := messageIndex(fields[0])
	c, err2 := strconv.Atoi(fields[1])
	if err1 != nil || err2 != nil || i >= p.o.messages || c >= p.o.copies {
		p.o.logf("worker %d: unexpected line %q", ev.slot, ev.line)
		return
	}
	d := delivery{i, c}
	switch verb {
	case "ok", "dup", "skip":
		switch verb {
		case "ok":
			p.c.processed++
		case "dup":
			p.c.duplicates++
		default:
			p.c.skipped++
		}
		delete(w.inflight, d)
		if !p.handled[i][c] {
			p.handled[i][c] = true
			p.remaining--
		}
	case "fail":
		switch {
		case len(fields) < 3 || fields[2] == "db":
			p.c.failedDB++
		case fields[2] == "injected":
			p.c.failedInjected++
		case fields[2] == "contended":
			p.c.contended++
		}
		if w.inflight[d] {
			delete(w.inflight, d)
			p.pending = append(p.pending, d) // nacked: hand it again
		}
	case "crash":
		p.c.crashes++ // the process exits; the delivery stays in flight until then
	default:
		p.o.logf("worker %d: unexpected line %q", ev.slot, ev.line)
	}
	p.dispatch()
}

// dispatch hands pending deliveries (direct transport) to ready workers, each copy of a
// message to a different worker, at most 2×concurrency in flight per worker.
func (p *parent) dispatch() {
	limit := 2 * p.o.concurrency
	for len(p.pending) > 0 {
		d := p.pending[0]
		if p.handled[d.msg][d.copy] {
			p.pending = p.pending[1:]
			continue
		}
		var best *proc
		n := 0
		for _, w := range p.procs {
			if !w.alive || !w.ready || len(w.inflight) >= limit || holds(w, d.msg) {
				continue
			}
			switch {
			case best == nil || len(w.inflight) < len(best.inflight):
				best, n = w, 1
			case len(w.inflight) == len(best.inflight):
				n++
				if rand.N(n) == 0 {
					best = w
				}
			}
		}
		if best == nil {
			return
		}
		best.inflight[d] = true
		// A write to a worker that just died fails; its exit hands the delivery again.
		_, _ = fmt.Fprintf(best.stdin, "m%d %d\n", d.msg, d.copy)
		p.pending = p.pending[1:]
	}
}

func holds(w *proc, msg int) bool {
	for d := range w.inflight {
		if d.msg == msg {
			return true
		}
	}
	return false
}

// killRandom SIGKILLs a random live worker.
func (p *parent) killRandom() {
	var alive []*proc
	for _, w := range p.procs {
		if w.alive {
			alive = append(alive, w)
		}
	}
	if len(alive) == 0 {
		return
	}
	w := alive[rand.N(len(alive))]
	if err := w.cmd.Process.Signal(syscall.SIGKILL); err == nil {
		p.c.kills++
	}
}

// stopAll kills every worker and waits for them to exit.
func (p *parent) stopAll() {
	p.stopping = true
	for _, w := range p.procs {
		if w.alive {
			_ = w.cmd.Process.Signal(syscall.SIGKILL)
		}
	}
	timeout := time.After(30 * time.Second)
	for {
		alive := 0
		for _, w := range p.procs {
			if w.alive {
				alive++
			}
		}
		if alive == 0 {
			break
		}
		select {
		case ev := <-p.events:
			if w := p.procs[ev.slot]; ev.exited && ev.gen == w.gen {
				w.alive = false
			}
		case <-timeout:
			p.o.logf("%d workers still running 30s after SIGKILL", alive)
			close(p.done)
			return
		}
	}
	close(p.done)
}

func (p *parent) print(wall time.Duration, s ledgerState, problems []string) {
	o := p.o
	deliveries := o.messages * o.copies
	fmt.Printf("inbox-torture %s/%s: %d workers, %d messages × %d copies, %d accounts, kill every %v, terminate every %v, fail rate %g, crash rate %g\n",
		o.db, o.transport, o.workers, o.messages, o.copies, o.accounts, o.killEvery, o.terminateEvery, o.failRate, o.crashRate)
	if o.tenants > 0 {
		fmt.Printf("  tenants                 %d databases, each ledger checked on its own\n", o.tenants)
	}
	fmt.Printf("  wall time               %v (%.0f messages/s, %.0f deliveries/s)\n", wall.Round(time.Millisecond),
		float64(len(s.entries))/wall.Seconds(), float64(deliveries-p.remaining)/wall.Seconds())
	fmt.Printf("  processed (reported)    %d, plus %d committed then crashed before the ack\n", p.c.processed, p.c.crashes)
	fmt.Printf("  duplicates skipped      %d (%d of their claims took 5 ms or more: the concurrent-duplicate wait, or a busy machine)\n", p.c.duplicates, p.c.waited)
	fmt.Printf("  failures retried        %d injected, %d database errors, %d contended (ErrContended)\n", p.c.failedInjected, p.c.failedDB, p.c.contended)
	fmt.Printf("  kills                   %d by the parent, %d after a commit before the ack; %d restarts\n", p.c.kills, p.c.crashes, p.c.restarts)
	fmt.Printf("  connections terminated  %d\n", p.c.terminations.Load())
	if o.poison > 0 {
		records := 0
		for _, n := range p.deadLetters {
			records += n
		}
		fmt.Printf("  poison skipped          %d poison messages; %d deliveries skipped, %d records in the dead-letter topic, of %d messages\n",
			o.poison, p.c.skipped, records, len(p.deadLetters))
	}
	if !p.healed.at.IsZero() {
		fmt.Printf("  faults stopped          after %v, %d deliveries left; %d handled in the %v after\n",
			o.faultsFor, p.healed.left, p.healed.left-p.remaining, p.healed.took.Round(time.Millisecond))
	}
	if o.mode == "offsets" {
		fmt.Printf("  ledger                  %d entries, offsets past %d records, for %d messages\n", len(s.entries), s.offsets, o.messages)
	} else {
		fmt.Printf("  ledger                  %d entries, %d inbox keys, for %d messages\n", len(s.entries), len(s.keys), o.messages)
	}
	if len(problems) == 0 {
		fmt.Printf("OK: every message applied exactly once\n")
		return
	}
	fmt.Printf("FAIL:\n")
	for _, pr := range problems {
		fmt.Printf("  %s\n", pr)
	}
}
