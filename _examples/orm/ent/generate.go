// Package ent is the ent client generated for the example's schema (ent/schema), with
// the sql/execquery feature, which adds ExecContext and QueryContext to the client.
// Regenerate with go generate ./ent (from _examples/orm).
package ent

//go:generate go run -mod=mod entgo.io/ent/cmd/ent generate --feature sql/execquery ./schema
