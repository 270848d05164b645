// Command inbox operates the tables of github.com/watermill-inbox/inbox: it purges old
// keys, prints the schema, shows key counts, forgets one key so that its message is
// processed again, shows and resets the offsets of offset mode, and serves the
// operator's page (package inboxui) on a loopback address.
//
//	inbox purge  --dsn DSN --older-than 720h [--table inbox] [--schema S] [--batch 10000] [--min-retention 168h] [--force] [--dry-run] [--json|--quiet]
//	inbox schema postgres|mysql|sqlite [--table inbox]
//	inbox migrate up|status --dsn DSN [--table inbox] [--schema S] [--tenants FILE] [--json]
//	inbox stats  --dsn DSN [--table inbox] [--schema S] [--json]
//	inbox forget --dsn DSN --consumer C --key K [--table inbox] [--schema S] [--dry-run]
//	inbox offsets show  --dsn DSN [--consumer C] [--table inbox] [--json]
//	inbox offsets reset --dsn DSN --consumer C --topic T --partition P --to OFFSET [--table inbox] [--brokers B] [--dry-run] [--force]
//	inbox ui     --dsn DSN [--table inbox] [--schema S] [--addr 127.0.0.1:8080] [--user inbox]
//
// Every command that writes takes --dry-run, which says what it would change and changes
// nothing. The offsets live in <table>_offsets: --table names the inbox table, and an
// error about a missing table lists the tables that --table could name.
//
// With a database, a schema or a key prefix per tenant, --tenants FILE replaces --dsn:
// purge and stats run on every tenant of the list (a result per tenant; one that fails
// does not stop the others, and makes the exit status 1), and forget on the one named by
// --tenant. Each line of FILE ("-" reads stdin) is "TENANT DSN [SCHEMA]": SCHEMA is the
// tenant's PostgreSQL schema, or its Redis key prefix; # starts a comment.
//
// DSN is a PostgreSQL URL (postgres://user@host:5432/db), a MySQL DSN
// (mysql://user@tcp(host:3306)/db, or the go-sql-driver form user@tcp(host:3306)/db), or
// a Redis URL (redis://host:6379/0, for redisstore: --table names the key prefix, and
// purge deletes nothing, as Redis expires the keys), or a SQLite file (sqlite:app.db,
// sqlite:///abs/app.db, a path ending in .db, .sqlite or .sqlite3, or a modernc.org/sqlite
// file: URI, for sqlitestore);
// it defaults to the INBOX_DSN environment variable, which keeps passwords out of the
// process list. Errors are one line on stderr: exit status 1 for a failure, 2 for a usage
// error.
//
// Install it with:
//
//	go install github.com/watermill-inbox/inbox/cmd/inbox@latest
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

// Exit statuses.
const (
	exitOK    = 0
	exitFail  = 1
	exitUsage = 2
)

const usage = `inbox operates the tables of the watermill inbox.

Usage:
  inbox purge  --dsn DSN --older-than 720h [--table inbox] [--schema S] [--batch 10000] [--min-retention 168h] [--force] [--dry-run] [--json|--quiet]
  inbox schema postgres|mysql|sqlite [--table inbox]
  inbox migrate up|status --dsn DSN [--table inbox] [--schema S] [--tenants FILE] [--json]
  inbox stats  --dsn DSN [--table inbox] [--schema S] [--json]
  inbox forget --dsn DSN --consumer C --key K [--table inbox] [--schema S] [--dry-run]
  inbox offsets show  --dsn DSN [--consumer C] [--table inbox] [--json]
  inbox offsets reset --dsn DSN --consumer C --topic T --partition P --to OFFSET [--table inbox] [--brokers B] [--dry-run] [--force]
  inbox ui     --dsn DSN [--table inbox] [--schema S] [--addr 127.0.0.1:8080] [--user inbox]

With a database, schema or key prefix per tenant, --tenants FILE replaces --dsn (and
forget takes --tenant NAME): one "TENANT DSN [SCHEMA]" per line of FILE ("-": stdin).

Run "inbox COMMAND --help" for a command's flags.

DSN is a PostgreSQL URL (postgres://user@host:5432/db), a MySQL DSN
(mysql://user@tcp(host:3306)/db or user@tcp(host:3306)/db), a Redis URL
(redis://host:6379/0) or a SQLite file (sqlite:app.db, or a path ending in .db);
it defaults to $INBOX_DSN.
Exit status: 0 success, 1 failure (one line on stderr), 2 usage error.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// usageError is a command line that cannot be run: exit status 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return usageError{fmt.Sprintf(format, args...)}
}

// run runs one command and returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	commands := map[string]func(context.Context, []string, io.Writer, io.Writer) error{
		"purge":   purgeCmd,
		"schema":  schemaCmd,
		"migrate": migrateCmd,
		"stats":   statsCmd,
		"forget":  forgetCmd,
		"offsets": offsetsCmd,
		"ui":      uiCmd,
	}
	name := args[0]
	switch name {
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return exitOK
	}
	cmd, ok := commands[name]
	if !ok {
		fmt.Fprintf(stderr, "inbox: unknown command %q: use purge, schema, migrate, stats, forget, offsets or ui (inbox --help)\n", name)
		return exitUsage
	}
	err := cmd(ctx, args[1:], stdout, stderr)
	var uerr usageError
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, errHelp):
		return exitOK
	case errors.As(err, &uerr):
		fmt.Fprintf(stderr, "inbox %s: %s (inbox %s --help)\n", name, oneLine(err.Error()), name)
		return exitUsage
	}
	fmt.Fprintf(stderr, "inbox %s: %s\n", name, oneLine(strings.TrimPrefix(err.Error(), "inbox: ")))
	return exitFail
}

// oneLine joins the lines of an error message (errors.Join separates with newlines).
func oneLine(s string) string {
	s = strings.ReplaceAll(strings.ReplaceAll(s, ":\n", ": "), "\n", "; ")
	return strings.Join(strings.Fields(s), " ")
}
