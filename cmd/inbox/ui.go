package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/watermill-inbox/inbox/inboxui"
)

// uiCmd serves the operator's page (inboxui) on a loopback address, behind Basic
// credentials, until interrupted.
func uiCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var db dbFlags
	var addr, user string
	fs := newFlags("ui", "ui --dsn DSN [--table NAME] [--schema S] [--addr 127.0.0.1:8080] [--user inbox]",
		"Serves the operator's page on a loopback address until interrupted: consumers and their\n"+
			"keys, unfinished attempts, offsets (reset after a confirmation) and tenants. It asks for\n"+
			"the user --user and the password $INBOX_UI_PASSWORD, or, when that is unset, one it\n"+
			"makes up and prints once. The DSN is never printed nor shown on the page.", stdout)
	db.register(fs)
	fs.StringVar(&addr, "addr", "127.0.0.1:8080", "loopback `address` to listen on (port 0: any free port)")
	fs.StringVar(&user, "user", "inbox", "the `name` the page asks for")
	positional, err := fs.parse(args)
	if err != nil {
		return err
	}
	if err := errors.Join(noPositional(positional), db.check(), checkLoopback(addr), nonEmpty("--user", user)); err != nil {
		return usageError{oneLine(err.Error())}
	}
	password := os.Getenv("INBOX_UI_PASSWORD")
	madeUp := password == ""
	if madeUp {
		password = randomPassword()
	}
	store, _, closeDB, err := db.open(ctx, os.Stdin)
	if err != nil {
		return err
	}
	defer closeDB()
	ui, err := inboxui.New(inboxui.Config{
		Store:     store,
		Authorize: inboxui.BasicAuth(user, password),
		Logger:    slog.New(slog.NewTextHandler(stderr, nil)),
	})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", addr, err)
	}
	srv := &http.Server{Handler: ui, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	fmt.Fprintf(stdout, "inbox ui: serving http://%s/ as user %q", ln.Addr(), user)
	if madeUp {
		fmt.Fprintf(stdout, ", password %s (set INBOX_UI_PASSWORD to choose it)\n", password)
	} else {
		fmt.Fprint(stdout, " with the password in $INBOX_UI_PASSWORD\n")
	}
	select {
	case err := <-done:
		return fmt.Errorf("serving: %w", err)
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	return srv.Shutdown(shutdown)
}

// checkLoopback refuses an address that is not on a loopback interface: Basic
// credentials travel in clear over HTTP.
func checkLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--addr %q: %w", addr, err)
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("--addr %q is not a loopback address: the page's credentials would travel in clear; serve it on 127.0.0.1 (reach it through an SSH tunnel or a port forward) or mount inboxui in a server with TLS", addr)
	}
	return nil
}

func nonEmpty(flag, value string) error {
	if value == "" {
		return fmt.Errorf("%s is empty", flag)
	}
	return nil
}

// randomPassword returns 128 random bits in hex.
func randomPassword() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b)
}
