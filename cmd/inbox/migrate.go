package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
)

// versionedStore is a store whose tables have a schema version: the SQL stores.
type versionedStore interface {
	SchemaVersion(ctx context.Context) (have, want int, err error)
	MigrateSchema(ctx context.Context) (before, after int, err error)
}

// migration is what migrate did, or would do, to one table.
type migration struct {
	Tenant  string `json:"tenant,omitempty"`
	Table   string `json:"table"`
	Schema  string `json:"schema,omitempty"`
	Before  int    `json:"before"`            // the tables' version before; 0: no tables
	After   int    `json:"after"`             // after up; the same as Before for status
	Code    int    `json:"code"`              // the version this build needs
	State   string `json:"state"`             // current, behind, ahead, missing, unversioned
	Message string `json:"message,omitempty"` // what to do, or what failed
}

func migrateCmd(ctx context.Context, args []string, stdout, _ io.Writer) error {
	var db dbFlags
	var asJSON bool
	fs := newFlags("migrate", "migrate up|status --dsn DSN [--table NAME] [--schema S] [--tenants FILE] [--json]",
		"up creates the inbox tables, or upgrades them to the version this build needs with the\n"+
			"steps they lack (schema/steps), in one transaction on PostgreSQL and SQLite, under a\n"+
			"lock any number of runners (and CreateSchema) take in turn. status prints each\n"+
			"table's version and this build's. Tables made before versions were recorded are\n"+
			"recognised by their columns. With --tenants, every tenant's tables, one by one.\n"+
			"Redis has no tables: nothing to migrate.", stdout)
	db.register(fs)
	fs.BoolVar(&asJSON, "json", false, "print as JSON, one object per table")
	positional, err := fs.parse(args)
	if err != nil {
		return err
	}
	if len(positional) != 1 || (positional[0] != "up" && positional[0] != "status") {
		return usagef("name one subcommand: up or status")
	}
	if err := db.check(); err != nil {
		return err
	}
	up := positional[0] == "up"
	type target struct{ tenant, dsn, schema string }
	targets := []target{{dsn: db.dsn, schema: db.schema}}
	if db.tenants != "" {
		entries, err := readTenants(db.tenants, os.Stdin)
		if err != nil {
			return err
		}
		targets = targets[:0]
		for _, e := range entries {
			targets = append(targets, target{e.name, e.dsn, e.schema})
		}
	}
	var failed []error
	for _, t := range targets {
		m := migrateOne(ctx, t.dsn, db.table, t.schema, up)
		m.Tenant = t.tenant
		if m.State == "failed" {
			failed = append(failed, fmt.Errorf("%s: %s", m.name(), m.Message))
		}
		if asJSON {
			if err := json.NewEncoder(stdout).Encode(m); err != nil {
				return err
			}
			continue
		}
		if _, err := fmt.Fprintln(stdout, m.line(up)); err != nil {
			return err
		}
	}
	return errors.Join(failed...)
}

// migrateOne reads, and with up upgrades, the version of one table.
func migrateOne(ctx context.Context, dsn, table, schema string, up bool) migration {
	m := migration{Table: table, Schema: schema}
	fail := func(err error) migration {
		m.State, m.Message = "failed", oneLine(err.Error())
		return m
	}
	store, closeDB, err := connectStore(ctx, dsn, table, schema)
	if err != nil {
		return fail(err)
	}
	defer closeDB()
	v, ok := store.(versionedStore)
	if !ok {
		m.State, m.Message = "unversioned", fmt.Sprintf("a %T has no tables: nothing to migrate", store)
		return m
	}
	if m.Before, m.Code, err = v.SchemaVersion(ctx); err != nil {
		return fail(err)
	}
	m.After = m.Before
	if up && m.Before < m.Code {
		// Another runner may be at it: what this one found is read under the lock.
		if m.Before, m.After, err = v.MigrateSchema(ctx); err != nil {
			return fail(err)
		}
	}
	switch {
	case m.After == 0:
		m.State, m.Message = "missing", "no tables: run inbox migrate up"
	case m.After < m.Code:
		m.State, m.Message = "behind", "run inbox migrate up"
	case m.After > m.Code:
		m.State, m.Message = "ahead", "migrated by a newer build: this build runs on it if the newer version's steps were compatible (inbox.New says)"
	default:
		m.State = "current"
	}
	return m
}

// name names the table, in its schema and tenant.
func (m migration) name() string {
	n := m.Table
	if m.Schema != "" {
		n = m.Schema + "." + n
	}
	if m.Tenant != "" {
		n = "tenant " + m.Tenant + ": " + n
	}
	return n
}

// line is the table's line of the text output.
func (m migration) line(up bool) string {
	switch {
	case m.State == "failed" || m.State == "unversioned":
		return fmt.Sprintf("%s: %s", m.name(), m.Message)
	case up && m.Before != m.After:
		return fmt.Sprintf("%s: version %d -> %d (this build: %d), %s", m.name(), m.Before, m.After, m.Code, m.State)
	}
	s := fmt.Sprintf("%s: version %d (this build: %d), %s", m.name(), m.After, m.Code, m.State)
	if m.Message != "" {
		s += ": " + m.Message
	}
	return s
}
