// Package schema is the ent schema of the example: one wallet table.
package schema

import (
	"entgo.io/ent"
	"entgo.io/ent/schema/field"
)

// Wallet holds a balance in cents.
type Wallet struct {
	ent.Schema
}

// Fields of the Wallet.
func (Wallet) Fields() []ent.Field {
	return []ent.Field{
		field.Int64("id"),
		field.Int64("cents").Default(0),
	}
}
