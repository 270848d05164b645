// Package migrations holds the inbox tables as versioned migrations, for the default
// table name "inbox", in the layouts the common Go migration tools read as they are:
//
//   - postgres/, mysql/ and sqlite/: golang-migrate files (000001_inbox.up.sql and
//     .down.sql). Atlas reads them too, with the atlas.sum next to them:
//     atlas migrate apply --dir "file://migrations/postgres?format=golang-migrate".
//   - goose/postgres/, goose/mysql/ and goose/sqlite/: the same migrations as goose files
//     (one file per version with -- +goose Up / Down).
//
// Every file here is generated from the sequences of package schema (schema/steps, one
// step per version, ADR 134) by go generate ./schema, which CreateSchema and `inbox
// migrate up` apply too; schema's TestMigrationFilesAreGenerated fails when they differ.
// Version 4 (SQLite: 3) adds <table>_schema, the record of the tables' version.
//
// Version 3 (000003_offsets) adds the offsets table of offset mode (inbox_offsets);
// only an inbox in offset mode needs it. SQLite, which had no version 2, gets it as
// version 2 (sqlite/000002_offsets).
//
// schema/*.sql states the current schema; the migrations reach it step by step. A
// schema change ships as a new step in schema/steps/<dialect> (and its row in
// schema/*.sql's version table), never as an edit of a released one; go generate
// ./schema then writes the golang-migrate and goose files and atlas.sum. The migratetest module applies them with golang-migrate, goose and
// atlas, as libraries, to PostgreSQL, MariaDB, MySQL and SQLite, and compares the catalog
// with what schema/*.sql creates.
//
// FS embeds the files, for tools that take an fs.FS:
//
//	src, _ := iofs.New(migrations.FS, "postgres") // golang-migrate
//	goose.SetBaseFS(migrations.FS)                // goose, dir "goose/postgres"
package migrations

import "embed"

// FS holds postgres/, mysql/, sqlite/ and goose/.
//
//go:embed postgres mysql sqlite goose
var FS embed.FS
